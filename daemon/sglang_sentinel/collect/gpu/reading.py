"""One read of one GPU through an NVML API object (the real ``pynvml`` module or the fake).

Every value is converted to base units here (bytes, watts, joules, hertz, ratios, seconds) so the
collector only names series. A field the board does not support is ``None`` and its series is
absent; a field that failed for another reason is also ``None`` and is recorded in ``errors``
(counted by the collector); a lifecycle error aborts the whole read with
:class:`~sglang_sentinel.collect.gpu.errors.NvmlLifecycleError`.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

import pynvml

from sglang_sentinel.collect.gpu.errors import ErrorClass, NvmlLifecycleError, classify, error_name

__all__ = [
    "CLOCK_EVENT_REASONS",
    "DeviceIdentity",
    "DeviceReading",
    "Nvml",
    "ProcessMemory",
    "read_device",
    "read_identity",
]

# The real ``pynvml`` module or ``FakeNvml``: pynvml ships no type information, so the surface we
# call is duck-typed. The fake implements exactly the calls made in this module and in xid.py.
Nvml = Any

T = TypeVar("T")

# Bit → label value, in dcgm-exporter's vocabulary (DCGM_EXP_CLOCK_EVENTS_COUNT) so dashboards
# written for it read the same words.
CLOCK_EVENT_REASONS: tuple[tuple[int, str], ...] = (
    (0x1, "gpu_idle"),
    (0x2, "clocks_setting"),
    (0x4, "power_cap"),
    (0x8, "hw_slowdown"),
    (0x10, "sync_boost"),
    (0x20, "sw_thermal"),
    (0x40, "hw_thermal"),
    (0x80, "hw_power_brake"),
    (0x100, "display_clocks"),
)
_ALL_REASON_BITS = 0x1FF


@dataclass(frozen=True, slots=True)
class DeviceIdentity:
    """What does not change while NVML stays initialised; the labels of every series of this GPU."""

    index: int
    uuid: str
    name: str
    pci_bus_id: str
    vbios_version: str
    serial: str
    supported_clock_event_bits: int
    # Read once: on a real H200 this call alone took 43 ms, most of a full read (nvml-h200-busy.json).
    sm_clock_max_hertz: float | None = None


@dataclass(frozen=True, slots=True)
class ProcessMemory:
    pid: int
    process: str
    used_bytes: int


@dataclass(slots=True)
class DeviceReading:
    """One GPU at one moment. ``None`` = absent (unsupported or failed this time)."""

    timestamp: float  # wall clock at the end of the read
    duration_seconds: float
    utilization_ratio: float | None = None
    memory_utilization_ratio: float | None = None
    memory_used_bytes: float | None = None
    memory_total_bytes: float | None = None
    memory_reserved_bytes: float | None = None
    power_watts: float | None = None
    power_limit_watts: float | None = None
    energy_joules: float | None = None
    temperature_celsius: float | None = None
    fan_speed_ratio: float | None = None
    sm_clock_hertz: float | None = None
    memory_clock_hertz: float | None = None
    sm_clock_max_hertz: float | None = None
    performance_state: float | None = None
    clock_events: dict[str, bool] | None = None
    violation_seconds: dict[str, float] = field(default_factory=dict)
    pcie_tx_bytes_per_second: float | None = None
    pcie_rx_bytes_per_second: float | None = None
    pcie_link_generation: float | None = None
    pcie_link_width: float | None = None
    pcie_link_max_generation: float | None = None
    pcie_link_max_width: float | None = None
    pcie_replays: float | None = None
    ecc_enabled: float | None = None
    ecc_corrected_errors: float | None = None
    ecc_uncorrected_errors: float | None = None
    remapped_rows_correctable: float | None = None
    remapped_rows_uncorrectable: float | None = None
    row_remap_pending: float | None = None
    row_remap_failure: float | None = None
    processes: tuple[ProcessMemory, ...] | None = None
    # field → NVML error name, for failures other than "not supported".
    errors: dict[str, str] = field(default_factory=dict)
    # field → seconds spent in NVML, for the benchmarks (not exported: it would double the series).
    timings: dict[str, float] = field(default_factory=dict)


class _Call:
    """Runs NVML calls for one read, classifying errors and timing each call."""

    __slots__ = ("errors", "timings")

    def __init__(self) -> None:
        self.errors: dict[str, str] = {}
        self.timings: dict[str, float] = {}

    def __call__(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T | None:
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        except Exception as exc:
            kind = classify(exc)
            if kind is ErrorClass.LIFECYCLE:
                raise NvmlLifecycleError(error_name(exc), f"{name}: {exc}") from exc
            if kind is ErrorClass.TRANSIENT:
                self.errors[name] = error_name(exc)
            return None
        finally:
            self.timings[name] = time.perf_counter() - start


def _text(value: object) -> str:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return str(value)


def read_identity(nvml: Nvml, index: int, handle: object) -> DeviceIdentity:
    """The static facts of one GPU, read once per NVML initialisation."""
    call = _Call()
    uuid = call("uuid", nvml.nvmlDeviceGetUUID, handle)
    if uuid is None:
        # Every series joins on the UUID; a GPU that cannot say it is not a GPU we can report on.
        raise NvmlLifecycleError("identity", f"gpu {index}: uuid unavailable ({call.errors.get('uuid')})")
    name = call("name", nvml.nvmlDeviceGetName, handle)
    pci = call("pci_info", nvml.nvmlDeviceGetPciInfo_v3, handle)
    vbios = call("vbios", nvml.nvmlDeviceGetVbiosVersion, handle)
    serial = call("serial", nvml.nvmlDeviceGetSerial, handle)
    supported = call("supported_clock_events", nvml.nvmlDeviceGetSupportedClocksEventReasons, handle)
    smmax = call("max_clock_sm", nvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM)
    return DeviceIdentity(
        index=index,
        uuid=_text(uuid),
        name=_text(name) if name is not None else "",
        pci_bus_id=_text(pci.busId) if pci is not None else "",
        vbios_version=_text(vbios) if vbios is not None else "",
        serial=_text(serial) if serial is not None else "",
        supported_clock_event_bits=int(supported) if supported is not None else _ALL_REASON_BITS,
        sm_clock_max_hertz=smmax * 1e6 if smmax is not None else None,
    )


def _process_name(nvml: Nvml, pid: int) -> str:
    # /proc first: cheap and gives the short command name. NVML's name works where /proc is another
    # PID namespace's (a container without --pid=host), but there the pid itself is foreign too.
    try:
        with open(f"/proc/{pid}/comm", encoding="utf-8", errors="replace") as fh:
            return fh.read().strip()
    except OSError:
        pass
    try:
        return os.path.basename(_text(nvml.nvmlSystemGetProcessName(pid)))
    except Exception:
        return ""


def read_device(
    nvml: Nvml,
    handle: object,
    identity: DeviceIdentity,
    *,
    pcie_throughput: bool = True,
    processes: bool = True,
) -> DeviceReading:
    """Read every per-cycle field of one GPU. Raises NvmlLifecycleError when the GPU is gone."""
    t0 = time.monotonic()
    call = _Call()
    r = DeviceReading(timestamp=0.0, duration_seconds=0.0)

    util = call("utilization", nvml.nvmlDeviceGetUtilizationRates, handle)
    if util is not None:
        r.utilization_ratio = util.gpu / 100.0
        r.memory_utilization_ratio = util.memory / 100.0

    # v2 separates driver-reserved memory from "used", which is what nvidia-smi's memory.used shows.
    mem = call("memory_info", nvml.nvmlDeviceGetMemoryInfo, handle, version=pynvml.nvmlMemory_v2)
    if mem is None:
        mem = call("memory_info_v1", nvml.nvmlDeviceGetMemoryInfo, handle)
    if mem is not None:
        r.memory_used_bytes = float(mem.used)
        r.memory_total_bytes = float(mem.total)
        reserved = getattr(mem, "reserved", None)
        if reserved is not None:
            r.memory_reserved_bytes = float(reserved)

    power = call("power_usage", nvml.nvmlDeviceGetPowerUsage, handle)
    if power is not None:
        r.power_watts = power / 1000.0
    limit = call("power_limit", nvml.nvmlDeviceGetEnforcedPowerLimit, handle)
    if limit is not None:
        r.power_limit_watts = limit / 1000.0
    energy = call("total_energy", nvml.nvmlDeviceGetTotalEnergyConsumption, handle)
    if energy is not None:
        r.energy_joules = energy / 1000.0

    temp = call("temperature", nvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU)
    if temp is not None:
        r.temperature_celsius = float(temp)
    fan = call("fan_speed", nvml.nvmlDeviceGetFanSpeed, handle)
    if fan is not None:
        r.fan_speed_ratio = fan / 100.0

    sm = call("clock_sm", nvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM)
    if sm is not None:
        r.sm_clock_hertz = sm * 1e6
    memclk = call("clock_mem", nvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_MEM)
    if memclk is not None:
        r.memory_clock_hertz = memclk * 1e6
    r.sm_clock_max_hertz = identity.sm_clock_max_hertz
    pstate = call("pstate", nvml.nvmlDeviceGetPerformanceState, handle)
    if pstate is not None:
        r.performance_state = float(pstate)

    reasons = call("clock_events", nvml.nvmlDeviceGetCurrentClocksEventReasons, handle)
    if reasons is not None:
        r.clock_events = {
            label: bool(reasons & bit)
            for bit, label in CLOCK_EVENT_REASONS
            if identity.supported_clock_event_bits & bit
        }
    for policy, label in (
        (pynvml.NVML_PERF_POLICY_POWER, "power"),
        (pynvml.NVML_PERF_POLICY_THERMAL, "thermal"),
    ):
        v = call(f"violation_{label}", nvml.nvmlDeviceGetViolationStatus, handle, policy)
        if v is not None:
            r.violation_seconds[label] = v.violationTime / 1e9

    if pcie_throughput:
        # NVML reports KB/s over a 20 ms driver window; its "KB" is 1024 bytes (nvml.h).
        tx = call("pcie_tx", nvml.nvmlDeviceGetPcieThroughput, handle, pynvml.NVML_PCIE_UTIL_TX_BYTES)
        if tx is not None:
            r.pcie_tx_bytes_per_second = tx * 1024.0
        rx = call("pcie_rx", nvml.nvmlDeviceGetPcieThroughput, handle, pynvml.NVML_PCIE_UTIL_RX_BYTES)
        if rx is not None:
            r.pcie_rx_bytes_per_second = rx * 1024.0
    for attr, name, fn in (
        ("pcie_link_generation", "pcie_link_gen", nvml.nvmlDeviceGetCurrPcieLinkGeneration),
        ("pcie_link_width", "pcie_link_width", nvml.nvmlDeviceGetCurrPcieLinkWidth),
        ("pcie_link_max_generation", "pcie_max_link_gen", nvml.nvmlDeviceGetMaxPcieLinkGeneration),
        ("pcie_link_max_width", "pcie_max_link_width", nvml.nvmlDeviceGetMaxPcieLinkWidth),
        ("pcie_replays", "pcie_replay_counter", nvml.nvmlDeviceGetPcieReplayCounter),
    ):
        value = call(name, fn, handle)
        if value is not None:
            setattr(r, attr, float(value))

    ecc = call("ecc_mode", nvml.nvmlDeviceGetEccMode, handle)
    if ecc is not None:
        r.ecc_enabled = float(bool(ecc[0]))
        # Error counts only mean something with ECC on; with it off NVML answers not-supported anyway.
        if ecc[0]:
            for attr, kind in (
                ("ecc_corrected_errors", pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED),
                ("ecc_uncorrected_errors", pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED),
            ):
                count = call(attr, nvml.nvmlDeviceGetTotalEccErrors, handle, kind, pynvml.NVML_VOLATILE_ECC)
                if count is not None:
                    setattr(r, attr, float(count))
    rows = call("remapped_rows", nvml.nvmlDeviceGetRemappedRows, handle)
    if rows is not None:
        corr, unc, pending, failure = rows
        r.remapped_rows_correctable = float(corr)
        r.remapped_rows_uncorrectable = float(unc)
        r.row_remap_pending = float(bool(pending))
        r.row_remap_failure = float(bool(failure))

    if processes:
        procs = call("compute_processes", nvml.nvmlDeviceGetComputeRunningProcesses, handle)
        if procs is not None:
            r.processes = tuple(
                ProcessMemory(pid=int(p.pid), process=_process_name(nvml, int(p.pid)), used_bytes=int(used))
                for p in procs
                # None = the driver reports N/A (e.g. without permission): absent, not 0.
                if (used := getattr(p, "usedGpuMemory", None)) is not None
            )

    r.errors = call.errors
    r.timings = call.timings
    r.duration_seconds = time.monotonic() - t0
    r.timestamp = time.time()
    return r
