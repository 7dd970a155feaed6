"""A host without an NVIDIA driver: not applicable where no GPU is expected, a failure where one is."""

from __future__ import annotations

from pathlib import Path

from structlog.testing import capture_logs

from sglang_sentinel.collect.gpu import FakeNvml, GpuCollector, GpuPoller
from sglang_sentinel.collect.registry import CollectorSet
from sglang_sentinel.config import Settings

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def collect(collectors: CollectorSet) -> Samples:
    return {(s.name, frozenset(s.labels.items())): s.value for m in collectors.collect() for s in m.samples}


def gpu_set(nvml: FakeNvml, *, expected: bool) -> tuple[CollectorSet, GpuCollector]:
    gpu = GpuCollector(GpuPoller(lambda: nvml, xid_events=False), expected=expected)
    return CollectorSet([("gpu", gpu)]), gpu


def states(samples: Samples) -> dict[str, float]:
    return {
        dict(lab)["state"]: v
        for (n, lab), v in samples.items()
        if n == "sentinel_collector_state" and dict(lab)["collector"] == "gpu"
    }


def success(samples: Samples) -> list[float]:
    return [v for (n, lab), v in samples.items() if n == "sentinel_collector_success"]


def test_no_driver_where_no_gpu_is_expected_is_not_applicable() -> None:
    collectors, gpu = gpu_set(FakeNvml(library_present=False), expected=False)
    gpu.poller.run_cycle()
    samples = collect(collectors)
    assert states(samples) == {"ok": 0.0, "failing": 0.0, "not_applicable": 1.0}
    assert success(samples) == []  # not collected is no "failed"
    assert collectors.state("gpu") == "not_applicable"
    assert collectors.outcome("gpu") is None
    assert collectors.failing == {}
    assert "library_not_found" in collectors.not_applicable["gpu"]
    # The NVML status series still says what NVML answered.
    status = [dict(lab)["status"] for (n, lab), _ in samples.items() if n == "sentinel_gpu_nvml_status"]
    assert status == ["library_not_found"]


def test_no_driver_where_gpus_are_expected_is_a_failure() -> None:
    collectors, gpu = gpu_set(FakeNvml(library_present=False), expected=True)
    gpu.poller.run_cycle()
    samples = collect(collectors)
    assert states(samples) == {"ok": 0.0, "failing": 1.0, "not_applicable": 0.0}
    assert success(samples) == [0.0]
    assert collectors.state("gpu") == "failing"
    assert collectors.outcome("gpu") is False
    assert "library_not_found" in collectors.failing["gpu"]


def test_a_host_that_had_gpus_and_lost_its_driver_fails_even_where_none_are_expected() -> None:
    nvml = FakeNvml(1)
    collectors, gpu = gpu_set(nvml, expected=False)
    gpu.poller.run_cycle()
    assert states(collect(collectors))["ok"] == 1.0
    nvml.library_present = False
    gpu.poller.run_cycle()
    gpu.poller.run_cycle()
    samples = collect(collectors)
    assert states(samples)["failing"] == 1.0, collectors.not_applicable
    assert success(samples) == [0.0]


def test_gpus_are_expected_where_the_launch_needs_them(tmp_path: Path) -> None:
    def expected(**server: object) -> bool | None:
        s = Settings(state_dir=tmp_path, server=server)  # type: ignore[arg-type]
        return s.with_gpu_expectation().collectors.gpu.expected

    assert expected() is False  # the embedded default: the simulator needs no GPU
    assert expected(profile="glm5-nvfp4-rtxpro6000") is True  # TP=8
    assert expected(mode="external") is False  # launches nothing
    assert expected(profile="no-such-profile") is True  # refused by validation; cautious meanwhile
    written = Settings(state_dir=tmp_path, collectors={"gpu": {"expected": True}})  # type: ignore[arg-type]
    assert written.with_gpu_expectation().collectors.gpu.expected is True


def _nvml_levels(nvml: FakeNvml, *, expected: bool, cycles: int = 1) -> list[str]:
    _, gpu = gpu_set(nvml, expected=expected)
    with capture_logs() as logs:
        for _ in range(cycles):
            gpu.poller.run_cycle()
    return [e["log_level"] for e in logs if e["event"] == "nvml_unavailable"]


def test_nvml_missing_is_said_at_info_where_no_gpu_is_expected_and_as_a_warning_elsewhere() -> None:
    # A routine start of a launch that needs no GPU on a host without a driver: nothing is wrong.
    assert _nvml_levels(FakeNvml(library_present=False), expected=False) == ["info"]
    assert _nvml_levels(FakeNvml(library_present=False), expected=True) == ["warning"]
    # GPUs seen, then the driver gone: a warning even where none are expected (the failed read).
    nvml = FakeNvml(1)
    _, gpu = gpu_set(nvml, expected=False)
    gpu.poller.run_cycle()
    nvml.library_present = False
    with capture_logs() as logs:
        gpu.poller.run_cycle()
        gpu.poller.run_cycle()
    assert "warning" in [e["log_level"] for e in logs], logs
    assert all(e["log_level"] != "info" for e in logs if e["event"] == "nvml_unavailable")
