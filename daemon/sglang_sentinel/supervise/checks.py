"""The check loops of a running server and what they found.

One task per enabled check family (health, health_generate, stall, canary), each on its own
interval (shorter while failing). A result updates the last-result table, the failure counters and
the ready ⇄ unhealthy state; a check whose ``action`` is ``restart`` asks for a restart after
``failures`` consecutive conclusive failures. The supervisor owns the tasks' lifetime (one server
life) and publishes its snapshot after every result.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections import Counter
from collections.abc import Awaitable, Callable

import httpx

from sglang_sentinel.log import get_logger
from sglang_sentinel.supervise.gaps import GapWatch
from sglang_sentinel.supervise.probes import (
    ProbeResult,
    StallDetector,
    probe_canary,
    probe_health,
    read_progress,
)
from sglang_sentinel.supervise.settings import CheckSettings, ChecksSettings
from sglang_sentinel.supervise.state import ServerState, StateMachine

__all__ = ["Checks"]

_log = get_logger(__name__)

_Probe = Callable[[], Awaitable[list[ProbeResult]]]


class Checks:
    """Probe results and the loops that produce them (event loop only)."""

    def __init__(
        self,
        settings: ChecksSettings,
        machine: StateMachine,
        *,
        request_restart: Callable[[str], None],
        on_result: Callable[[ProbeResult], None],
        publish: Callable[[], None],
        gaps: GapWatch | None = None,
    ) -> None:
        """``on_result`` sees every recorded result before the state follows it (the supervisor
        takes ``up`` from health results); ``publish`` runs once the result is fully applied."""
        self.settings = settings
        self._machine = machine
        self._request_restart = request_restart
        self._on_result = on_result
        self._publish = publish
        self.probes: dict[str, ProbeResult] = {}
        self.failures: Counter[tuple[str, str]] = Counter()
        self._consecutive: Counter[str] = Counter()
        # Probes of the current server whose conclusive failures in a row reached their check's
        # ``failures`` (the point where child mode restarts): the verdict endpoint's "confirmed".
        # Maps probe -> failures in a row; its failing result is in ``probes``.
        self.confirmed: dict[str, int] = {}
        self._stall = StallDetector(settings.stall.stall_after)
        self._stall_unsupported_logged = False
        # Time the daemon was away is not evidence (gaps.py); one whose heartbeat is not running reports none.
        self._gaps = gaps if gaps is not None else GapWatch()
        self._stall_seen: float | None = None

    def reset(self) -> None:
        """A new server: no consecutive failures, no stall history (the table and counters stay)."""
        self._stall.reset()
        self._stall_seen = None
        self._consecutive.clear()
        self.confirmed = {}  # a verdict is about the server that gave it

    def start(
        self, client: httpx.AsyncClient, *, allow_restart: bool, include_health: bool = True
    ) -> list[asyncio.Task[None]]:
        """One task per enabled check; the caller cancels them when the server's life ends."""
        c = self.settings
        tasks: list[asyncio.Task[None]] = []

        def spawn(settings: CheckSettings, family: str, fn: _Probe) -> None:
            if settings.enabled:
                tasks.append(asyncio.create_task(self._loop(settings, family, fn, allow_restart)))

        async def health() -> list[ProbeResult]:
            return [await probe_health(client, "/health", "health", c.health.timeout)]

        async def health_generate() -> list[ProbeResult]:
            return [
                await probe_health(client, "/health_generate", "health_generate", c.health_generate.timeout)
            ]

        async def stall() -> list[ProbeResult]:
            t0 = time.monotonic()
            try:
                progress = await read_progress(client, c.stall.timeout)
            except (httpx.HTTPError, ValueError) as exc:
                return [
                    ProbeResult(
                        "stall",
                        False,
                        time.monotonic() - t0,
                        "metrics_error",
                        str(exc)[:200],
                        conclusive=False,
                    )
                ]
            now = time.monotonic()
            if self._stall_seen is not None and self._gaps.gap_since(self._stall_seen):
                self._stall.rebase(now)
            self._stall_seen = now
            r = self._stall.observe(progress, now)
            return [
                ProbeResult(r.probe, r.ok, time.monotonic() - t0, r.reason, r.detail, conclusive=r.conclusive)
            ]

        async def canaries() -> list[ProbeResult]:
            # Sequential: canaries must not add a burst of load to a struggling server.
            return [await probe_canary(client, spec, c.canary) for spec in c.canary.canaries]

        if include_health:
            spawn(c.health, "health", health)
        spawn(c.health_generate, "health_generate", health_generate)
        spawn(c.stall, "stall", stall)
        if c.canary.canaries:
            spawn(c.canary, "canary", canaries)
        return tasks

    async def _loop(self, settings: CheckSettings, family: str, fn: _Probe, allow_restart: bool) -> None:
        first = True
        failing = False
        while True:
            # Canaries run once right after ready (a broken backend answers nonsense from the
            # first request on); the other checks start one interval later.
            if not (first and family == "canary"):
                wait = settings.interval
                if failing and settings.retry_interval is not None:
                    wait = min(wait, settings.retry_interval)
                await asyncio.sleep(wait)
            first = False
            t0 = time.monotonic()
            try:
                results = await fn()
            except Exception:
                # A bug in a probe must not silently end the check (or the supervisor).
                _log.exception("check_crashed", check=family)
                continue
            if self._gaps.gap_since(t0):
                # In flight while the daemon was away: a timeout then says nothing about the server.
                results = [
                    r if r.ok else dataclasses.replace(r, conclusive=False, detail=f"daemon away: {r.detail}")
                    for r in results
                ]
            for result in results:
                self.record(result, settings, family, allow_restart)
            # Failing while a probe's last verdict is a failure: an inconclusive result (the
            # daemon away, /metrics unreadable) keeps the retry cadence of the failure before it,
            # where it fell back to the full interval (a canary's 5 minutes) with the failure
            # still unresolved.
            failing = any(self._consecutive[r.probe] > 0 for r in results)

    def record(self, result: ProbeResult, settings: CheckSettings, family: str, allow_restart: bool) -> None:
        """Account for one result: table, counters, ready ⇄ unhealthy, and maybe a restart request."""
        if result.reason == "unsupported":
            if not self._stall_unsupported_logged:
                _log.warning("stall_check_unavailable", detail=result.detail)
                self._stall_unsupported_logged = True
            return
        if result.conclusive:
            # The success series carries verdicts only: "could not read /metrics" is counted in
            # sentinel_probe_failures_total but must not look like "stalled".
            self.probes[result.probe] = result
        if result.ok:
            self._consecutive[result.probe] = 0
            self.confirmed.pop(result.probe, None)
        else:
            self.failures[(result.probe, result.reason)] += 1
            if result.conclusive:
                self._consecutive[result.probe] += 1
            _log.warning(
                "check_failed",
                probe=result.probe,
                reason=result.reason,
                detail=result.detail,
                consecutive=self._consecutive[result.probe],
            )
        self._on_result(result)
        machine = self._machine
        failing = [p for p, n in self._consecutive.items() if n > 0]
        if failing and machine.state is ServerState.READY:
            machine.set(ServerState.UNHEALTHY, f"{result.probe}: {result.reason}")
        elif not failing and machine.state is ServerState.UNHEALTHY:
            machine.set(ServerState.READY, "all checks passing")
        n = self._consecutive[result.probe]
        if not result.ok and result.conclusive and n >= settings.failures:
            self.confirmed[result.probe] = n
        self._publish()
        if not result.ok and result.conclusive and n >= settings.failures:
            if settings.action == "restart" and allow_restart:
                self._request_restart(family)
            elif n == settings.failures:
                _log.error(
                    "check_failing_alert_only", probe=result.probe, reason=result.reason, consecutive=n
                )
