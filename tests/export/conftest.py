"""Exporter fixtures: a collector set built from fakes only (fake NVML, MockTransport SGLang, log samples)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from pathlib import Path

import httpx
import pytest

from sglang_sentinel.collect import CollectorSet, SGLangLogCollector, SGLangMetricsCollector
from sglang_sentinel.collect.gpu import FakeNvml, GpuCollector, GpuPoller
from sglang_sentinel.export import Exporter, ExporterSettings

SAMPLES = Path(__file__).resolve().parents[1] / "collect" / "samples"
FIXED_TIME = 1_800_000_000.0


def fake_collectors(gpus: int = 2, sglang_sample: str = "sglang-0.5.9-tp8-synthetic.txt") -> CollectorSet:
    """Every built-in collector on fakes, with a fixed clock where the values would be volatile."""
    text = (SAMPLES / sglang_sample).read_text()
    sglang = SGLangMetricsCollector(
        "http://127.0.0.1:30000/metrics",
        transport=httpx.MockTransport(lambda r: httpx.Response(200, text=text)),
    )
    log = SGLangLogCollector(clock=lambda: FIXED_TIME)
    for line in (SAMPLES / "sglang-mixed-log-pr22166.txt").read_text().splitlines():
        if not line.startswith("# source"):
            log.feed(line)
    nvml = FakeNvml(gpus, "busy")
    poller = GpuPoller(lambda: nvml, interval=5.0, timeout=3.0, xid_events=False)
    poller.run_cycle()
    gpu = GpuCollector(poller)
    return CollectorSet([("sglang", sglang), ("sglang_log", log), ("gpu", gpu)])


@pytest.fixture
def collectors() -> CollectorSet:
    return fake_collectors()


@pytest.fixture
async def exporter_factory() -> AsyncIterator[Callable[..., Exporter]]:
    started: list[Exporter] = []

    async def make(collectors: CollectorSet, **kwargs: object) -> Exporter:
        settings = kwargs.pop("settings", None) or ExporterSettings(port=0)
        exporter = Exporter(collectors.registry(), settings, **kwargs)  # type: ignore[arg-type]
        await exporter.start()
        started.append(exporter)
        return exporter

    yield make  # type: ignore[misc]
    for exporter in started:
        await exporter.stop()
