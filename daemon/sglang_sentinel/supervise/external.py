"""External mode: observe a server someone else runs — states and checks, never a restart.

Apart from the supervisor's life cycle because it shares none of it (no runner, no preflight, no
restart policy or history): one poll loop over the readiness probe that drives the state machine
and the checks and keeps the figures the supervisor publishes. Those collaborators are handed in
explicitly; the figures through :class:`ObservedFigures`, which the supervisor satisfies.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

import httpx

from sglang_sentinel.router import READINESS_PATH, RouterReadError, resolve_model
from sglang_sentinel.supervise.checks import Checks
from sglang_sentinel.supervise.probes import ProbeResult, probe_health
from sglang_sentinel.supervise.settings import ServerSettings
from sglang_sentinel.supervise.state import ServerState, StateMachine
from sglang_sentinel.supervise.tasks import cancel_all

__all__ = ["ObservedFigures", "observe_external"]

_ALIVE = (ServerState.READY, ServerState.UNHEALTHY)


class ObservedFigures(Protocol):
    """The supervisor's figures the observation keeps up to date (its snapshot publishes them)."""

    up: bool
    epoch: float | None
    ready_timestamp: float | None
    start_duration: float | None


async def _use_router_model(
    client: httpx.AsyncClient, checks: Checks, settings: ServerSettings, ready: ProbeResult
) -> ProbeResult:
    """Point the canaries at the model the router serves (it 404s any other name); no stall check.

    A router that is ready but lists no model is not ready for the canaries either: the
    readiness result becomes a failure naming why, and the next poll tries again.
    """
    try:
        model = await resolve_model(client, settings.checks.health.timeout)
    except RouterReadError as exc:
        return ProbeResult("health", False, ready.duration, f"models_{exc.reason}", exc.detail, 200)
    c = checks.settings
    if c.canary.model != model or c.stall.enabled:
        canary = c.canary.model_copy(update={"model": model})
        # The router has no /metrics (and no /v1/loads): a stall is a worker's, seen by the
        # sentinel on that worker's node, not through the router.
        stall = c.stall.model_copy(update={"enabled": False})
        checks.settings = c.model_copy(update={"canary": canary, "stall": stall})
    return ready


async def observe_external(
    settings: ServerSettings,
    client: httpx.AsyncClient,
    *,
    checks: Checks,
    machine: StateMachine,
    figures: ObservedFigures,
    publish: Callable[[], None],
) -> None:
    """Observe a server someone else runs: states and checks, never a restart (runs until cancelled)."""
    s = settings
    running: list[asyncio.Task[None]] = []
    seen_at: float | None = None
    # A router's /health is 200 with no worker at all: its readiness is /readiness.
    path = READINESS_PATH if s.kind == "router" else "/health"
    try:
        while True:
            r = await probe_health(client, path, "health", s.checks.health.timeout)
            alive = machine.state in _ALIVE
            if r.ok and not alive and s.kind == "router":
                r = await _use_router_model(client, checks, s, r)
            if r.ok and not alive:
                if seen_at is not None:
                    figures.start_duration = time.monotonic() - seen_at
                figures.ready_timestamp = figures.epoch = time.time()
                checks.reset()
                machine.set(ServerState.READY, f"{path} 200")
                running = checks.start(client, allow_restart=False, include_health=False)
            if r.reason == "refused":
                await cancel_all(running)
                seen_at = None
                figures.up = False
                figures.epoch = None
                checks.probes["health"] = r
                machine.set(ServerState.STOPPED, "port refused")
                publish()
            elif r.ok or alive:
                checks.record(r, s.checks.health, "health", allow_restart=False)
            else:
                seen_at = seen_at if seen_at is not None else time.monotonic()
                checks.probes["health"] = r
                machine.set(ServerState.WARMING, f"{path} {r.reason}")
                publish()
            alive = machine.state in _ALIVE
            await asyncio.sleep(s.checks.health.interval if alive else s.startup_poll_interval)
    finally:
        await cancel_all(running)
