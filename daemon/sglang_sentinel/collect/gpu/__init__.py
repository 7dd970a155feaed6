"""GPU collection through NVML (nvidia-ml-py), with a fake backend fed with real H200 readings."""

from __future__ import annotations

from sglang_sentinel.collect.gpu.collector import GpuCollector
from sglang_sentinel.collect.gpu.errors import ErrorClass, NvmlLifecycleError, classify, error_name
from sglang_sentinel.collect.gpu.fake import FakeNvml, load_sample
from sglang_sentinel.collect.gpu.poller import GpuPoller, GpuSnapshot, GpuState
from sglang_sentinel.collect.gpu.reading import DeviceIdentity, DeviceReading, read_device, read_identity

__all__ = [
    "DeviceIdentity",
    "DeviceReading",
    "ErrorClass",
    "FakeNvml",
    "GpuCollector",
    "GpuPoller",
    "GpuSnapshot",
    "GpuState",
    "NvmlLifecycleError",
    "classify",
    "error_name",
    "load_sample",
    "read_device",
    "read_identity",
]
