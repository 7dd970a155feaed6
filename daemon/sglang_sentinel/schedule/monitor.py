"""What the scheduler watches beside a run, and the views it watches through.

:class:`RunMonitor` runs next to every load run (and calibration sweep): each check interval it
asks the server view whether the server life is still the same, the polite check whether foreign
traffic appeared, and the circuit breaker (failures, KV usage, GPU heat and throttling) whether
the run is doing harm. It returns the first abort reason that holds. The views are Protocols so
that the schedule package depends on no supervisor or collector class: the daemon wires in the
supervisor's snapshot and the GPU collector's health value.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from typing import Protocol

from sglang_sentinel.load.records import LoadCounters
from sglang_sentinel.log import get_logger
from sglang_sentinel.schedule.breaker import BreakerSignals, trip_reason
from sglang_sentinel.schedule.metrics import ScheduleMetrics
from sglang_sentinel.schedule.polite import Assessment, LoadReadError, OwnTraffic, ServerLoad, assess
from sglang_sentinel.schedule.settings import ScheduleSettings

__all__ = ["GpuHealthView", "LoadReader", "RunMonitor", "ServerView"]

_log = get_logger(__name__)
# How often the own in-flight count is sampled beside a run (no I/O: a read of the counters).
# Fine enough that the window peak a sampled gauge is compared with misses no real peak.
_OWN_SAMPLE_SECONDS = 0.2


class ServerView(Protocol):
    """What the scheduler needs to know about the supervised server."""

    def ready_epoch(self) -> float | None:
        """Wall-clock time the current server life became ready; None when not ready now."""

    def launch_hash(self) -> str | None:
        """Hash of the launch configuration of the current server life."""

    def started_warm(self) -> bool:
        """True when the current life was already serving when sentinel first saw it (sentinel
        restarted, the server did not): its caches are warm, so no warm-up or exclusion window."""


class GapView(Protocol):
    """The daemon's own time gaps (``sglang_sentinel.supervise.gaps.GapWatch``)."""

    def gap_since(self, t: float) -> bool:
        """Whether sentinel was away (a late heartbeat) after monotonic time ``t``."""
        ...


class GpuHealthView(Protocol):
    """The breaker's GPU figures (``sglang_sentinel.collect.gpu.GpuHealth``); None = unknown."""

    @property
    def max_temperature_celsius(self) -> float | None: ...

    @property
    def throttled(self) -> bool | None: ...


class LoadReader(Protocol):
    async def read(self) -> ServerLoad: ...


class RunMonitor:
    """The watch beside a run. ``settings`` is replaced on reload (the next run uses it)."""

    def __init__(
        self,
        settings: ScheduleSettings,
        *,
        server: ServerView,
        metrics: ScheduleMetrics,
        load_reader: LoadReader | None,
        gpu: Callable[[], GpuHealthView] | None,
    ) -> None:
        self.settings = settings
        self.server = server
        self.metrics = metrics
        self.load_reader = load_reader
        self.gpu = gpu
        #: sentinel's own requests in flight, across runs (a gauge may still show the last run's).
        self.own = OwnTraffic()
        #: The numbers of the latest polite check (status, tests); None before the first.
        self.last_assessment: Assessment | None = None

    def assess(self, load: ServerLoad) -> Assessment:
        """Foreign traffic in ``load``, against an own count as fresh as the figure; exported."""
        a = assess(load, self.own, self.settings.polite)
        self.last_assessment = a
        self.metrics.foreign.set(a.foreign)
        return a

    async def read_load(self) -> ServerLoad | None:
        """The server's load now; None when there is no reader or it cannot be read (logged)."""
        if self.load_reader is None:
            return None
        try:
            return await self.load_reader.read()
        except LoadReadError as exc:
            _log.warning("server_load_unreadable", error=str(exc))
            return None

    async def watch(
        self, counters: LoadCounters, epoch: float, limit_seconds: float, *, watch_kv: bool = True
    ) -> str:
        """Runs beside the load; returns an abort reason as soon as one holds.

        ``watch_kv=False`` for a calibration sweep: a full KV cache is the saturation it looks for
        (and stops at by itself), not harm to stop it for.
        """
        try:
            return await self._watch(counters, epoch, limit_seconds, watch_kv)
        finally:
            self.own.note(counters.in_flight)

    async def _sleep_sampling(self, counters: LoadCounters, seconds: float) -> None:
        end = time.monotonic() + seconds
        while True:
            self.own.note(counters.in_flight)
            left = end - time.monotonic()
            if left <= 0:
                return
            await asyncio.sleep(min(_OWN_SAMPLE_SECONDS, left))

    async def _watch(self, counters: LoadCounters, epoch: float, limit_seconds: float, watch_kv: bool) -> str:
        s = self.settings
        interval = min(s.breaker.check_interval_seconds, s.polite.check_interval_seconds)
        deadline = time.monotonic() + limit_seconds
        while True:
            await self._sleep_sampling(counters, min(interval, max(0.0, deadline - time.monotonic())))
            if time.monotonic() >= deadline:
                return "timeout"
            if self.server.ready_epoch() != epoch:
                return "server_restart"
            load = await self.read_load() if self.load_reader is not None else None
            self.own.note(counters.in_flight)
            if load is not None and self.settings.polite.enabled:
                a = self.assess(load)
                if a.foreign >= self.settings.polite.skip_above:
                    _log.warning("polite_abort", skip_above=self.settings.polite.skip_above, **a.fields())
                    return "foreign_traffic"
            gpu = self.gpu() if self.gpu is not None else None
            signals = BreakerSignals(
                finished=counters.completed + counters.failed,
                failed=counters.failed,
                kv_usage=load.token_usage if load is not None and watch_kv else None,
                max_gpu_temperature_celsius=gpu.max_temperature_celsius if gpu is not None else None,
                gpu_throttled=gpu.throttled if gpu is not None else None,
            )
            reason = trip_reason(signals, self.settings.breaker)
            if reason is not None:
                return reason
