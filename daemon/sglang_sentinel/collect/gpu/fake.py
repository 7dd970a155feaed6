"""A fake of the ``pynvml`` surface sentinel uses, fed with readings taken on a real H200.

Serves the tests, CI and the ``backend = "fake"`` demo mode (a box with no GPU that still wants
the dashboards to show something). It raises the real ``pynvml.NVMLError`` subclasses, so the
code under test classifies errors exactly as it would on a GPU. Faults are injected per call:
:meth:`FakeNvml.fail` (any NVML error, once or always, on one GPU or all), :meth:`FakeNvml.hang`
(a wedged driver call that blocks until released), :meth:`FakeNvml.lose_gpu`, :meth:`FakeNvml.emit_xid`.

From outside the process (the daemon's ``backend = "fake"`` under the live alert tests), only a lost
GPU can be injected: ``fault_file`` (``[collectors.gpu] fake_faults_file``) names a JSON file
``{"lost": [1]}`` listing the GPU indices lost now; the fake rereads it whenever it changes (each
NVML call compares its inode, size and mtime), and an absent file means no GPU lost. Writers
replace it whole (write a temporary file, rename it over): a half-written file is ignored. The
nvml backend never reads that file: nothing but this fake does. :func:`nvml_backend` is what a poller
initialises for either backend.
"""

from __future__ import annotations

import collections
import json
import os
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any, Literal

import pynvml

from sglang_sentinel.log import get_logger

if TYPE_CHECKING:
    from sglang_sentinel.collect.gpu.reading import Nvml
    from sglang_sentinel.collect.settings import GpuSettings

__all__ = ["FakeNvml", "load_sample", "nvml_backend"]

_log = get_logger(__name__)

Sample = Literal["idle", "busy"]

_EVENT_XID = pynvml.nvmlEventTypeXidCriticalError


def load_sample(name: Sample) -> dict[str, Any]:
    """The raw NVML readings of a real H200 (``idle`` or ``busy``), as recorded by nvml probing."""
    text = resources.files("sglang_sentinel.collect.gpu").joinpath(f"samples/h200-{name}.json").read_text()
    data: dict[str, Any] = json.loads(text)
    return data


@dataclass
class _Fault:
    code: int
    device: int | None
    remaining: int | None  # None = forever


class _Handle:
    __slots__ = ("index",)

    def __init__(self, index: int) -> None:
        self.index = index

    def __repr__(self) -> str:
        return f"<fake nvml device {self.index}>"


class FakeNvml:
    """Drop-in for the ``pynvml`` module for the calls sentinel makes.

    ``devices`` GPUs all report the sample's readings, with a per-GPU UUID and PCI bus id.
    ``latency`` = True sleeps for each call as long as the real H200 took (from the sample), so
    benchmarks see realistic read times.
    """

    # As on the module: code that catches ``pynvml.NVMLError`` works with this object as ``pynvml``.
    NVMLError = pynvml.NVMLError

    def __init__(
        self,
        devices: int = 1,
        sample: Sample | dict[str, Any] = "busy",
        *,
        latency: bool = False,
        library_present: bool = True,
        fault_file: Path | None = None,
    ) -> None:
        self._sample = load_sample(sample) if isinstance(sample, str) else sample
        self._device = self._sample["devices"][0]
        self.devices = devices
        self.latency = latency
        self.library_present = library_present
        self.initialized = 0
        self.init_calls = 0
        self._lock = threading.Lock()
        self._faults: dict[str, list[_Fault]] = {}
        self._hangs: dict[str, tuple[threading.Event, int | None]] = {}
        self._lost: set[int] = set()
        # The lost GPUs the fault file names (module docstring), apart from lose_gpu()'s: the file
        # says which GPUs are lost *now*, so a rewrite must not undo what code injected.
        self.fault_file = fault_file
        self._file_lost: frozenset[int] = frozenset()
        self._file_seen: tuple[int, int, int] | None = None  # (inode, size, mtime_ns); None: absent
        self._events: list[tuple[int, int]] = []
        self._event_cond = threading.Condition(self._lock)
        self.calls: dict[str, int] = {}
        self.energy_step_mj = 0
        # Energy counters that behave like the real ones: each GPU's offset over the sample's
        # value (step_energy, reset_energy), plus, with energy_watts set, the energy of that draw
        # since the fake was made (a counter running at a steady power, in real time).
        self.energy_watts: float | None = None
        self._energy_offset_mj: dict[int, int] = {}
        self._energy_t0 = time.monotonic()
        # (thread name, GPU index, value in mJ) of the energy reads that answered, in order; bounded,
        # since the fake also backs the daemon's demo mode for as long as it runs.
        self.energy_reads: collections.deque[tuple[str, int, int]] = collections.deque(maxlen=10_000)

    @classmethod
    def backend(cls, devices: int, fault_file: Path | None = None) -> FakeNvml:
        """What ``[collectors.gpu] backend = "fake"`` serves: ``devices`` busy H200s whose energy
        counters run at the replayed reading's power draw (so energy figures are there, not 0 J
        per token: the daemon's demo mode, ``sentinel bench`` and ``sweep``, the live tests), and
        whose GPUs ``fault_file`` may mark lost (``[collectors.gpu] fake_faults_file``)."""
        fake = cls(devices, "busy", fault_file=fault_file)
        fake.energy_watts = fake.sample_power_watts
        return fake

    @property
    def sample_power_watts(self) -> float:
        """The replayed reading's power draw (``nvmlDeviceGetPowerUsage``), in watts."""
        return float(self._device["power_usage_mw"]["value"]) / 1000.0

    # ---- fault injection -------------------------------------------------------------------
    def fail(self, call: str, code: int, *, device: int | None = None, times: int | None = None) -> None:
        """Make ``call`` (a pynvml function name) raise ``NVMLError(code)``."""
        with self._lock:
            self._faults.setdefault(call, []).append(_Fault(code, device, times))

    def clear_faults(self) -> None:
        with self._lock:
            self._faults.clear()
            self._lost.clear()

    def hang(self, call: str, *, device: int | None = None) -> threading.Event:
        """Make ``call`` block until the returned event is set (a wedged driver)."""
        release = threading.Event()
        with self._lock:
            self._hangs[call] = (release, device)
        return release

    def lose_gpu(self, index: int) -> None:
        """Every call on this GPU raises GPU_IS_LOST from now on (until clear_faults)."""
        with self._lock:
            self._lost.add(index)

    def step_energy(self, index: int | None, millijoules: int) -> None:
        """Move one GPU's energy counter (all GPUs with None) forward by ``millijoules``."""
        with self._lock:
            for i in range(self.devices) if index is None else (index,):
                self._energy_offset_mj[i] = self._energy_offset_mj.get(i, 0) + millijoules

    def reset_energy(self, index: int) -> None:
        """The counter restarts at 0, as after a driver reload or a GPU reset."""
        with self._lock:
            self._energy_offset_mj[index] = 0
            self._energy_offset_mj[index] = -self._energy_value_locked(index)

    def _energy_value_locked(self, index: int) -> int:
        value = int(self._device["total_energy_mj"]["value"]) + self._energy_offset_mj.get(index, 0)
        value += self.energy_step_mj * self.calls.get("nvmlDeviceGetTotalEnergyConsumption", 0)
        if self.energy_watts is not None:
            value += int(self.energy_watts * (time.monotonic() - self._energy_t0) * 1000.0)
        return value

    def emit_xid(self, index: int, xid: int) -> None:
        with self._event_cond:
            self._events.append((index, xid))
            self._event_cond.notify_all()

    def _follow_fault_file(self) -> None:
        """Take the fault file's lost GPUs when it changed since the last call (module docstring)."""
        assert self.fault_file is not None
        try:
            st = os.stat(self.fault_file)
            seen: tuple[int, int, int] | None = (st.st_ino, st.st_size, st.st_mtime_ns)
        except OSError:  # absent (or unreadable: no GPU lost is the state to fall back on)
            seen = None
        if seen == self._file_seen:
            return
        lost: frozenset[int] = frozenset()
        if seen is not None:
            try:
                doc = json.loads(self.fault_file.read_text())
                indices = doc["lost"]
                if not isinstance(indices, list) or not all(isinstance(i, int) for i in indices):
                    raise TypeError("lost must be a list of GPU indices")
                lost = frozenset(indices)
            except (OSError, ValueError, KeyError, TypeError) as exc:
                # Keep what was lost before (logged once per version of the file); the whole file
                # written next is read then.
                self._file_seen = seen
                _log.warning("fake_gpu_fault_file_unreadable", path=str(self.fault_file), error=str(exc))
                return
        with self._lock:
            self._file_seen = seen
            if lost != self._file_lost:
                _log.warning("fake_gpu_faults", lost=sorted(lost))
            self._file_lost = lost

    # ---- internals ----------------------------------------------------------------------------
    def _enter(self, call: str, handle: _Handle | None = None, sample_key: str | None = None) -> None:
        device = handle.index if handle is not None else None
        if self.fault_file is not None:
            self._follow_fault_file()
        with self._lock:
            self.calls[call] = self.calls.get(call, 0) + 1
            if call not in {"nvmlInit", "nvmlShutdown"} and not self.library_present:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
            if call not in {"nvmlInit", "nvmlShutdown"} and self.initialized <= 0:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
            if device is not None and (device in self._lost or device in self._file_lost):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
            hang = self._hangs.get(call)
            for fault in self._faults.get(call, []):
                if fault.device is not None and fault.device != device:
                    continue
                if fault.remaining is not None:
                    if fault.remaining <= 0:
                        continue
                    fault.remaining -= 1
                raise pynvml.NVMLError(fault.code)
        if hang is not None and (hang[1] is None or hang[1] == device):
            hang[0].wait()
        if self.latency and sample_key is not None:
            entry = self._device.get(sample_key)
            if isinstance(entry, dict) and "us" in entry:
                time.sleep(entry["us"] / 1e6)

    def _value(self, key: str) -> Any:
        entry = self._device[key]
        if not entry["ok"]:
            text = str(entry["value"])
            if "Not Supported" in text:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
            raise pynvml.NVMLError(pynvml.NVML_ERROR_UNKNOWN)
        return entry["value"]

    def _read(self, call: str, handle: _Handle, key: str) -> Any:
        self._enter(call, handle, key)
        return self._value(key)

    # ---- library ------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self._enter("nvmlInit")
        with self._lock:
            self.init_calls += 1
            if not self.library_present:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)
            self.initialized += 1

    def nvmlShutdown(self) -> None:
        self._enter("nvmlShutdown")
        with self._lock:
            if self.initialized <= 0:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED)
            self.initialized -= 1

    def nvmlSystemGetDriverVersion(self) -> str:
        self._enter("nvmlSystemGetDriverVersion")
        return str(self._sample["driver"])

    def nvmlSystemGetCudaDriverVersion(self) -> int:
        self._enter("nvmlSystemGetCudaDriverVersion")
        return int(self._sample["cuda_driver_version"])

    def nvmlSystemGetProcessName(self, pid: int) -> str:
        self._enter("nvmlSystemGetProcessName")
        return "/usr/bin/python3"

    def nvmlDeviceGetCount(self) -> int:
        self._enter("nvmlDeviceGetCount")
        return self.devices

    def nvmlDeviceGetHandleByIndex(self, index: int) -> _Handle:
        self._enter("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < self.devices:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return _Handle(index)

    # ---- identity -----------------------------------------------------------------------------
    def nvmlDeviceGetUUID(self, handle: _Handle) -> str:
        uuid: str = self._read("nvmlDeviceGetUUID", handle, "uuid")
        return f"{uuid[:-2]}{handle.index:02d}"

    def nvmlDeviceGetName(self, handle: _Handle) -> str:
        return str(self._read("nvmlDeviceGetName", handle, "name"))

    def nvmlDeviceGetCudaComputeCapability(self, handle: _Handle) -> tuple[int, int]:
        major, minor = self._read("nvmlDeviceGetCudaComputeCapability", handle, "cuda_cc")
        return int(major), int(minor)

    def nvmlDeviceGetSerial(self, handle: _Handle) -> str:
        return str(self._read("nvmlDeviceGetSerial", handle, "serial"))

    def nvmlDeviceGetVbiosVersion(self, handle: _Handle) -> str:
        return str(self._read("nvmlDeviceGetVbiosVersion", handle, "vbios"))

    def nvmlDeviceGetPciInfo_v3(self, handle: _Handle) -> SimpleNamespace:
        info = dict(self._read("nvmlDeviceGetPciInfo_v3", handle, "pci_info"))
        info["busId"] = f"00000000:{0x18 + handle.index * 0x10:02X}:00.0" if handle.index else info["busId"]
        return SimpleNamespace(**info)

    def nvmlDeviceGetSupportedClocksEventReasons(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetSupportedClocksEventReasons", handle)
        return 0x1FF

    # ---- per-cycle fields ---------------------------------------------------------------------
    def nvmlDeviceGetUtilizationRates(self, handle: _Handle) -> SimpleNamespace:
        return SimpleNamespace(**self._read("nvmlDeviceGetUtilizationRates", handle, "utilization"))

    def nvmlDeviceGetMemoryInfo(self, handle: _Handle, version: int | None = None) -> SimpleNamespace:
        key = "memory_info_v2" if version is not None else "memory_info"
        return SimpleNamespace(**self._read("nvmlDeviceGetMemoryInfo", handle, key))

    def nvmlDeviceGetPowerUsage(self, handle: _Handle) -> int:
        return int(self._read("nvmlDeviceGetPowerUsage", handle, "power_usage_mw"))

    def nvmlDeviceGetEnforcedPowerLimit(self, handle: _Handle) -> int:
        return int(self._read("nvmlDeviceGetEnforcedPowerLimit", handle, "power_limit_mw"))

    def nvmlDeviceGetTotalEnergyConsumption(self, handle: _Handle) -> int:
        self._read("nvmlDeviceGetTotalEnergyConsumption", handle, "total_energy_mj")
        with self._lock:
            # A counter that moves when asked to (tests of counter semantics); still by default.
            value = self._energy_value_locked(handle.index)
            self.energy_reads.append((threading.current_thread().name, handle.index, value))
        return value

    def nvmlDeviceGetTemperature(self, handle: _Handle, sensor: int) -> int:
        return int(self._read("nvmlDeviceGetTemperature", handle, "temperature_gpu"))

    def nvmlDeviceGetFanSpeed(self, handle: _Handle) -> int:
        return int(self._read("nvmlDeviceGetFanSpeed", handle, "fan_speed"))

    def nvmlDeviceGetClockInfo(self, handle: _Handle, clock: int) -> int:
        key = "clock_sm" if clock == pynvml.NVML_CLOCK_SM else "clock_mem"
        return int(self._read("nvmlDeviceGetClockInfo", handle, key))

    def nvmlDeviceGetMaxClockInfo(self, handle: _Handle, clock: int) -> int:
        return int(self._read("nvmlDeviceGetMaxClockInfo", handle, "max_clock_sm"))

    def nvmlDeviceGetPerformanceState(self, handle: _Handle) -> int:
        return int(self._read("nvmlDeviceGetPerformanceState", handle, "pstate"))

    def nvmlDeviceGetCurrentClocksEventReasons(self, handle: _Handle) -> int:
        return int(self._read("nvmlDeviceGetCurrentClocksEventReasons", handle, "clocks_event_reasons"))

    def nvmlDeviceGetViolationStatus(self, handle: _Handle, policy: int) -> SimpleNamespace:
        key = "violation_power" if policy == pynvml.NVML_PERF_POLICY_POWER else "violation_thermal"
        return SimpleNamespace(**self._read("nvmlDeviceGetViolationStatus", handle, key))

    def nvmlDeviceGetPcieThroughput(self, handle: _Handle, counter: int) -> int:
        key = "pcie_tx_kbps" if counter == pynvml.NVML_PCIE_UTIL_TX_BYTES else "pcie_rx_kbps"
        return int(self._read("nvmlDeviceGetPcieThroughput", handle, key))

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle: _Handle) -> int:
        return int(self._read("nvmlDeviceGetCurrPcieLinkGeneration", handle, "pcie_link_gen"))

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle: _Handle) -> int:
        return int(self._read("nvmlDeviceGetCurrPcieLinkWidth", handle, "pcie_link_width"))

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle: _Handle) -> int:
        return int(self._read("nvmlDeviceGetMaxPcieLinkGeneration", handle, "pcie_max_link_gen"))

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle: _Handle) -> int:
        return int(self._read("nvmlDeviceGetMaxPcieLinkWidth", handle, "pcie_max_link_width"))

    def nvmlDeviceGetPcieReplayCounter(self, handle: _Handle) -> int:
        return int(self._read("nvmlDeviceGetPcieReplayCounter", handle, "pcie_replay_counter"))

    def nvmlDeviceGetEccMode(self, handle: _Handle) -> list[int]:
        return list(self._read("nvmlDeviceGetEccMode", handle, "ecc_mode"))

    def nvmlDeviceGetTotalEccErrors(self, handle: _Handle, error_type: int, counter_type: int) -> int:
        key = (
            "ecc_volatile_corrected"
            if error_type == pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED
            else "ecc_volatile_uncorrected"
        )
        return int(self._read("nvmlDeviceGetTotalEccErrors", handle, key))

    def nvmlDeviceGetRemappedRows(self, handle: _Handle) -> tuple[int, int, int, int]:
        corr, unc, pending, failure = self._read("nvmlDeviceGetRemappedRows", handle, "remapped_rows")
        return int(corr), int(unc), int(pending), int(failure)

    def nvmlDeviceGetComputeRunningProcesses(self, handle: _Handle) -> list[SimpleNamespace]:
        self._read("nvmlDeviceGetComputeRunningProcesses", handle, "compute_procs")
        # The sample kept only the object's repr; one SGLang-like worker per GPU, using what
        # memory_info_v2 says is used, stands in for it.
        used = self._device["memory_info_v2"]["value"]["used"]
        if not used:
            return []
        # PIDs above Linux's pid_max (2^22) so /proc never names a real process of the test machine.
        return [SimpleNamespace(pid=5_000_000 + handle.index, usedGpuMemory=used)]

    # ---- events ---------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> object:
        self._enter("nvmlEventSetCreate")
        return object()

    def nvmlDeviceGetSupportedEventTypes(self, handle: _Handle) -> int:
        self._enter("nvmlDeviceGetSupportedEventTypes", handle)
        return _EVENT_XID if self._sample.get("xid_events_supported", True) else 0

    def nvmlDeviceRegisterEvents(self, handle: _Handle, types: int, event_set: object) -> None:
        self._enter("nvmlDeviceRegisterEvents", handle)

    def nvmlEventSetWait_v2(self, event_set: object, timeout_ms: int) -> SimpleNamespace:
        self._enter("nvmlEventSetWait_v2")
        with self._event_cond:
            if not self._events:
                self._event_cond.wait(timeout_ms / 1000.0)
            if not self._events:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
            index, xid = self._events.pop(0)
        return SimpleNamespace(device=_Handle(index), eventType=_EVENT_XID, eventData=xid)

    def nvmlEventSetFree(self, event_set: object) -> None:
        self._enter("nvmlEventSetFree")


def nvml_backend(cfg: GpuSettings) -> Callable[[], Nvml]:
    """What a poller initialises for ``[collectors.gpu] backend``: the NVIDIA library, or
    :meth:`FakeNvml.backend`'s GPUs, one set for the poller's life (a re-init after a lost GPU finds
    the same GPUs and counters, as on a real host)."""
    if cfg.backend != "fake":
        return lambda: pynvml
    fake = FakeNvml.backend(cfg.fake_devices, cfg.fake_faults_file)
    return lambda: fake
