"""The collector registry: per-collector success/duration, isolation of failures, config wiring."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import generate_latest
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric
from structlog.testing import capture_logs

import sglang_sentinel
from sglang_sentinel.collect import (
    CollectionFailed,
    CollectorSet,
    SGLangLogCollector,
    SGLangMetricsCollector,
    available,
    build_collector_set,
)
from sglang_sentinel.collect import registry as registry_module
from sglang_sentinel.collect.gpu import GpuCollector
from sglang_sentinel.collect.settings import BUILTIN_COLLECTORS
from sglang_sentinel.config import ConfigError, load_settings


class Fixed:
    def __init__(self, name: str = "thing_value", fail: str | None = None) -> None:
        self.name = name
        self.fail = fail

    def collect(self) -> Iterator[Metric]:
        yield GaugeMetricFamily(self.name, "A value.", value=1)
        if self.fail:
            raise CollectionFailed(self.fail)


class Crashing:
    def collect(self) -> Iterator[Metric]:
        yield from ()  # a generator: the bug surfaces when the registry iterates it
        raise ZeroDivisionError("bug")


class Background:
    def __init__(self) -> None:
        self.started = 0
        self.stopped = 0

    def collect(self) -> Iterator[Metric]:
        return iter(())

    def start(self) -> None:
        self.started += 1

    def stop(self, timeout: float) -> None:
        self.stopped += 1

    def last_success_timestamp(self) -> float | None:
        return 1234.5


def sample(registry_text: str, line_start: str) -> str:
    return next(ln for ln in registry_text.splitlines() if ln.startswith(line_start))


def test_success_duration_and_partial_data() -> None:
    collectors = CollectorSet([("good", Fixed("good_value")), ("bad", Fixed("bad_value", fail="broken"))])
    text = generate_latest(collectors.registry()).decode()
    assert 'sentinel_collector_success{collector="good"} 1.0' in text
    assert 'sentinel_collector_success{collector="bad"} 0.0' in text
    assert sample(text, 'sentinel_collector_duration_seconds{collector="bad"}')
    # What a failing source yielded before failing is still served (e.g. the healthy GPUs).
    assert "bad_value 1.0" in text
    assert "good_value 1.0" in text


def test_a_crashing_collector_does_not_take_the_scrape_down() -> None:
    collectors = CollectorSet([("crash", Crashing()), ("good", Fixed())])
    with capture_logs() as logs:
        text = generate_latest(collectors.registry()).decode()
    assert 'sentinel_collector_success{collector="crash"} 0.0' in text
    assert 'sentinel_collector_success{collector="good"} 1.0' in text
    assert any(e["event"] == "collector_crashed" for e in logs)


def test_failures_are_logged_on_change_only() -> None:
    source = Fixed(fail="down")
    collectors = CollectorSet([("x", source)])
    registry = collectors.registry()
    with capture_logs() as logs:
        for _ in range(5):
            generate_latest(registry)
        source.fail = None
        generate_latest(registry)
        generate_latest(registry)
    events = [(e["event"], e.get("log_level"), e.get("reason")) for e in logs]
    # Before its first success the server is still starting: info, not a warning.
    assert events == [("collector_not_up_yet", "info", "down"), ("collector_recovered", "info", None)]
    assert collectors.failing == {}
    source.fail = "broken again"
    with capture_logs() as logs:
        generate_latest(registry)
    assert [(e["event"], e["log_level"]) for e in logs] == [("collector_failing", "warning")]
    assert collectors.failing == {"x": "broken again"}


def test_a_collector_that_never_works_warns_once_it_outlasts_a_start(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry_module, "NOT_UP_GRACE_SECONDS", 0.0)
    collectors = CollectorSet([("x", Fixed(fail="connection refused"))])
    registry = collectors.registry()
    with capture_logs() as logs:
        for _ in range(3):
            generate_latest(registry)
    assert [(e["event"], e["log_level"]) for e in logs] == [("collector_failing", "warning")]


def test_build_info_and_last_success() -> None:
    collectors = CollectorSet([("bg", Background())])
    text = generate_latest(collectors.registry()).decode()
    assert f'version="{sglang_sentinel.__version__}"' in sample(text, "sentinel_build_info{")
    assert 'sentinel_collector_last_success_timestamp_seconds{collector="bg"} 1234.5' in text


async def test_start_stop_background_sources() -> None:
    bg = Background()
    collectors = CollectorSet([("bg", bg), ("plain", Fixed())])
    await collectors.start()
    late = Background()
    collectors.add("late", late)  # added after start: started at once
    await collectors.stop(grace=1.0)
    assert (bg.started, bg.stopped, late.started, late.stopped) == (1, 1, 1, 1)
    assert collectors.names == ("bg", "plain", "late")
    assert collectors.get("late") is late
    assert collectors.get("nope") is None
    with pytest.raises(ValueError, match="added twice"):
        collectors.add("bg", Fixed())


def test_builtin_names_match_the_registry() -> None:
    assert available() == frozenset(BUILTIN_COLLECTORS)


async def test_build_from_settings() -> None:
    settings = load_settings(
        environ={
            "SENTINEL_COLLECTORS__ENABLED": '["sglang_log", "sglang", "gpu"]',
            "SENTINEL_SERVER__PORT": "31234",
            "SENTINEL_COLLECTORS__GPU__BACKEND": "fake",
            "SENTINEL_COLLECTORS__GPU__FAKE_DEVICES": "3",
        }
    )
    collectors = build_collector_set(settings)
    assert collectors.names == ("sglang_log", "sglang", "gpu")
    sglang = collectors.get("sglang")
    assert isinstance(sglang, SGLangMetricsCollector)
    assert sglang.url == "http://127.0.0.1:31234/metrics"
    assert isinstance(collectors.get("sglang_log"), SGLangLogCollector)
    gpu = collectors.get("gpu")
    assert isinstance(gpu, GpuCollector)
    assert gpu.poller.run_cycle().visible_devices == 3
    await collectors.stop(grace=1.0)
    sglang.close()


def test_config_rejects_unknown_collectors_and_bad_gpu_timing() -> None:
    with pytest.raises(ConfigError, match="unknown collector"):
        load_settings(environ={"SENTINEL_COLLECTORS__ENABLED": '["gpu", "nvidia"]'})
    with pytest.raises(ConfigError, match="timeout_seconds must not exceed"):
        load_settings(
            environ={
                "SENTINEL_COLLECTORS__GPU__INTERVAL_SECONDS": "1",
                "SENTINEL_COLLECTORS__GPU__TIMEOUT_SECONDS": "2",
            }
        )


def test_outcome_is_unknown_until_collected_and_refresh_updates_it() -> None:
    # Nothing may scrape the embedded default: the status page must not call an uncollected
    # collector "ok", and refresh() must bring the flags up to date without a scrape.
    source = Fixed(fail="down")
    collectors = CollectorSet([("x", source), ("y", Fixed())])
    assert collectors.outcome("x") is None
    assert collectors.outcome("y") is None
    assert collectors.is_stale(60.0)
    collectors.refresh()
    assert collectors.outcome("x") is False
    assert collectors.outcome("y") is True
    assert not collectors.is_stale(60.0)
    assert collectors.is_stale(-1.0)
    source.fail = None
    collectors.refresh()
    assert collectors.outcome("x") is True
