"""The circuit breaker: abort a run in progress that is hurting the server or the hardware.

Checked every ``check_interval_seconds`` while a run is going on, from the run's own progress
(finished and failed requests), the server's KV-cache fill and the GPU readings the collector
already has. The first reason that holds wins; the order puts the client's own evidence first.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_sentinel.schedule.settings import BreakerSettings

__all__ = ["BreakerSignals", "trip_reason"]


@dataclass(frozen=True)
class BreakerSignals:
    finished: int = 0
    failed: int = 0
    kv_usage: float | None = None
    max_gpu_temperature_celsius: float | None = None
    # True when any GPU reports a hardware-slowdown or thermal clock-event reason.
    gpu_throttled: bool | None = None


def trip_reason(signals: BreakerSignals, settings: BreakerSettings) -> str | None:
    """The abort reason (a label value of ``sentinel_load_aborts_total``), or None to carry on."""
    if not settings.enabled:
        return None
    finished = signals.finished
    if finished >= settings.min_requests and signals.failed / finished > settings.max_error_ratio:
        return "error_ratio"
    if signals.kv_usage is not None and signals.kv_usage > settings.max_kv_usage:
        return "kv_usage"
    temp = signals.max_gpu_temperature_celsius
    if temp is not None and temp > settings.max_gpu_temperature_celsius:
        return "gpu_temperature"
    if settings.abort_on_throttle and signals.gpu_throttled:
        return "gpu_throttle"
    return None
