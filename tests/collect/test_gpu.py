"""The GPU collector on the fake NVML fed with real H200 readings: values, units, every error class."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pynvml
import pytest
from prometheus_client.core import Metric

from sglang_sentinel.atomic import atomic_write_bytes
from sglang_sentinel.collect.gpu import (
    ErrorClass,
    FakeNvml,
    GpuCollector,
    GpuPoller,
    NvmlLifecycleError,
    classify,
    error_name,
    load_sample,
)
from sglang_sentinel.collect.source import CollectionFailed
from support.waits import until_sync

UUID0 = "GPU-00000000-1111-2222-3333-444444444400"


def scrape(collector: GpuCollector) -> tuple[dict[tuple[str, frozenset[tuple[str, str]]], float], str | None]:
    """All samples as {(name, labels): value} and the failure reason (None = success)."""
    out: list[Metric] = []
    failure = None
    try:
        for metric in collector.collect():
            out.append(metric)
    except CollectionFailed as exc:
        failure = str(exc)
    samples = {(s.name, frozenset(s.labels.items())): s.value for m in out for s in m.samples}
    return samples, failure


def value(
    samples: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, gpu: str = "0", **labels: str
) -> float:
    for (n, lab), v in samples.items():
        d = dict(lab)
        if n == name and d.get("gpu") == gpu and all(d.get(k) == w for k, w in labels.items()):
            return v
    raise KeyError(name)


def names(samples: dict[tuple[str, frozenset[tuple[str, str]]], float]) -> set[str]:
    return {n for n, _ in samples}


def test_busy_h200_values_in_base_units(gpu: GpuCollector) -> None:
    gpu.poller.run_cycle()
    s, failure = scrape(gpu)
    assert failure is None
    dev = load_sample("busy")["devices"][0]
    assert value(s, "sentinel_gpu_utilization_ratio") == 1.0
    assert value(s, "sentinel_gpu_memory_utilization_ratio") == 0.2
    assert value(s, "sentinel_gpu_memory_used_bytes") == dev["memory_info_v2"]["value"]["used"]
    assert value(s, "sentinel_gpu_memory_total_bytes") == 150754820096
    assert value(s, "sentinel_gpu_memory_reserved_bytes") == 644939776
    assert value(s, "sentinel_gpu_power_watts") == pytest.approx(651.508)
    assert value(s, "sentinel_gpu_power_limit_watts") == 700.0
    assert value(s, "sentinel_gpu_energy_joules_total") == pytest.approx(4836.033)
    assert value(s, "sentinel_gpu_temperature_celsius") == 57
    assert value(s, "sentinel_gpu_sm_clock_hertz") == 1665e6
    assert value(s, "sentinel_gpu_memory_clock_hertz") == 3201e6
    assert value(s, "sentinel_gpu_sm_clock_max_hertz") == 1980e6
    assert value(s, "sentinel_gpu_pcie_rx_bytes_per_second") == 28272891 * 1024
    assert value(s, "sentinel_gpu_pcie_tx_bytes_per_second") == 9012 * 1024
    assert value(s, "sentinel_gpu_pcie_link_generation") == 5
    assert value(s, "sentinel_gpu_pcie_link_max_width") == 16
    assert value(s, "sentinel_gpu_pcie_replays_total") == 0
    assert value(s, "sentinel_gpu_ecc_enabled") == 1
    assert value(s, "sentinel_gpu_ecc_uncorrected_errors_total") == 0
    assert value(s, "sentinel_gpu_row_remap_failure") == 0
    assert value(s, "sentinel_gpu_clock_limited_seconds_total", policy="power") == pytest.approx(1.866803392)
    # 0x4 = SwPowerCap: the busy H200 sat at its 700 W cap.
    assert value(s, "sentinel_gpu_clock_event_active", reason="power_cap") == 1
    assert value(s, "sentinel_gpu_clock_event_active", reason="gpu_idle") == 0
    assert value(s, "sentinel_gpu_process_memory_used_bytes", pid="5000000") == 2267873280
    assert value(s, "sentinel_gpu_read_success") == 1
    # Identity labels on every GPU series.
    info = [dict(lab) for (n, lab) in s if n == "sentinel_gpu_info"]
    assert {i["uuid"] for i in info} == {UUID0, UUID0[:-2] + "01"}
    assert info[0]["name"] == "NVIDIA H200"
    assert info[0]["driver_version"] == "580.159.04"
    assert {i["pci_bus_id"] for i in info} == {"00000000:00:06.0", "00000000:28:00.0"}


def test_idle_sample_reads_idle_values() -> None:
    nvml = FakeNvml(1, "idle")
    collector = GpuCollector(GpuPoller(lambda: nvml, xid_events=False))
    collector.poller.run_cycle()
    s, failure = scrape(collector)
    assert failure is None
    assert value(s, "sentinel_gpu_utilization_ratio") == 0
    assert value(s, "sentinel_gpu_power_watts") == pytest.approx(80.382)
    # memory_info_v2 reports 0 used at idle: no process series (not a 0-byte process).
    assert "sentinel_gpu_process_memory_used_bytes" not in names(s)


def test_unsupported_fields_are_absent_not_zero(gpu: GpuCollector, fake_nvml: FakeNvml) -> None:
    fake_nvml.fail("nvmlDeviceGetPcieThroughput", pynvml.NVML_ERROR_NOT_SUPPORTED)
    fake_nvml.fail("nvmlDeviceGetTotalEnergyConsumption", pynvml.NVML_ERROR_NO_PERMISSION)
    gpu.poller.run_cycle()
    s, failure = scrape(gpu)
    assert failure is None  # unsupported is not a failure
    assert "sentinel_gpu_fan_speed_ratio" not in names(s)  # the H200 sample: fan Not Supported
    assert "sentinel_gpu_pcie_rx_bytes_per_second" not in names(s)
    assert "sentinel_gpu_energy_joules_total" not in names(s)
    assert "sentinel_gpu_field_errors_total" not in names(s)  # not-supported is not an error


def test_transient_field_error_is_counted_and_absent(gpu: GpuCollector, fake_nvml: FakeNvml) -> None:
    fake_nvml.fail("nvmlDeviceGetTemperature", pynvml.NVML_ERROR_UNKNOWN, device=1, times=1)
    gpu.poller.run_cycle()
    s, failure = scrape(gpu)
    assert failure is None
    assert value(s, "sentinel_gpu_temperature_celsius", gpu="0") == 57
    with pytest.raises(KeyError):
        value(s, "sentinel_gpu_temperature_celsius", gpu="1")
    assert value(s, "sentinel_gpu_field_errors_total", gpu="1", field="temperature", error="unknown") == 1
    gpu.poller.run_cycle()  # one-off: back next cycle, the count stays
    s, _ = scrape(gpu)
    assert value(s, "sentinel_gpu_temperature_celsius", gpu="1") == 57
    assert value(s, "sentinel_gpu_field_errors_total", gpu="1", field="temperature", error="unknown") == 1


@pytest.mark.parametrize(
    ("code", "name"),
    [
        (pynvml.NVML_ERROR_GPU_IS_LOST, "gpu_is_lost"),
        (pynvml.NVML_ERROR_UNINITIALIZED, "uninitialized"),
        (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver_not_loaded"),
        (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "lib_rm_version_mismatch"),
        (pynvml.NVML_ERROR_GPU_NOT_FOUND, "gpu_not_found"),
        (pynvml.NVML_ERROR_RESET_REQUIRED, "reset_required"),
    ],
)
def test_lifecycle_error_fails_and_reinitialises(
    gpu: GpuCollector, fake_nvml: FakeNvml, code: int, name: str
) -> None:
    gpu.poller.run_cycle()
    fake_nvml.fail("nvmlDeviceGetPowerUsage", code, device=1, times=1)
    gpu.poller.run_cycle()
    s, failure = scrape(gpu)
    assert failure is not None
    assert name in failure
    # GPU 1's data is gone (never stale), GPU 0's stays, the reason is counted.
    assert value(s, "sentinel_gpu_read_success", gpu="1") == 0
    with pytest.raises(KeyError):
        value(s, "sentinel_gpu_power_watts", gpu="1")
    assert value(s, "sentinel_gpu_power_watts", gpu="0") > 0
    assert value(s, "sentinel_gpu_read_failures_total", gpu="1", reason=name) == 1
    assert [dict(lab)["status"] for (n, lab) in s if n == "sentinel_gpu_nvml_status"] == [name]
    inits = fake_nvml.init_calls
    gpu.poller.run_cycle()  # next cycle: shutdown + init, and all is well again
    assert fake_nvml.init_calls == inits + 1
    s, failure = scrape(gpu)
    assert failure is None
    assert value(s, "sentinel_gpu_power_watts", gpu="1") > 0
    nvml_inits = [v for (n, _), v in s.items() if n == "sentinel_gpu_nvml_inits_total"]
    assert nvml_inits == [2.0]


def test_lost_gpu_that_stays_lost_keeps_failing_and_retrying(gpu: GpuCollector, fake_nvml: FakeNvml) -> None:
    gpu.poller.run_cycle()
    fake_nvml.fail("nvmlDeviceGetUUID", pynvml.NVML_ERROR_GPU_IS_LOST, device=1)
    fake_nvml.lose_gpu(1)
    for _ in range(3):
        gpu.poller.run_cycle()
        s, failure = scrape(gpu)
        assert failure is not None
    # Every re-init fails on GPU 1's identity: no GPU series at all rather than a half-truth.
    assert gpu.poller.snapshot.status == "gpu_is_lost"
    assert "sentinel_gpu_power_watts" not in names(s)
    assert [dict(lab)["status"] for (n, lab) in s if n == "sentinel_gpu_nvml_status"] == ["gpu_is_lost"]
    fake_nvml.clear_faults()
    gpu.poller.run_cycle()
    _, failure = scrape(gpu)
    assert failure is None


def test_gpu_falling_off_the_bus_is_a_failure(gpu: GpuCollector, fake_nvml: FakeNvml) -> None:
    gpu.poller.run_cycle()
    fake_nvml.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_GPU_IS_LOST, device=1, times=1)
    gpu.poller.run_cycle()
    fake_nvml.devices = 1  # after re-init NVML sees one GPU fewer
    gpu.poller.run_cycle()
    s, failure = scrape(gpu)
    assert failure is not None
    assert "1 of 2 GPUs visible" in failure
    assert [v for (n, _), v in s.items() if n == "sentinel_gpu_visible_devices"] == [1.0]
    assert [v for (n, _), v in s.items() if n == "sentinel_gpu_expected_devices"] == [2.0]


def _replace(path: Path, text: str) -> None:
    # As the fault file's writers must: a whole new file renamed over the old one.
    atomic_write_bytes(path, text.encode())


def test_the_daemons_fake_gpus_lose_a_gpu_named_in_the_fault_file(tmp_path: Path) -> None:
    """``[collectors.gpu] fake_faults_file``: how the live alert tests lose a GPU of a running daemon."""
    from sglang_sentinel.collect.gpu.collector import _factory
    from sglang_sentinel.collect.settings import GpuSettings

    faults = tmp_path / "faults.json"
    settings = GpuSettings(backend="fake", fake_devices=2, xid_events=False, fake_faults_file=faults)
    collector = _factory(settings)
    assert isinstance(collector, GpuCollector)
    collector.poller.run_cycle()  # absent: no GPU lost
    assert scrape(collector)[1] is None
    _replace(faults, '{"lost": [1]}')
    for _ in range(2):  # the failed read, then the re-init that cannot read GPU 1's identity
        collector.poller.run_cycle()
    s, failure = scrape(collector)
    assert failure is not None
    assert "gpu_is_lost" in failure
    assert [v for (n, _), v in s.items() if n == "sentinel_gpu_visible_devices"] == [0.0]
    assert [v for (n, _), v in s.items() if n == "sentinel_gpu_expected_devices"] == [2.0]
    # A file that is no JSON object with a list of indices changes nothing.
    _replace(faults, '{"lost": "all"}')
    collector.poller.run_cycle()
    assert scrape(collector)[1] is not None
    _replace(faults, '{"lost": []}')
    collector.poller.run_cycle()
    s, failure = scrape(collector)
    assert failure is None
    assert [v for (n, _), v in s.items() if n == "sentinel_gpu_visible_devices"] == [2.0]
    _replace(faults, '{"lost": [0]}')
    collector.poller.run_cycle()
    assert scrape(collector)[1] is not None
    faults.unlink()  # absent again: none lost
    collector.poller.run_cycle()
    assert scrape(collector)[1] is None


def test_the_nvml_backend_has_no_fault_file() -> None:
    from sglang_sentinel.collect.gpu.collector import _factory
    from sglang_sentinel.collect.settings import GpuSettings

    collector = _factory(GpuSettings(backend="nvml", fake_faults_file=Path("faults.json")))
    assert isinstance(collector, GpuCollector)
    assert collector.poller._nvml_factory() is pynvml


def test_the_fake_backend_is_one_set_of_gpus_across_inits() -> None:
    """A poller re-initialises NVML after a lost GPU: the fake backend's GPUs (and their energy
    counters) are still the same ones, for the daemon and for `sentinel bench` alike."""
    from sglang_sentinel.collect.gpu.fake import nvml_backend
    from sglang_sentinel.collect.settings import GpuSettings

    factory = nvml_backend(GpuSettings(backend="fake", fake_devices=2))
    first = factory()
    assert isinstance(first, FakeNvml)
    assert factory() is first


def test_no_gpu_library_is_a_clean_status() -> None:
    """What CI and this machine see: nvmlInit raises LibraryNotFound."""
    nvml = FakeNvml(library_present=False)
    collector = GpuCollector(GpuPoller(lambda: nvml, xid_events=False))
    collector.poller.run_cycle()
    s, failure = scrape(collector)
    assert failure is not None
    assert "library_not_found" in failure
    assert [dict(lab)["status"] for (n, lab) in s if n == "sentinel_gpu_nvml_status"] == ["library_not_found"]
    assert [v for (n, _), v in s.items() if n == "sentinel_gpu_nvml_init_failures_total"] == [1.0]
    assert not [n for n in names(s) if n == "sentinel_gpu_info"]


def test_real_pynvml_without_gpu_does_not_crash() -> None:
    """The real binding on a machine with no driver (CI): a status, never an exception."""
    collector = GpuCollector(GpuPoller(lambda: pynvml, xid_events=False, init_timeout=10))
    snap = collector.poller.run_cycle()
    if snap.status == "ok":
        pytest.skip("this machine has a GPU")
    _, failure = scrape(collector)
    assert failure is not None
    assert snap.status in {"library_not_found", "driver_not_loaded", "no_devices"}


def test_init_failure_then_recovery() -> None:
    nvml = FakeNvml(1)
    nvml.fail("nvmlInit", pynvml.NVML_ERROR_DRIVER_NOT_LOADED, times=2)
    poller = GpuPoller(lambda: nvml, xid_events=False)
    assert poller.run_cycle().status == "driver_not_loaded"
    assert poller.run_cycle().status == "driver_not_loaded"
    snap = poller.run_cycle()
    assert snap.status == "ok"
    assert snap.devices[0].ok
    assert snap.init_failures_total == 2
    assert snap.inits_total == 1


def test_zero_gpus_is_not_an_idle_box() -> None:
    nvml = FakeNvml(0)
    collector = GpuCollector(GpuPoller(lambda: nvml, xid_events=False))
    assert collector.poller.run_cycle().status == "no_devices"
    _, failure = scrape(collector)
    assert failure is not None
    assert "no_devices" in failure


def test_wedged_driver_call_never_blocks_the_cycle(fake_nvml: FakeNvml) -> None:
    poller = GpuPoller(lambda: fake_nvml, interval=1.0, timeout=0.2, xid_events=False)
    collector = GpuCollector(poller)
    try:
        poller.run_cycle()
        release = fake_nvml.hang("nvmlDeviceGetPcieThroughput", device=1)
        started = time.monotonic()
        poller.run_cycle()
        assert time.monotonic() - started < 1.0  # the deadline, not the driver, decides
        s, failure = scrape(collector)
        assert failure is not None
        assert "gpu 1: timeout" in failure
        assert value(s, "sentinel_gpu_read_success", gpu="1") == 0
        assert value(s, "sentinel_gpu_read_success", gpu="0") == 1
        # While the call stays stuck, the GPU's worker takes no new job: "stuck", and no thread pile-up.
        threads = threading.active_count()
        for _ in range(3):
            poller.run_cycle()
        assert threading.active_count() == threads
        s, failure = scrape(collector)
        assert failure is not None
        assert "gpu 1: stuck" in failure
        assert value(s, "sentinel_gpu_read_failures_total", gpu="1", reason="stuck") == 3
        release.set()
        time.sleep(0.05)
        fake_nvml._hangs.clear()
        poller.run_cycle()
        _, failure = scrape(collector)
        assert failure is None
    finally:
        poller.stop(1.0)


def test_wedged_init_times_out() -> None:
    nvml = FakeNvml(1)
    release = nvml.hang("nvmlInit")
    poller = GpuPoller(lambda: nvml, init_timeout=0.1, xid_events=False)
    try:
        assert poller.run_cycle().status == "init_timeout"
        assert poller.run_cycle().status == "init_timeout"  # still stuck: no second init thread
        assert nvml.calls["nvmlInit"] == 1
        release.set()
        nvml._hangs.clear()
        time.sleep(0.05)
        assert poller.run_cycle().status == "ok"
    finally:
        release.set()
        poller.stop(1.0)


def test_stop_returns_with_a_wedged_call(fake_nvml: FakeNvml) -> None:
    poller = GpuPoller(lambda: fake_nvml, interval=0.05, timeout=0.05, xid_events=False)
    release = fake_nvml.hang("nvmlDeviceGetUtilizationRates")
    poller.start()
    time.sleep(0.2)
    started = time.monotonic()
    poller.stop(0.5)
    assert time.monotonic() - started < 1.5
    release.set()


def test_stale_snapshot_drops_series(fake_nvml: FakeNvml) -> None:
    now = [time.time()]
    poller = GpuPoller(lambda: fake_nvml, interval=1.0, timeout=0.5, xid_events=False)
    collector = GpuCollector(poller, clock=lambda: now[0])
    poller.run_cycle()
    s, failure = scrape(collector)
    assert failure is None
    assert "sentinel_gpu_power_watts" in names(s)
    now[0] += 10  # the background thread died or hangs: no cycle for 10 s (max age 2.5 s)
    s, failure = scrape(collector)
    assert failure is not None
    assert "no gpu cycle in the last" in failure
    assert "sentinel_gpu_power_watts" not in names(s)
    assert value(s, "sentinel_gpu_read_success") == 0
    assert "sentinel_gpu_last_read_timestamp_seconds" in names(s)


def test_background_thread_publishes_and_counts_xids(fake_nvml: FakeNvml) -> None:
    poller = GpuPoller(lambda: fake_nvml, interval=0.05, timeout=5.0)
    collector = GpuCollector(poller)
    collector.start()
    try:
        until_sync(lambda: poller.snapshot.status == "ok", what="the first GPU cycle")
        emitted = time.time()
        fake_nvml.emit_xid(1, 79)
        fake_nvml.emit_xid(1, 79)
        fake_nvml.emit_xid(0, 48)

        def counted() -> bool:
            try:
                return value(scrape(collector)[0], "sentinel_gpu_xid_errors_total", gpu="1", xid="79") == 2
            except KeyError:  # not seen yet
                return False

        until_sync(counted, what="both XID 79 events counted")
        s, failure = scrape(collector)
        assert failure is None
        assert value(s, "sentinel_gpu_xid_errors_total", gpu="1", xid="79") == 2
        assert value(s, "sentinel_gpu_xid_errors_total", gpu="0", xid="48") == 1
        # stamped when the poller saw it: after the emit, before now
        seen = value(s, "sentinel_gpu_xid_last_timestamp_seconds", gpu="1", xid="79")
        assert emitted <= seen <= time.time()
        assert collector.last_success_timestamp() is not None
    finally:
        collector.stop(2.0)


def test_error_classification() -> None:
    assert classify(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)) is ErrorClass.ABSENT
    assert classify(pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)) is ErrorClass.ABSENT
    assert classify(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) is ErrorClass.LIFECYCLE
    assert classify(pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)) is ErrorClass.LIFECYCLE
    assert classify(pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)) is ErrorClass.TRANSIENT
    assert classify(AttributeError("nvmlDeviceGetNew")) is ErrorClass.ABSENT
    assert classify(OSError("ctypes")) is ErrorClass.TRANSIENT
    assert error_name(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)) == "gpu_is_lost"
    assert error_name(pynvml.NVMLError(12345)) == "nvml_12345"
    assert error_name(NvmlLifecycleError("init_timeout")) == "init_timeout"


ALL_NVML_ERRORS = sorted(
    (name, value)
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
)


@pytest.mark.parametrize(("name", "code"), ALL_NVML_ERRORS, ids=[n for n, _ in ALL_NVML_ERRORS])
def test_every_nvml_error_on_a_field(name: str, code: int) -> None:
    """Each NVML error, raised by one field's call, has exactly one of three outcomes."""
    nvml = FakeNvml(1)
    collector = GpuCollector(GpuPoller(lambda: nvml, xid_events=False))
    collector.poller.run_cycle()
    nvml.fail("nvmlDeviceGetTemperature", code, times=1)
    collector.poller.run_cycle()
    s, failure = scrape(collector)
    kind = classify(pynvml.NVMLError(code))
    temperature = [v for (n, _), v in s.items() if n == "sentinel_gpu_temperature_celsius"]
    errors = [v for (n, _), v in s.items() if n == "sentinel_gpu_field_errors_total"]
    if kind is ErrorClass.ABSENT:
        assert (failure, temperature, errors) == (None, [], [])
    elif kind is ErrorClass.TRANSIENT:
        assert (failure, temperature, errors) == (None, [], [1.0])
    else:
        assert failure is not None
        assert "sentinel_gpu_power_watts" not in names(s)  # the whole GPU's data, not one field
        collector.poller.run_cycle()  # re-initialised, and fine again
        assert scrape(collector)[1] is None
    if name == "NVML_ERROR_TIMEOUT":
        assert kind is ErrorClass.TRANSIENT


def test_stop_with_a_wedged_shutdown_does_not_raise() -> None:
    nvml = FakeNvml(1)
    poller = GpuPoller(lambda: nvml, xid_events=False, init_timeout=0.1)
    poller.run_cycle()
    release = nvml.hang("nvmlShutdown")
    started = time.monotonic()
    poller.stop(0.3)
    assert time.monotonic() - started < 1.0
    release.set()


def test_a_replaced_gpu_does_not_inherit_the_old_reading(fake_nvml: FakeNvml) -> None:
    poller = GpuPoller(lambda: fake_nvml, xid_events=False)
    poller.run_cycle()
    assert poller.snapshot.devices[1].reading is not None
    fake_nvml.fail("nvmlDeviceGetPowerUsage", pynvml.NVML_ERROR_GPU_IS_LOST, device=1, times=2)
    poller.run_cycle()  # GPU 1 lost: its last reading is kept (not served) until re-init
    original = fake_nvml.nvmlDeviceGetUUID
    fake_nvml.nvmlDeviceGetUUID = lambda handle: "GPU-new-board" if handle.index == 1 else original(handle)  # type: ignore[method-assign]
    snap = poller.run_cycle()  # re-init finds another board at index 1, whose first read fails
    assert snap.devices[1].identity.uuid == "GPU-new-board"
    assert not snap.devices[1].ok
    assert snap.devices[1].reading is None  # not the old board's numbers under the new UUID
    assert snap.devices[0].reading is not None
    poller.stop(1.0)


def test_a_slow_init_does_not_eat_the_read_deadline() -> None:
    nvml = FakeNvml(1)
    release = nvml.hang("nvmlInit")
    timer = threading.Timer(0.3, release.set)
    timer.start()
    poller = GpuPoller(lambda: nvml, timeout=0.25, init_timeout=5.0, xid_events=False)
    try:
        snap = poller.run_cycle()  # init takes 0.3 s, longer than the whole read deadline
        assert snap.status == "ok"
        assert snap.devices[0].ok
    finally:
        timer.cancel()
        release.set()
        poller.stop(1.0)
