"""Fixtures for the collector tests: a private registry per test, the fake NVML, scrape helpers."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry
from prometheus_client.registry import Collector

from sglang_sentinel.collect.gpu import FakeNvml, GpuCollector, GpuPoller

REPO_SAMPLES = Path(__file__).resolve().parent / "samples"


def registry_of(collector: Collector) -> CollectorRegistry:
    """A private registry holding only ``collector`` (never the global REGISTRY)."""
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


@pytest.fixture
def fake_nvml() -> FakeNvml:
    return FakeNvml(devices=2, sample="busy")


@pytest.fixture
def gpu(fake_nvml: FakeNvml) -> Iterator[GpuCollector]:
    poller = GpuPoller(lambda: fake_nvml, interval=1.0, timeout=0.5, init_timeout=0.5, xid_events=False)
    collector = GpuCollector(poller)
    yield collector
    poller.stop(1.0)
