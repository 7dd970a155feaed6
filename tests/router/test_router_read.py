"""Reading SGLang's router (smg): /workers, breakers, /v1/models, against replies captured from smg 1.13.0."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from sglang_sentinel.collect.router import RouterCollector, _Config, router_families
from sglang_sentinel.router import RouterReadError, RouterSnapshot, WorkerView, read_router, resolve_model
from sglang_sentinel.supervise.settings import ServerSettings

DATA = Path(__file__).with_name("data")
WORKERS = json.loads((DATA / "smg-1.13.0-workers.json").read_text())
METRICS = (DATA / "smg-1.13.0-metrics-excerpt.prom").read_text()
MODELS = json.loads((DATA / "smg-1.13.0-v1-models.json").read_text())
URLS = sorted(w["url"] for w in WORKERS["workers"])


def router(
    *, ready: int = 200, workers: Any = WORKERS, metrics: str | int = METRICS, models: Any = MODELS
) -> Callable[[httpx.Request], httpx.Response]:
    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/readiness":
            return httpx.Response(ready, json={"status": "ready" if ready == 200 else "not_ready"})
        if path == "/workers":
            return httpx.Response(200, content=workers if isinstance(workers, bytes) else json.dumps(workers))
        if path == "/v1/models":
            return httpx.Response(200, json=models)
        if path == "/metrics" and request.url.port == 29000:
            return httpx.Response(metrics) if isinstance(metrics, int) else httpx.Response(200, text=metrics)
        return httpx.Response(404)

    return handle


def client(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://router:30000")


def value(families: list[Any], name: str, **labels: str) -> float | None:
    reg = CollectorRegistry()

    class _C:
        def collect(self) -> list[Any]:
            return families

    reg.register(_C())
    return reg.get_sample_value(name, labels)


async def test_a_healthy_pool_with_closed_breakers_is_all_routable() -> None:
    async with client(router()) as c:
        snap = await read_router(c, timeout_s=2, metrics_url="http://router:29000/metrics")
    assert snap.ready
    assert snap.breakers_read
    assert sorted(w.url for w in snap.workers) == URLS
    assert all(w.breaker == "closed" and w.routable for w in snap.workers)
    assert snap.counts() == {"routable": 3, "breaker_open": 0, "unhealthy": 0}


async def test_an_open_breaker_on_a_healthy_worker_makes_it_unroutable() -> None:
    # After a restart, sglang-router 0.3.2 kept a worker that looked healthy unroutable for 30 s.
    metrics = METRICS.replace(
        f'smg_worker_cb_state{{worker="{URLS[0]}"}} 0', f'smg_worker_cb_state{{worker="{URLS[0]}"}} 1'
    )
    assert metrics != METRICS
    async with client(router(metrics=metrics)) as c:
        snap = await read_router(c, timeout_s=2, metrics_url="http://router:29000/metrics")
    families = router_families(snap, expected_workers=4)
    assert value(families, "sentinel_router_worker_healthy", worker=URLS[0]) == 1
    assert value(families, "sentinel_router_worker_routable", worker=URLS[0]) == 0
    assert value(families, "sentinel_router_worker_breaker_open", worker=URLS[0]) == 1
    assert value(families, "sentinel_router_worker_routable", worker=URLS[1]) == 1
    assert value(families, "sentinel_router_workers", state="breaker_open") == 1
    assert value(families, "sentinel_router_workers", state="routable") == 2
    assert value(families, "sentinel_router_workers_expected") == 4


async def test_an_unhealthy_worker_and_a_router_that_is_not_ready() -> None:
    workers = json.loads(json.dumps(WORKERS))
    workers["workers"][0]["is_healthy"] = False
    workers["workers"][0]["status"] = "failed"
    async with client(router(ready=503, workers=workers)) as c:
        snap = await read_router(c, timeout_s=2)
    families = router_families(snap)
    assert not snap.ready
    assert not snap.breakers_read
    assert value(families, "sentinel_router_ready") == 0
    assert value(families, "sentinel_router_worker_routable", worker=workers["workers"][0]["url"]) == 0
    assert value(families, "sentinel_router_workers", state="unhealthy") == 1
    # Breakers not read: no breaker series at all rather than a guessed 0.
    assert value(families, "sentinel_router_worker_breaker_open", worker=URLS[0]) is None
    assert value(families, "sentinel_router_workers_expected") is None


async def test_an_unreadable_metrics_port_leaves_breakers_unknown_not_the_pool() -> None:
    async with client(router(metrics=500)) as c:
        snap = await read_router(c, timeout_s=2, metrics_url="http://router:29000/metrics")
    assert not snap.breakers_read
    assert all(w.breaker is None and w.routable for w in snap.workers)


@pytest.mark.parametrize(
    ("workers", "needle"),
    [
        (b"not json", "bad_reply"),
        ([], "'workers' list"),
        ({"workers": [1]}, "workers[0] is not an object"),
        ({"workers": [{"url": "http://a", "is_healthy": "yes"}]}, "workers[0].is_healthy"),
        ({"workers": [{"is_healthy": True}]}, "workers[0].url"),
    ],
)
async def test_a_malformed_workers_reply_is_a_bad_reply_naming_the_field(workers: Any, needle: str) -> None:
    async with client(router(workers=workers)) as c:
        with pytest.raises(RouterReadError) as info:
            await read_router(c, timeout_s=2)
    assert info.value.reason == "bad_reply"
    assert needle in str(info.value)


async def test_the_served_model_comes_from_v1_models() -> None:
    async with client(router()) as c:
        assert await resolve_model(c, 2) == "glm-5"
    async with client(router(models={"object": "list", "data": []})) as c:
        with pytest.raises(RouterReadError, match="bad_reply"):
            await resolve_model(c, 2)


def test_the_collector_reads_the_router_at_scrape_time_and_only_in_router_mode() -> None:
    cfg = _Config(True, "http://router:30000", "http://router:29000/metrics", 3, 2.0)
    reg = CollectorRegistry()
    reg.register(RouterCollector(cfg, transport=httpx.MockTransport(router())))
    assert reg.get_sample_value("sentinel_router_workers", {"state": "routable"}) == 3
    off = RouterCollector(_Config(False, "http://router:30000", None, 0, 2.0))
    assert list(off.collect()) == []


def test_a_router_is_only_watched_never_launched() -> None:
    with pytest.raises(ValueError, match='kind = "router" needs mode = "external"'):
        ServerSettings(kind="router")
    assert ServerSettings(kind="router", mode="external").router.expected_workers == 0


def test_half_open_is_not_routable() -> None:
    snap = RouterSnapshot(True, (WorkerView("http://a", True, "ready", "half_open"),), True, 0.0)
    assert snap.counts()["breaker_open"] == 1
    assert not snap.routable("http://a")


def test_a_router_target_turns_the_router_collector_on_unless_the_list_is_explicit() -> None:
    from sglang_sentinel.config import load_settings

    router = {"SENTINEL_SERVER__MODE": "external", "SENTINEL_SERVER__KIND": "router"}
    assert "router" not in load_settings(None, {}).collectors.enabled
    assert load_settings(None, router).collectors.enabled[-1] == "router"
    explicit = {**router, "SENTINEL_COLLECTORS__ENABLED": '["sglang"]'}
    assert load_settings(None, explicit).collectors.enabled == ("sglang",)
