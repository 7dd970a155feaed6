"""The GPUs' state at a trial's start (clocks, throttling): recorded so a slow trial can be told
from a hot or throttled GPU. Read once through the GPU collector's own NVML reader (the real
``pynvml`` or its ``FakeNvml``); fields the GPU does not report are absent, not 0."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sglang_sentinel.log import get_logger

__all__ = ["GpuStateReader", "nvml_state_reader"]

_log = get_logger(__name__)

# () -> {"devices": [...]} or None when no GPU state could be read. Blocking: run in a thread.
GpuStateReader = Callable[[], dict[str, Any] | None]


def nvml_state_reader(nvml_factory: Callable[[], Any]) -> GpuStateReader:
    def read() -> dict[str, Any] | None:
        from sglang_sentinel.collect.gpu.reading import read_device, read_identity

        try:
            nvml = nvml_factory()
            nvml.nvmlInit()
        except Exception as exc:
            _log.info("tune_gpu_state_unavailable", error=str(exc))
            return None
        try:
            devices = []
            for i in range(nvml.nvmlDeviceGetCount()):
                handle = nvml.nvmlDeviceGetHandleByIndex(i)
                ident = read_identity(nvml, i, handle)
                r = read_device(nvml, handle, ident, pcie_throughput=False, processes=False)
                entry: dict[str, Any] = {"index": i, "name": ident.name}
                for key, value in (
                    ("sm_clock_hz", r.sm_clock_hertz),
                    ("sm_clock_max_hz", r.sm_clock_max_hertz or ident.sm_clock_max_hertz),
                    ("memory_clock_hz", r.memory_clock_hertz),
                    ("temperature_c", r.temperature_celsius),
                    ("power_w", r.power_watts),
                    ("utilization_ratio", r.utilization_ratio),
                ):
                    if value is not None:
                        entry[key] = value
                if r.clock_events is not None:
                    entry["throttle_reasons"] = sorted(k for k, on in r.clock_events.items() if on)
                devices.append(entry)
            return {"devices": devices}
        except Exception as exc:
            _log.info("tune_gpu_state_unavailable", error=str(exc))
            return None
        finally:
            try:
                nvml.nvmlShutdown()
            except Exception:
                _log.debug("tune_nvml_shutdown_failed")

    return read
