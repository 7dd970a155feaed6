"""The fleet's probing loop: every target on its own schedule, results kept as immutable snapshots.

One task per target. A round: readiness (``/readiness`` for a router, ``/health`` for a server),
then, when ready and enabled, the canaries (named for the model of ``/v1/models``, which a router
enforces), then, for a router, its worker pool. The round's results replace the target's entry
in :attr:`Prober.results` as one :class:`TargetResult`; ``/probe?target=`` reads that entry and
never waits for a probe (blackbox_exporter probes on request; here the schedule is the fleet's,
so a scrape storm costs the targets nothing). The supervisor's probes are reused as they are:
no restart, no state machine — a fleet only observes.
"""

from __future__ import annotations

import asyncio
import random
import time
import zlib
from dataclasses import dataclass, replace

import httpx

from sglang_sentinel.fleet.settings import FleetSettings, FleetTarget
from sglang_sentinel.fleet.slo import SloResult, run_slo
from sglang_sentinel.httpread import tls_context
from sglang_sentinel.log import get_logger
from sglang_sentinel.router import READINESS_PATH, RouterReadError, RouterSnapshot, read_router, resolve_model
from sglang_sentinel.router.detect import probe_once
from sglang_sentinel.supervise.probes import ProbeResult, probe_canary, probe_health

__all__ = ["Prober", "ProberStats", "TargetResult", "phase"]

_log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class TargetResult:
    target: FleetTarget
    probes: tuple[ProbeResult, ...]
    router: RouterSnapshot | None
    router_error: str | None
    started: float  # wall clock of the round's start
    duration: float  # seconds the whole round took
    lag: float  # seconds the round started after its planned time (a busy prober shows here)
    # The latest SLO round ([fleet.slo]), carried from round to round until the next one.
    slo: SloResult | None = None
    # What the configuration said of ``kind`` (``target.kind`` is the kind probed: for "auto",
    # the detected one, "server" while undecided) and the routes that decided it.
    declared_kind: str = ""
    kind_evidence: str = ""
    kind_undecided: bool = False  # "auto" and no verdict yet: probed as a server this round


@dataclass(frozen=True, slots=True)
class ProberStats:
    """The prober's own figures, replaced whole after every round (read by the scrape threads)."""

    targets: int = 0
    rounds_ok: int = 0
    rounds_failed: int = 0
    last_lag: float = 0.0
    max_lag: float = 0.0


def phase(name: str, interval: float) -> float:
    """The target's fixed offset within the interval: spread by name, stable across restarts."""
    return (zlib.crc32(name.encode()) % 10_000) / 10_000 * interval


async def probe_target(
    client: httpx.AsyncClient, target: FleetTarget, settings: FleetSettings
) -> tuple[tuple[ProbeResult, ...], RouterSnapshot | None, str | None]:
    path = READINESS_PATH if target.kind == "router" else "/health"
    ready = await probe_health(client, path, "readiness", settings.readiness_timeout)
    results = [ready]
    if ready.ok and target.canaries and settings.canary.enabled and settings.canary.canaries:
        canary = settings.canary
        try:
            model = await resolve_model(client, settings.readiness_timeout)
            canary = canary.model_copy(update={"model": model})
        except RouterReadError:
            # A plain SGLang server answers any model name: the configured one stays; a router
            # that lists no model fails its canaries with the reason it gives (404).
            pass
        for spec in canary.canaries:  # sequential: canaries must not burst into a struggling target
            results.append(await probe_canary(client, spec, canary))
    snap: RouterSnapshot | None = None
    err: str | None = None
    if target.kind == "router":
        try:
            snap = await read_router(
                client,
                timeout_s=settings.readiness_timeout,
                metrics_url=target.router_metrics_url or None,
            )
        except RouterReadError as exc:
            err = exc.reason
    return tuple(results), snap, err


class Prober:
    """Runs the rounds; ``results`` maps a target's name to its latest :class:`TargetResult`."""

    def __init__(self, settings: FleetSettings, *, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self.settings = settings
        self._transport = transport
        self.results: dict[str, TargetResult] = {}
        self.targets: dict[str, FleetTarget] = {}  # replaced whole, never mutated
        self.stats = ProberStats()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._gate = asyncio.Semaphore(settings.max_concurrency)
        self._t0 = time.monotonic()

    def set_targets(self, targets: tuple[FleetTarget, ...]) -> None:
        """Start, stop or restart tasks so that exactly ``targets`` are probed (a changed target restarts)."""
        wanted = {t.name: t for t in targets}
        for name in list(self._tasks):
            if wanted.get(name) != self.targets.get(name):
                self._tasks.pop(name).cancel()
                self.results = {k: v for k, v in self.results.items() if k != name}
        for name, target in wanted.items():
            if name not in self._tasks:
                self._tasks[name] = asyncio.create_task(self._run(target), name=f"fleet-{name}")
        self.targets = wanted
        self.stats = replace(self.stats, targets=len(wanted))

    async def stop(self) -> None:
        tasks = list(self._tasks.values())
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks.clear()

    async def _run(self, target: FleetTarget) -> None:
        s = self.settings
        headers = {"Authorization": f"Bearer {target.api_key}"} if target.api_key else None
        async with httpx.AsyncClient(
            base_url=target.url,
            headers=headers,
            transport=self._transport,
            trust_env=False,
            verify=tls_context(trust_env=False),
        ) as client:
            # Planned times on a fixed grid (interval, shifted by the target's phase): a slow
            # round delays the next one but never shifts the grid, so lag is measurable.
            planned = self._t0 + phase(target.name, s.interval)
            rounds = 0
            slo: SloResult | None = None
            declared = target.kind
            evidence = ""
            while True:
                jitter = random.uniform(0, s.jitter * s.interval) if s.jitter else 0.0
                await asyncio.sleep(max(0.0, planned + jitter - time.monotonic()))
                async with self._gate:
                    start = time.monotonic()
                    lag = max(0.0, start - planned - jitter)
                    wall = time.time()
                    if target.kind == "auto":
                        # Until decided: three GETs more per round, and the round reads it as a server.
                        found = await probe_once(client, s.readiness_timeout)
                        evidence = found.evidence
                        if found.kind is not None:
                            _log.info(
                                "fleet_target_kind_detected",
                                target=target.name,
                                kind=found.kind,
                                evidence=evidence,
                            )
                            target = target.model_copy(update={"kind": found.kind})
                    probed = target if target.kind != "auto" else target.model_copy(update={"kind": "server"})
                    try:
                        probes, snap, err = await probe_target(client, probed, s)
                    except Exception:  # a defect in one target's round must not end its schedule
                        _log.exception("fleet_round_failed", target=target.name)
                        probes, snap, err = (), None, "error"
                    # The first round and every every_rounds-th, only while the target is ready.
                    if s.slo.enabled and rounds % s.slo.every_rounds == 0 and probes and probes[0].ok:
                        try:
                            slo = await run_slo(target, s.slo)
                        except Exception:
                            _log.exception("fleet_slo_failed", target=target.name)
                    rounds += 1
                    took = time.monotonic() - start
                    result = TargetResult(
                        probed,
                        probes,
                        snap,
                        err,
                        wall,
                        took,
                        lag,
                        slo,
                        declared,
                        evidence,
                        target.kind == "auto",
                    )
                # The results dict maps names to immutable results; a scrape reads one entry.
                self.results = {**self.results, target.name: result}
                ok = bool(probes) and all(p.ok for p in probes) and err is None
                st = self.stats
                self.stats = replace(
                    st,
                    rounds_ok=st.rounds_ok + ok,
                    rounds_failed=st.rounds_failed + (not ok),
                    last_lag=lag,
                    max_lag=max(st.max_lag, lag),
                )
                planned += s.interval
                while planned < time.monotonic():  # rounds missed entirely are skipped, not queued
                    planned += s.interval
