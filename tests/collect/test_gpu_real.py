"""The GPU collector on real hardware through nvidia-ml-py (marker ``gpu``; skipped without a GPU)."""

from __future__ import annotations

from collections.abc import Iterator

import pynvml
import pytest

from sglang_sentinel.collect.gpu import GpuCollector, GpuPoller
from sglang_sentinel.collect.render import render
from sglang_sentinel.collect.source import CollectionFailed

pytestmark = pytest.mark.gpu


@pytest.fixture
def poller() -> Iterator[GpuPoller]:
    p = GpuPoller(lambda: pynvml, interval=2.0, timeout=2.0)
    if p.run_cycle().status != "ok":
        pytest.skip(f"no usable GPU here (NVML: {p.snapshot.status})")
    yield p
    p.stop(5.0)


def test_every_gpu_reads_completely(poller: GpuPoller) -> None:
    snap = poller.run_cycle()
    assert snap.visible_devices >= 1
    for state in snap.devices:
        r = state.reading
        assert state.ok, state.error
        assert r is not None
        assert r.memory_total_bytes
        assert r.memory_total_bytes > 2**30
        assert r.power_watts is not None
        assert 0 < r.power_watts < 2000
        assert r.temperature_celsius is not None
        assert 0 < r.temperature_celsius < 120
        assert r.pcie_link_width is not None
        assert r.pcie_link_width >= 1
        assert r.utilization_ratio is not None
        assert 0 <= r.utilization_ratio <= 1
        assert r.energy_joules is not None
        assert r.energy_joules > 0
        assert r.duration_seconds < 2.0
        assert not r.errors, r.errors  # no unexpected NVML failures on a healthy GPU


def test_collector_serves_every_gpu(poller: GpuPoller) -> None:
    collector = GpuCollector(poller)
    poller.run_cycle()
    try:
        families = list(collector.collect())
    except CollectionFailed as exc:  # pragma: no cover - a real failure is the finding
        pytest.fail(str(exc))
    power = next(f for f in families if f.name == "sentinel_gpu_power_watts")
    assert len(power.samples) == poller.snapshot.visible_devices

    class One:
        def collect(self) -> list:  # type: ignore[type-arg]
            return families

    assert b"sentinel_gpu_info{" in render(One(), "openmetrics")
