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


SAMPLES = Path(__file__).resolve().parents[1] / "support" / "samples"
OUTAGE = (SAMPLES / "smg-1.13.0-breaker-outage-metrics.prom").read_text()
OUTAGE_POOL = json.loads((SAMPLES / "smg-1.13.0-breaker-outage-workers.json").read_text())
ALERT_TESTS = Path(__file__).resolve().parents[2] / "deploy" / "alerts.test.yml"


def _expand(values: str) -> list[float]:
    """promtool's input_series notation (``a``, ``axn``, ``a+bxn``, ``a-bxn``) as a list of samples."""
    import re

    out: list[float] = []
    for term in values.split():
        m = re.fullmatch(r"(-?[\d.]+)(?:([+-][\d.]+))?(?:x(\d+))?", term)
        assert m is not None, term
        start, step, n = float(m.group(1)), float(m.group(2) or 0), int(m.group(3) or 0)
        out.extend(start + step * i for i in range(n + 1))
    return out


def test_the_breaker_outage_capture_is_no_routable_worker_and_the_gateways_own_503s() -> None:
    # smg 1.13.0, both workers answering 503 with /health fine: both breakers open, /readiness
    # still ready, every later request the router's own 503 no_available_workers.
    reg = scrape(OUTAGE, OUTAGE_POOL)
    assert reg.get_sample_value("sentinel_router_ready") == 1
    assert reg.get_sample_value("sentinel_router_workers", {"state": "routable"}) == 0
    assert reg.get_sample_value("sentinel_router_workers", {"state": "breaker_open"}) == 2
    assert reg.get_sample_value("sentinel_router_workers", {"state": "unhealthy"}) == 0
    assert reg.get_sample_value("sentinel_router_upstream_5xx_total", {"source": "gateway"}) == 71
    assert reg.get_sample_value("sentinel_router_upstream_5xx_total", {"source": "worker"}) == 47
    # Retries exhausted moved only in the outage's first seconds: an alert on it alone goes quiet.
    assert reg.get_sample_value("sentinel_router_retries_exhausted_total") == 9


def test_the_promtool_outage_case_is_built_from_the_capture() -> None:
    # deploy/alerts.test.yml's breaker-outage case at its last outage minute (25) holds the
    # values sentinel exports from the capture, so the alert test is the outage smg really reports.
    import yaml

    doc = yaml.safe_load(ALERT_TESTS.read_text())
    (case,) = [t for t in doc["tests"] if t["name"].startswith("router breaker outage")]
    reg = scrape(OUTAGE, OUTAGE_POOL)
    checked = 0
    for series in case["input_series"]:
        name, _, rest = series["series"].partition("{")
        labels = dict(kv.split("=") for kv in rest.rstrip("}").split(","))
        labels = {k: v.strip('"') for k, v in labels.items() if k not in ("job", "instance")}
        if not name.startswith("sentinel_router_") or name == "sentinel_router_workers_expected":
            continue
        at_outage = _expand(series["values"])[25]
        assert reg.get_sample_value(name, labels) == at_outage, (name, labels)
        checked += 1
    assert checked == 6
