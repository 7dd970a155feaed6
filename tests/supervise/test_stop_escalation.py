"""A stop that SIGTERM does not end: SIGKILL of the group after ``stop_timeout``, logged and counted.

The server is the simulator as a multi-node rank 1 (``--nnodes 2 --node-rank 1``): SGLang 0.5.23
ignores SIGTERM there (it logs that it waits for rank 0's ShutdownReq broadcast, which never comes
here: rank 0 is not started, so the node waits in the rendezvous), 0.5.9 has no handler and ends.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, MutableMapping
from typing import Any

import pytest
import structlog
from prometheus_client import CollectorRegistry

from sglang_sentinel.supervise import Supervisor
from sglang_sentinel.supervise.launch import LaunchCommand
from sglang_sentinel.supervise.settings import ServerSettings
from support.ports import free_port as _free_port

Fast = Callable[..., ServerSettings]
SimCmd = Callable[..., LaunchCommand]


def _stop_kills(sup: Supervisor) -> float | None:
    reg = CollectorRegistry()
    reg.register(sup.collector())
    return reg.get_sample_value("sentinel_server_stop_kills_total")


async def _rank1_stopped(
    fast: Fast, sim_cmd: SimCmd, port: int, version: str, alive: Callable[[int], bool]
) -> tuple[Supervisor, list[str], float, list[MutableMapping[str, Any]]]:
    cmd = sim_cmd(
        port,
        *("--sglang-version", version, "--nnodes", "2", "--node-rank", "1"),
        # Rank 0 is never started: the node waits in the rendezvous (hours of server time).
        *("--dist-init-addr", f"127.0.0.1:{_free_port()}", "--dist-timeout", "1000000"),
    )
    sup = Supervisor(fast(port, stop_timeout=1.0), command=cmd)
    lines: list[str] = []
    sup.add_line_listener(lambda line: lines.append(line.text))
    assert _stop_kills(sup) == 0  # exported at 0 from the start
    await sup.start()
    # The SIGTERM handler is installed before the rendezvous begins: wait for its first line.
    for _ in range(400):
        if any("Init torch distributed begin." in line for line in lines):
            break
        await asyncio.sleep(0.025)
    else:
        await sup.stop()
        pytest.fail(f"the rank-1 simulator never reached the rendezvous: {lines[-5:]}")
    pid = sup.server_pid
    assert pid is not None
    t0 = time.monotonic()
    with structlog.testing.capture_logs() as logs:
        await sup.stop()
    took = time.monotonic() - t0
    assert not alive(pid)
    return sup, lines, took, logs


async def test_a_rank_1_that_ignores_sigterm_is_killed_after_stop_timeout_and_counted(
    fast: Fast, sim_cmd: SimCmd, port: int, alive: Callable[[int], bool]
) -> None:
    sup, lines, took, logs = await _rank1_stopped(fast, sim_cmd, port, "0.5.23", alive)
    assert any(
        "SIGTERM received on node_rank 1; waiting for the rank-0 ShutdownReq" in line for line in lines
    )
    assert took >= 1.0  # the whole grace, then SIGKILL
    kills = [e for e in logs if e["event"] == "server_stop_timeout_killing_group"]
    assert len(kills) == 1
    assert kills[0]["timeout"] == 1.0
    stopped = [e for e in logs if e["event"] == "server_stopped"]
    assert stopped[0]["exit"] == "killed by signal 9 (SIGKILL) after SIGTERM + 1 s"
    assert _stop_kills(sup) == 1


async def test_a_rank_1_that_obeys_sigterm_is_not_counted(
    fast: Fast, sim_cmd: SimCmd, port: int, alive: Callable[[int], bool]
) -> None:
    sup, _, took, logs = await _rank1_stopped(fast, sim_cmd, port, "0.5.9", alive)
    assert took < 1.0
    assert not [e for e in logs if e["event"] == "server_stop_timeout_killing_group"]
    assert _stop_kills(sup) == 0
