"""This server as one node of a multi-node SGLang group (``[group]``; sentinel/group/).

What the supervisor itself needs to know: the launch flags (``--nnodes``, ``--node-rank``,
``--dist-init-addr``, SGLang's names, added to whatever the profile renders) and, on a rank ≥ 1,
how such a node shows it is up. SGLang serves no API there: only a dummy health server whose
``/ping``, ``/health`` and ``/health_generate`` answer 200 unconditionally (srt/utils/common.py
``launch_dummy_health_check_server``), so ``/health`` proves nothing and is never probed. The
node is *running* once its process lives and it has logged ``Dummy health check server started``
— printed only after its schedulers joined rank 0's rendezvous and loaded their shard
(srt/entrypoints/engine.py, node_rank >= 1) — and until the process exits.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, replace

from sglang_sentinel.supervise.launch import LaunchCommand
from sglang_sentinel.supervise.logbus import LogBus, LogLine
from sglang_sentinel.supervise.runners import ExitInfo
from sglang_sentinel.supervise.state import ServerState, StateMachine
from sglang_sentinel.supervise.tasks import either

__all__ = ["FOLLOWER_READY_MARK", "GroupMember", "follow"]

FOLLOWER_READY_MARK = "Dummy health check server started"


@dataclass(frozen=True, slots=True)
class GroupMember:
    nnodes: int
    node_rank: int
    dist_init_addr: str

    @property
    def follower(self) -> bool:
        """A rank ≥ 1: no API, readiness from the process and its log."""
        return self.node_rank >= 1

    def argv(self) -> tuple[str, ...]:
        return (
            "--nnodes",
            str(self.nnodes),
            "--node-rank",
            str(self.node_rank),
            "--dist-init-addr",
            self.dist_init_addr,
        )

    def apply(self, command: LaunchCommand) -> LaunchCommand:
        """``command`` with the group's flags (so they are part of the launch hash too)."""
        if "--node-rank" in command.argv:
            return command  # already applied (a re-render starts from the profile again)
        return replace(command, argv=(*command.argv, *self.argv()))


async def follow(
    bus: LogBus,
    machine: StateMachine,
    start_timeout: float,
    exit_task: asyncio.Task[ExitInfo],
    restart_req: asyncio.Future[str],
) -> tuple[str, str] | None:
    """A rank ≥ 1's life after launch: STARTING until the mark, RUNNING until exit or a restart.

    None when the server exited; else the (reason, detail) of the deliberate stop to make."""
    marked = asyncio.Event()

    def on_line(line: LogLine) -> None:
        if FOLLOWER_READY_MARK in line.text:
            marked.set()

    unsubscribe = bus.add_listener(on_line)
    mark = asyncio.ensure_future(marked.wait())
    t0 = time.monotonic()
    try:
        done, _ = await asyncio.wait(
            [*either(exit_task, restart_req), mark],
            timeout=start_timeout,
            return_when=asyncio.FIRST_COMPLETED,
        )
        if exit_task in done:
            return None
        if restart_req in done:
            return restart_req.result(), "restart requested"
        if mark not in done:
            return "startup_timeout", f"rank >= 1 not joined after {start_timeout:g} s"
        machine.set(ServerState.RUNNING, f"rank >= 1 joined after {time.monotonic() - t0:.1f} s (log)")
        done, _ = await asyncio.wait(either(exit_task, restart_req), return_when=asyncio.FIRST_COMPLETED)
        return None if exit_task in done else (restart_req.result(), "restart requested")
    finally:
        unsubscribe()
        mark.cancel()
