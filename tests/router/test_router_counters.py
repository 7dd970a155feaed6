"""The router's error counters (retries exhausted, upstream 5xx, breaker failures per worker).

``smg-1.13.0-metrics-faults.prom`` is the real smg 1.13.0 metrics port after a faulty run: three
``sentinel sim`` workers, one answering 503 to every request (``--fault http_503:rate=1``), one
SIGKILLed mid-traffic, then the healthy one SIGKILLed too (its header comment has the details).
"""

from __future__ import annotations

import json
from pathlib import Path

import httpx
from prometheus_client import CollectorRegistry
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.collect.router import RouterCollector, _Config, router_families
from sglang_sentinel.router import read_router
from sglang_sentinel.router.counters import parse_counters

DATA = Path(__file__).with_name("data")
FAULTS = (DATA / "smg-1.13.0-metrics-faults.prom").read_text()
QUIET = (DATA / "smg-1.13.0-metrics-excerpt.prom").read_text()
BAD, KILLED_FIRST, HEALTHY = "http://127.0.0.1:33735", "http://127.0.0.1:44307", "http://127.0.0.1:45413"
POOL = {
    "workers": [
        {"url": BAD, "is_healthy": True, "status": "ready"},
        {"url": KILLED_FIRST, "is_healthy": False, "status": "failed"},
        {"url": HEALTHY, "is_healthy": False, "status": "failed"},
    ]
}


def handler(metrics: str, pool: object = POOL) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/readiness":
            return httpx.Response(200, json={"status": "ready"})
        if path == "/workers":
            return httpx.Response(200, content=json.dumps(pool))
        if path == "/metrics" and request.url.port == 29000:
            return httpx.Response(200, text=metrics)
        return httpx.Response(404)

    return httpx.MockTransport(handle)


def scrape(
    metrics: str, pool: object = POOL, metrics_url: str | None = "http://router:29000/metrics"
) -> CollectorRegistry:
    reg = CollectorRegistry()
    cfg = _Config(True, "http://router:30000", metrics_url, 0, 2.0)
    reg.register(RouterCollector(cfg, transport=handler(metrics, pool)))
    return reg


def test_the_captured_label_sets_have_no_worker_on_retries_or_upstream_responses() -> None:
    # What the derived series' shape rests on: if smg grows a worker label, these fail first.
    labels = {
        f.name: {k for s in f.samples for k in s.labels} for f in text_string_to_metric_families(FAULTS)
    }
    assert labels["smg_worker_retries_exhausted"] == {"worker_type", "endpoint"}
    assert labels["smg_router_upstream_responses"] == {"router_type", "status_code", "error_code"}
    assert labels["smg_worker_cb_outcomes"] == {"worker", "outcome"}


def test_the_faulty_run_sums_to_what_happened() -> None:
    c = parse_counters(text_string_to_metric_families(FAULTS))
    assert c.retries_exhausted == 9
    # 40 503s from the faulty worker; the gateway's own: 6 failed connections (500) + 1 no worker (503).
    assert c.upstream_5xx == {"worker": 40, "gateway": 7}
    assert c.worker_failures == {BAD: 10, KILLED_FIRST: 1, HEALTHY: 4}


def test_the_collector_exports_the_derived_counters_not_the_smg_families() -> None:
    reg = scrape(FAULTS)
    assert reg.get_sample_value("sentinel_router_retries_exhausted_total") == 9
    assert reg.get_sample_value("sentinel_router_upstream_5xx_total", {"source": "worker"}) == 40
    assert reg.get_sample_value("sentinel_router_upstream_5xx_total", {"source": "gateway"}) == 7
    assert reg.get_sample_value("sentinel_router_worker_breaker_failures_total", {"worker": BAD}) == 10
    assert reg.get_sample_value("sentinel_router_worker_breaker_open", {"worker": BAD}) == 1
    names = {s.name for m in reg.collect() for s in m.samples}
    assert not {n for n in names if n.startswith("smg_")}


def test_a_quiet_router_exports_every_counter_at_zero_from_its_first_read() -> None:
    urls = [f"http://127.0.0.1:3100{i}" for i in (1, 2, 3)]  # the workers of the quiet capture
    reg = scrape(QUIET, {"workers": [{"url": u, "is_healthy": True} for u in urls]})
    assert reg.get_sample_value("sentinel_router_retries_exhausted_total") == 0
    for source in ("worker", "gateway"):
        assert reg.get_sample_value("sentinel_router_upstream_5xx_total", {"source": source}) == 0
    for url in urls:
        assert reg.get_sample_value("sentinel_router_worker_breaker_failures_total", {"worker": url}) == 0


def test_without_the_metrics_port_the_counters_are_absent_not_zero() -> None:
    reg = scrape(FAULTS, metrics_url=None)
    assert reg.get_sample_value("sentinel_router_workers", {"state": "unhealthy"}) == 2
    assert reg.get_sample_value("sentinel_router_retries_exhausted_total") is None
    assert reg.get_sample_value("sentinel_router_upstream_5xx_total", {"source": "worker"}) is None


async def test_a_router_restart_shows_as_a_counter_reset() -> None:
    # The router's count as it reports it: lower after its restart (rate() treats it as a reset).
    restarted = FAULTS.replace(
        'smg_worker_retries_exhausted_total{worker_type="regular",endpoint="completions"} 9',
        'smg_worker_retries_exhausted_total{worker_type="regular",endpoint="completions"} 1',
    )
    assert restarted != FAULTS
    async with httpx.AsyncClient(transport=handler(restarted), base_url="http://router:30000") as c:
        snap = await read_router(c, timeout_s=2, metrics_url="http://router:29000/metrics")
    assert snap.counters is not None
    assert snap.counters.retries_exhausted == 1
    assert any(f.name == "sentinel_router_retries_exhausted" for f in router_families(snap))


def test_a_counter_that_is_not_a_count_is_a_failed_read_not_an_export() -> None:
    import pytest

    for bad in ("NaN", "-3", "+Inf"):
        text = (
            "# TYPE smg_worker_retries_exhausted_total counter\n"
            f'smg_worker_retries_exhausted_total{{worker_type="regular"}} {bad}\n'
        )
        with pytest.raises(ValueError, match="not a count"):
            parse_counters(text_string_to_metric_families(text))
