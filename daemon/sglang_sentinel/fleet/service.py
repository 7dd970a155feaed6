"""The fleet process: prober, file_sd reloads and the HTTP side (``/probe?target=``, ``/metrics``).

``/probe?target=NAME`` answers the target's latest cached round in the exposition format, in
blackbox_exporter's multi-target shape, so the standard relabelling (``__address__`` ->
``__param_target``) works (deploy/fleet/prometheus.yml). ``/metrics`` is the fleet's own health:
targets, rounds, probe lag, file_sd reloads. Served by :class:`sglang_sentinel.export.Exporter`
(TLS, basic auth, the scrape limit come with it).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

from aiohttp import web
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric

from sglang_sentinel.collect.render import Format, render
from sglang_sentinel.collect.router import router_families
from sglang_sentinel.export.server import Exporter
from sglang_sentinel.fleet.prober import Prober, TargetResult
from sglang_sentinel.fleet.settings import FleetFile, FleetTarget
from sglang_sentinel.fleet.slo import slo_families
from sglang_sentinel.fleet.targets import FileSdError, read_file_sd
from sglang_sentinel.log import get_logger
from sglang_sentinel.router.detect import TargetInfo

__all__ = ["FleetService", "result_families"]

_log = get_logger(__name__)


def result_families(result: TargetResult) -> list[Metric]:
    """What ``/probe`` serves for one target's round."""
    success = GaugeMetricFamily(
        "sentinel_probe_success", "1 when the probe passed in the latest round.", labels=["probe"]
    )
    duration = GaugeMetricFamily(
        "sentinel_probe_duration_seconds", "How long the probe took in the latest round.", labels=["probe"]
    )
    failure = GaugeMetricFamily(
        "sentinel_probe_failure_info",
        "The failure reason of a probe that failed (value 1).",
        labels=["probe", "reason"],
    )
    for p in result.probes:
        success.add_metric([p.probe], 1.0 if p.ok else 0.0)
        duration.add_metric([p.probe], p.duration)
        if not p.ok:
            failure.add_metric([p.probe, p.reason], 1.0)
    ts = GaugeMetricFamily(
        "sentinel_fleet_round_timestamp_seconds",
        "When the latest round of this target started (the result's age).",
    )
    ts.add_metric([], result.started)
    round_s = GaugeMetricFamily("sentinel_fleet_round_duration_seconds", "How long the latest round took.")
    round_s.add_metric([], result.duration)
    out: list[Metric] = [success, duration, failure, ts, round_s]
    if result.declared_kind == "auto":
        info = TargetInfo(result.target.kind, "auto", result.kind_evidence, undecided=result.kind_undecided)
        out.extend(info.collect())
    if result.target.kind == "router":
        read = GaugeMetricFamily(
            "sentinel_router_read_success",
            "1 when the router's /workers was read in the latest round (else no pool series).",
        )
        read.add_metric([], 1.0 if result.router is not None else 0.0)
        out.append(read)
        if result.router_error is not None:
            failure.add_metric(["router_workers", result.router_error], 1.0)
    if result.router is not None:
        out.extend(router_families(result.router))
    if result.slo is not None:
        out.extend(slo_families(result.slo))
    return out


class _Families:
    def __init__(self, families: list[Metric]) -> None:
        self._families = families

    def collect(self) -> Iterator[Metric]:
        yield from self._families


class FleetService:
    def __init__(self, config: FleetFile) -> None:
        self.config = config
        self.prober = Prober(config.fleet)
        # (reloads, refused reads): one tuple, rebound whole, for the scrape threads.
        self._sd_counts = (0, 0)
        self._sd_mtime: int | None = None
        self._sd_targets: tuple[FleetTarget, ...] = ()
        self._sd_task: asyncio.Task[None] | None = None
        self.exporter = Exporter(
            self, config.exporter, routes=[web.get("/probe", self._probe)], health=self._health
        )

    # ---- own health (/metrics)
    def collect(self) -> Iterator[Metric]:
        p = self.prober.stats
        reloads_n, errors_n = self._sd_counts
        targets = GaugeMetricFamily("sentinel_fleet_targets", "Targets being probed.")
        targets.add_metric([], float(p.targets))
        rounds = CounterMetricFamily(
            "sentinel_fleet_rounds", "Probe rounds finished, by outcome.", labels=["outcome"]
        )
        for outcome in ("ok", "failed"):
            rounds.add_metric([outcome], float(p.rounds_ok if outcome == "ok" else p.rounds_failed))
        lag = GaugeMetricFamily(
            "sentinel_fleet_probe_lag_seconds",
            "How late the latest round started after its planned time (a saturated prober shows here).",
        )
        lag.add_metric([], p.last_lag)
        max_lag = GaugeMetricFamily("sentinel_fleet_probe_lag_max_seconds", "The largest lag since start.")
        max_lag.add_metric([], p.max_lag)
        reloads = CounterMetricFamily(
            "sentinel_fleet_file_sd_reloads", "file_sd reads that changed the targets."
        )
        reloads.add_metric([], float(reloads_n))
        errors = CounterMetricFamily(
            "sentinel_fleet_file_sd_errors", "file_sd reads refused (the previous targets stay)."
        )
        errors.add_metric([], float(errors_n))
        yield from (targets, rounds, lag, max_lag, reloads, errors)

    def _health(self) -> tuple[bool, str]:
        return True, f"ok: {self.prober.stats.targets} targets"

    async def _probe(self, request: web.Request) -> web.StreamResponse:
        name = request.query.get("target", "")
        if name not in self.prober.targets:
            return web.Response(status=404, text=f"unknown target {name[:128]!r}\n")
        result = self.prober.results.get(name)
        _, content_type = choose_encoder(request.headers.get("Accept", ""))
        fmt: Format = "openmetrics" if content_type.startswith("application/openmetrics-text") else "text"
        # Not probed yet: an empty exposition (no sentinel_probe_success), not a guess.
        families = result_families(result) if result is not None else []
        return web.Response(body=render(_Families(families), fmt), headers={"Content-Type": content_type})

    # ---- targets
    def _reload_file_sd(self) -> None:
        path = self.config.fleet.file_sd
        assert path is not None
        try:
            mtime = path.stat().st_mtime_ns
        except OSError as exc:
            if self._sd_mtime != -1:
                self._count_sd(error=True)
                _log.warning("fleet_file_sd_unreadable", path=str(path), error=exc.strerror or str(exc))
            self._sd_mtime = -1
            return
        if mtime == self._sd_mtime:
            return
        self._sd_mtime = mtime
        try:
            targets = read_file_sd(path)
        except FileSdError as exc:
            self._count_sd(error=True)
            _log.warning("fleet_file_sd_refused", error=str(exc))
            return
        self._sd_targets = targets
        self._apply()
        self._count_sd(error=False)
        _log.info("fleet_file_sd_loaded", path=str(path), targets=len(targets))

    def _count_sd(self, *, error: bool) -> None:
        reloads, errors = self._sd_counts
        self._sd_counts = (reloads, errors + 1) if error else (reloads + 1, errors)

    def _apply(self) -> None:
        static = {t.name: t for t in self.config.fleet.targets}
        # A static target wins over a file_sd one of the same name: the TOML is the operator's word.
        merged = {**{t.name: t for t in self._sd_targets}, **static}
        self.prober.set_targets(tuple(merged.values()))

    async def _watch_file_sd(self) -> None:
        while True:
            await asyncio.sleep(self.config.fleet.file_sd_check_interval)
            self._reload_file_sd()

    async def start(self) -> None:
        await self.exporter.start()
        if self.config.fleet.file_sd is not None:
            self._reload_file_sd()
            self._sd_task = asyncio.create_task(self._watch_file_sd())
        self._apply()
        _log.info("fleet_started", url=self.exporter.url, targets=len(self.prober.targets))

    async def stop(self) -> None:
        if self._sd_task is not None:
            self._sd_task.cancel()
            await asyncio.gather(self._sd_task, return_exceptions=True)
        await self.prober.stop()
        await self.exporter.stop()
