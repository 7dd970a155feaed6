"""The wait for readiness after a launch: STARTING (port refused) → WARMING (/health not 200 yet)
→ ready, unless the server exits, a restart is asked for, or ``start_timeout`` passes first.

The rank-0 (and single-node) counterpart of :func:`~sglang_sentinel.supervise.member.follow`; the
supervisor turns the verdict into the life's outcome (a crash to classify, a stop to make).
"""

from __future__ import annotations

import asyncio
import time
from typing import Literal

import httpx

from sglang_sentinel.log import get_logger
from sglang_sentinel.supervise.gaps import GapWatch
from sglang_sentinel.supervise.probes import probe_health
from sglang_sentinel.supervise.runners import ExitInfo
from sglang_sentinel.supervise.settings import ServerSettings
from sglang_sentinel.supervise.state import ServerState, StateMachine
from sglang_sentinel.supervise.tasks import either

__all__ = ["await_ready"]

_log = get_logger(__name__)


async def await_ready(
    client: httpx.AsyncClient,
    settings: ServerSettings,
    machine: StateMachine,
    gaps: GapWatch,
    launch_t0: float,
    exit_task: asyncio.Task[ExitInfo],
    restart_req: asyncio.Future[str],
) -> Literal["ready", "exited"] | tuple[str, str]:
    """Poll ``/health`` every ``startup_poll_interval`` until it answers 200.

    "ready" once it did (the server had not exited when it answered), "exited" when the server
    exited first, else the (reason, detail) of the deliberate stop to make (``startup_timeout``, or
    the reason of a restart asked for meanwhile)."""
    s = settings
    probe_timeout = min(s.checks.health.timeout, max(s.startup_poll_interval, 1.0))
    deadline = launch_t0 + s.start_timeout
    away0 = gaps.away_total()
    while True:
        result = await probe_health(client, "/health", "startup", probe_timeout)
        if exit_task.done():
            return "exited"
        if result.ok:
            return "ready"
        if result.reason == "refused":
            machine.set(ServerState.STARTING, "port refused")
        elif result.status_code is not None:
            machine.set(ServerState.WARMING, f"/health {result.status_code}")
        # Seconds the daemon was away are not seconds the server failed to start in.
        now = time.monotonic() - (gaps.away_total() - away0)
        if now >= deadline:
            detail = f"not ready after {s.start_timeout:g} s (last /health: {result.reason})"
            _log.error("startup_timeout", detail=detail)
            return "startup_timeout", detail
        wait = min(s.startup_poll_interval, deadline - now)
        done, _ = await asyncio.wait(
            either(exit_task, restart_req), timeout=wait, return_when=asyncio.FIRST_COMPLETED
        )
        if exit_task in done:
            return "exited"
        if restart_req in done:
            return restart_req.result(), "restart requested"
