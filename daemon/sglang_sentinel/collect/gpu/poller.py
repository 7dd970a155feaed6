"""Background GPU reads: one worker thread per GPU, a deadline per read, NVML re-init on loss.

A coordinator thread starts a cycle every ``interval``: it hands each GPU's worker one full read
and waits at most ``timeout`` for all of them. A read still running at the deadline is abandoned
(its GPU fails this cycle; its worker takes no new job until the stuck call returns, so a wedged
driver costs one thread per GPU, not one per cycle). A lifecycle error (GPU lost, driver gone,
...) fails that GPU and makes the next cycle shut NVML down and initialise it again.

Scrapes never touch NVML: they read :attr:`GpuPoller.snapshot`, an immutable object replaced
whole at the end of each cycle.
"""

from __future__ import annotations

import functools
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from concurrent.futures import wait as wait_futures
from dataclasses import dataclass, field
from typing import Any

from sglang_sentinel.collect.gpu.energy import EnergySample, read_energy, select_gpus
from sglang_sentinel.collect.gpu.errors import ErrorClass, NvmlLifecycleError, classify, error_name
from sglang_sentinel.collect.gpu.reading import (
    DeviceIdentity,
    DeviceReading,
    Nvml,
    read_device,
    read_identity,
)
from sglang_sentinel.collect.gpu.worker import Worker
from sglang_sentinel.collect.gpu.xid import XidWatcher
from sglang_sentinel.log import get_logger

__all__ = ["NO_DRIVER", "GpuPoller", "GpuSnapshot", "GpuState", "PollerEnergyMeter"]

_log = get_logger(__name__)

#: NVML states that mean "no NVIDIA GPU or driver on this host" (not a failing one).
NO_DRIVER = frozenset({"library_not_found", "driver_not_loaded", "no_devices"})


@dataclass(frozen=True, slots=True)
class GpuState:
    identity: DeviceIdentity
    ok: bool  # the latest cycle read this GPU completely
    reading: DeviceReading | None  # the latest good reading (None before the first)
    error: str | None  # why the latest cycle failed for this GPU


@dataclass(frozen=True, slots=True)
class GpuSnapshot:
    """Everything a scrape needs, published whole at the end of each cycle."""

    # "ok", "starting", or why NVML is unusable: "library_not_found", "driver_not_loaded",
    # "init_timeout", "no_devices", "gpu_is_lost", ...
    status: str
    detail: str = ""
    driver_version: str = ""
    cuda_driver_version: str = ""
    devices: tuple[GpuState, ...] = ()
    visible_devices: int = 0
    most_devices_seen: int = 0
    cycle_timestamp: float = 0.0
    cycle_duration_seconds: float | None = None
    last_success_timestamp: float | None = None  # end of the last cycle where every GPU read fine
    inits_total: int = 0
    init_failures_total: int = 0
    read_failures_total: dict[tuple[str, str], int] = field(default_factory=dict)  # (uuid, reason)
    field_errors_total: dict[tuple[str, str, str], int] = field(default_factory=dict)  # (uuid, field, err)
    identities: dict[str, DeviceIdentity] = field(default_factory=dict)  # every GPU ever seen, by uuid


@dataclass(frozen=True, slots=True)
class PollerEnergyMeter:
    """``collect.gpu.energy.EnergyMeter`` over a poller's NVML: the server's GPUs, by name."""

    poller: GpuPoller
    gpus: tuple[str, ...] = ()

    def sample(self) -> EnergySample:
        return self.poller.read_energy(self.gpus)


@dataclass(slots=True)
class _Device:
    handle: object
    identity: DeviceIdentity


class GpuPoller:
    """Owns NVML: initialisation, per-GPU workers, the XID watcher and the published snapshot."""

    def __init__(
        self,
        nvml_factory: Callable[[], Nvml],
        *,
        interval: float = 5.0,
        timeout: float = 3.0,
        init_timeout: float = 30.0,
        pcie_throughput: bool = True,
        processes: bool = True,
        xid_events: bool = True,
        quiet_init: bool = False,
    ) -> None:
        self._nvml_factory = nvml_factory
        # A one-shot command (sentinel bench, sweep) says what it found in a line of its own: NVML
        # missing or found is logged at debug there, not as a warning beside that line.
        self._init_log = _log.debug if quiet_init else None
        self._nvml: Nvml | None = None
        self.interval = interval
        self.timeout = timeout
        self.init_timeout = init_timeout
        self._read_options = {"pcie_throughput": pcie_throughput, "processes": processes}
        self._xid_enabled = xid_events
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._init_worker: Worker | None = None
        self._energy_worker: Worker | None = None
        self._workers: dict[int, Worker] = {}
        self._devices: list[_Device] = []
        self._initialized = False
        self._need_init = True
        self._status = "starting"
        self._detail = ""
        self._driver_version = ""
        self._cuda_driver_version = ""
        self._states: dict[int, GpuState] = {}
        self._most_seen = 0
        # Whether this host must have GPUs ([collectors.gpu] expected; the collector sets it before
        # start). Where none are expected, NVML missing is the normal state, not news at warning.
        self.expected = True
        self._last_success: float | None = None
        self._inits = 0
        self._init_failures = 0
        self._read_failures: dict[tuple[str, str], int] = {}
        self._field_errors: dict[tuple[str, str, str], int] = {}
        self._xid_counts: dict[tuple[str, int], int] = {}
        self._xid_last: dict[tuple[str, int], float] = {}
        self._identities: dict[str, DeviceIdentity] = {}
        self._xid: XidWatcher | None = None
        self._xid_lifecycle_error: str | None = None
        self.snapshot = GpuSnapshot(status="starting")
        # Called in the poller's thread after each published snapshot (the collector pre-renders).
        self.on_publish: Callable[[], None] | None = None
        self._first_cycle = threading.Event()

    # ---- lifecycle --------------------------------------------------------------------------
    def start(self) -> None:
        if self._thread is not None:
            return
        self._stop.clear()
        self._thread = threading.Thread(target=self._loop, name="sentinel-gpu", daemon=True)
        self._thread.start()

    def stop(self, timeout: float = 5.0) -> None:
        """Stop within about ``timeout`` seconds, abandoning any thread stuck in the driver."""
        self._stop.set()
        deadline = time.monotonic() + timeout
        if self._thread is not None:
            self._thread.join(max(0.0, deadline - time.monotonic()))
            self._thread = None
        if self._xid is not None:
            self._xid.stop(max(0.0, min(1.5, deadline - time.monotonic())))
            self._xid = None
        if self._initialized:
            try:
                self._run_init_job(self._shutdown_nvml, max(0.0, deadline - time.monotonic()))
            except NvmlLifecycleError as exc:  # a wedged driver: abandon the shutdown, exit anyway
                _log.warning("nvml_shutdown_abandoned", reason=exc.reason)
        for worker in self._workers.values():
            worker.stop(max(0.0, min(0.1, deadline - time.monotonic())))
        self._workers.clear()
        if self._init_worker is not None:
            self._init_worker.stop(0.0)
            self._init_worker = None
        if self._energy_worker is not None:
            self._energy_worker.stop(0.0)
            self._energy_worker = None

    def wait_for_first_cycle(self, timeout: float) -> bool:
        """Block until a first cycle has published a snapshot (True) or ``timeout`` passed."""
        return self._first_cycle.wait(timeout)

    def _loop(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            try:
                self.run_cycle()
            except Exception:  # a bug here must not end GPU monitoring for the daemon's lifetime
                _log.exception("gpu_cycle_crashed")
            self._stop.wait(max(0.0, self.interval - (time.monotonic() - started)))

    # ---- one cycle ------------------------------------------------------------------------------
    def run_cycle(self) -> GpuSnapshot:
        """Run one full cycle now (the background thread calls this; tests call it directly)."""
        started = time.monotonic()
        if self._xid_lifecycle_error is not None:
            self._need_init = True
            self._status, self._detail = self._xid_lifecycle_error, "reported by the xid watcher"
            self._xid_lifecycle_error = None
        if self._need_init:
            self._initialize()
        if self._initialized and not self._need_init:
            # The read deadline counts from here: a slow (re-)init must not eat the reads' time.
            self._read_all(time.monotonic())
        duration = time.monotonic() - started
        self._publish(duration)
        self._first_cycle.set()
        if self.on_publish is not None:
            try:
                self.on_publish()
            except Exception:
                _log.exception("gpu_publish_hook_failed")
        return self.snapshot

    # ---- energy counters on demand (a run's two ends) ------------------------------------------
    def read_energy(self, gpus: tuple[str, ...] = (), timeout: float | None = None) -> EnergySample:
        """The energy counters of ``gpus`` (indices or UUIDs; all when empty), read now.

        On a worker of its own: a cycle's full read (tens of ms) must not delay a run's edge, and
        a wedged driver costs this one thread and a figure marked ``timeout``, never the caller.
        """
        devices = self._devices  # replaced whole on (re-)init, never mutated
        if self._status != "ok" or not self._initialized or not devices:
            return EnergySample(
                timestamp=time.time(), status=self._status if self._status != "ok" else "no_devices"
            )
        chosen = select_gpus([(d.identity.index, d.identity.uuid) for d in devices], gpus)
        if chosen is None:
            return EnergySample(timestamp=time.time(), status="gpus_not_found")
        handles = {d.identity.uuid: d.handle for d in devices if d.identity.uuid in chosen}
        if self._energy_worker is None:
            self._energy_worker = Worker("sentinel-gpu-energy")
        future = self._energy_worker.submit(functools.partial(read_energy, self._nvml, handles))
        if future is None:
            return EnergySample(timestamp=time.time(), missing=dict.fromkeys(handles, "stuck"))
        try:
            sample: EnergySample = future.result(self.timeout if timeout is None else timeout)
        except FutureTimeout:
            return EnergySample(timestamp=time.time(), missing=dict.fromkeys(handles, "timeout"))
        return sample

    def energy_meter(self, gpus: tuple[str, ...] = ()) -> PollerEnergyMeter:
        """A meter of ``gpus``' energy counters through this poller (what runs record)."""
        return PollerEnergyMeter(self, gpus)

    def _run_init_job(self, fn: Callable[[], Any], timeout: float) -> Any:
        if self._init_worker is None:
            self._init_worker = Worker("sentinel-gpu-init")
        future = self._init_worker.submit(fn)
        if future is None:
            raise NvmlLifecycleError("init_timeout", "a previous NVML init/shutdown is still stuck")
        try:
            return future.result(timeout)
        except FutureTimeout:
            raise NvmlLifecycleError("init_timeout", f"NVML init/shutdown took over {timeout:g} s") from None

    def _shutdown_nvml(self) -> None:
        nvml = self._nvml
        self._initialized = False
        if nvml is not None:
            try:
                nvml.nvmlShutdown()
            except Exception as exc:
                _log.debug("nvml_shutdown_failed", error=error_name(exc))

    def _init_nvml(self) -> tuple[list[_Device], str, str]:
        if self._nvml is None:
            self._nvml = self._nvml_factory()
        nvml = self._nvml
        nvml.nvmlInit()
        self._initialized = True
        count = int(nvml.nvmlDeviceGetCount())
        devices = []
        for index in range(count):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            devices.append(_Device(handle, read_identity(nvml, index, handle)))
        try:
            driver = str(nvml.nvmlSystemGetDriverVersion())
        except Exception:
            driver = ""
        try:
            cuda = int(nvml.nvmlSystemGetCudaDriverVersion())
            cuda_text = f"{cuda // 1000}.{cuda % 1000 // 10}"
        except Exception:
            cuda_text = ""
        return devices, driver, cuda_text

    def _initialize(self) -> None:
        if self._xid is not None:
            self._xid.stop(0.0)
            self._xid = None
        try:
            if self._initialized:
                self._run_init_job(self._shutdown_nvml, self.init_timeout)
            devices, driver, cuda = self._run_init_job(self._init_nvml, self.init_timeout)
        except Exception as exc:
            reason = error_name(exc)
            with self._lock:
                self._init_failures += 1
            if reason != self._status:
                # A host with no driver whose launch needs no GPU (the GPU collector is "not
                # applicable" there): said at info, so a routine start logs no warning. A host that
                # expects GPUs, or has shown one since start, is losing something: a warning. A
                # one-shot command's reader (quiet_init) says it itself, so debug there.
                quiet = not self.expected and reason in NO_DRIVER and self._most_seen == 0
                level = self._init_log or (_log.info if quiet else _log.warning)
                level("nvml_unavailable", reason=reason, detail=str(exc))
            self._status, self._detail = reason, str(exc)
            self._devices = []
            return
        with self._lock:
            self._inits += 1
            for d in devices:
                self._identities[d.identity.uuid] = d.identity
        self._devices = devices
        self._driver_version, self._cuda_driver_version = driver, cuda
        self._need_init = False
        states = {}
        for d in devices:
            old = self._states.get(d.identity.index)
            # Keep the last good reading only for the same GPU: after a re-init an index may name
            # another board (one fell off the bus, or was replaced).
            kept = old.reading if old is not None and old.identity.uuid == d.identity.uuid else None
            states[d.identity.index] = GpuState(d.identity, False, kept, "starting")
        self._states = states
        self._most_seen = max(self._most_seen, len(devices))
        if not devices:
            self._status, self._detail = "no_devices", "NVML initialised but reports no GPU"
            return
        if self._status != "ok":
            (self._init_log or _log.info)("nvml_initialised", gpus=len(devices), driver=driver)
        self._status, self._detail = "ok", ""
        if self._xid_enabled:
            self._xid = XidWatcher(
                self._nvml,
                {d.identity.uuid: d.handle for d in devices},
                self._count_xid,
                self._xid_failed,
            )
            self._xid.start()

    def _count_xid(self, uuid: str, xid: int, timestamp: float) -> None:
        with self._lock:
            self._xid_counts[(uuid, xid)] = self._xid_counts.get((uuid, xid), 0) + 1
            self._xid_last[(uuid, xid)] = timestamp

    def xid_counts(self) -> tuple[dict[tuple[str, int], int], dict[tuple[str, int], float]]:
        """XID counts and last times, live (events arrive between cycles and must show at once)."""
        with self._lock:
            return dict(self._xid_counts), dict(self._xid_last)

    def _xid_failed(self, reason: str) -> None:
        self._xid_lifecycle_error = reason

    def _read_all(self, started: float) -> None:
        nvml = self._nvml
        futures: dict[int, Future[DeviceReading] | None] = {}
        for device in self._devices:
            index = device.identity.index
            worker = self._workers.get(index)
            if worker is None:
                worker = self._workers[index] = Worker(f"sentinel-gpu-{index}")
            job = functools.partial(read_device, nvml, device.handle, device.identity, **self._read_options)
            futures[index] = worker.submit(job)
        pending = [f for f in futures.values() if f is not None]
        wait_futures(pending, timeout=max(0.0, self.timeout - (time.monotonic() - started)))
        for device in self._devices:
            identity = device.identity
            future = futures[identity.index]
            previous = self._states.get(identity.index)
            last_good = previous.reading if previous is not None else None
            error: str | None = None
            reading: DeviceReading | None = None
            if future is None:
                error = "stuck"  # the previous cycle's read has not returned from the driver yet
            elif not future.done():
                error = "timeout"
            else:
                exc = future.exception()
                if exc is None:
                    reading = future.result()
                elif isinstance(exc, NvmlLifecycleError):
                    error = exc.reason
                    self._need_init = True
                    self._status, self._detail = exc.reason, f"gpu {identity.index}: {exc}"
                else:
                    error = error_name(exc)
                    if classify(exc) is ErrorClass.LIFECYCLE:
                        self._need_init = True
            with self._lock:
                if reading is not None:
                    for name, err in reading.errors.items():
                        key = (identity.uuid, name, err)
                        self._field_errors[key] = self._field_errors.get(key, 0) + 1
                else:
                    key2 = (identity.uuid, error or "unknown")
                    self._read_failures[key2] = self._read_failures.get(key2, 0) + 1
            if error is not None and (previous is None or previous.error != error):
                _log.warning("gpu_read_failed", gpu=identity.index, uuid=identity.uuid, reason=error)
            self._states[identity.index] = GpuState(
                identity, reading is not None, reading if reading is not None else last_good, error
            )

    def _publish(self, duration: float) -> None:
        states = tuple(self._states[i] for i in sorted(self._states)) if self._devices else ()
        all_ok = (
            self._status == "ok"
            and bool(states)
            and all(s.ok for s in states)
            and len(self._devices) >= self._most_seen
        )
        now = time.time()
        if all_ok:
            self._last_success = now
        with self._lock:
            self.snapshot = GpuSnapshot(
                status=self._status,
                detail=self._detail,
                driver_version=self._driver_version,
                cuda_driver_version=self._cuda_driver_version,
                devices=states,
                visible_devices=len(self._devices),
                most_devices_seen=self._most_seen,
                cycle_timestamp=now,
                cycle_duration_seconds=duration,
                last_success_timestamp=self._last_success,
                inits_total=self._inits,
                init_failures_total=self._init_failures,
                read_failures_total=dict(self._read_failures),
                field_errors_total=dict(self._field_errors),
                identities=dict(self._identities),
            )
