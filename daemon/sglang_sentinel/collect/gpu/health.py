"""The GPUs' health as other components need it (the load breaker): one small immutable value.

Derived from the poller's published snapshot, never from NVML: reading it costs nothing and is
safe from any thread. A figure no GPU reported is None (unknown), never 0 or False.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_sentinel.collect.gpu.poller import GpuSnapshot

__all__ = ["THROTTLE_REASONS", "GpuHealth"]

# Clock-event reasons that mean the GPU is being held back by heat or a power fault (not idling,
# not an application clock setting).
THROTTLE_REASONS = ("hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake")


@dataclass(frozen=True, slots=True)
class GpuHealth:
    max_temperature_celsius: float | None
    throttled: bool | None  # any GPU held back by heat or power; None: no good reading

    @classmethod
    def of(cls, snapshot: GpuSnapshot) -> GpuHealth:
        """From the latest good reading of each GPU that read fine in the last cycle."""
        readings = [s.reading for s in snapshot.devices if s.ok and s.reading is not None]
        temps = [r.temperature_celsius for r in readings if r.temperature_celsius is not None]
        throttled = (
            any(bool((r.clock_events or {}).get(reason)) for r in readings for reason in THROTTLE_REASONS)
            if readings
            else None
        )
        return cls(max(temps) if temps else None, throttled)
