"""The ``router`` collector: the worker pool of SGLang's router (``[server] kind = "router"``).

Read at scrape time (``/readiness``, ``/workers``, and the breakers from the router's metrics
port when ``[server.router] metrics_url`` is set), exposed as sentinel's own series. The router's
``smg_*`` families are not re-exposed: Prometheus scrapes the router itself (deploy/fleet/).
Against a plain server (``kind = "server"``) the collector yields nothing.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from sglang_sentinel.collect.registry import CollectorInputs, register
from sglang_sentinel.collect.source import CollectionFailed
from sglang_sentinel.httpread import tls_context
from sglang_sentinel.router import RouterReadError, RouterSnapshot, read_router
from sglang_sentinel.router.counters import UPSTREAM_SOURCES, RouterCounters
from sglang_sentinel.router.workers import WORKER_STATES

__all__ = ["RouterCollector", "router_families"]


@dataclass(frozen=True, slots=True)
class _Config:
    enabled: bool
    base_url: str
    metrics_url: str | None
    expected_workers: int
    timeout: float


def router_families(snap: RouterSnapshot, expected_workers: int = 0) -> list[Metric]:
    """The sentinel_router_* families of one snapshot (also what ``sentinel fleet`` serves)."""
    ready = GaugeMetricFamily("sentinel_router_ready", "1 when the router's /readiness answers 200.")
    ready.add_metric([], 1.0 if snap.ready else 0.0)
    healthy = GaugeMetricFamily(
        "sentinel_router_worker_healthy",
        "1 when the router's /workers marks the worker healthy.",
        labels=["worker"],
    )
    routable = GaugeMetricFamily(
        "sentinel_router_worker_routable",
        "1 when the router would route to the worker: healthy and its circuit breaker closed.",
        labels=["worker"],
    )
    breaker = GaugeMetricFamily(
        "sentinel_router_worker_breaker_open",
        "1 when the worker's circuit breaker is open or half-open (from the router's metrics port).",
        labels=["worker"],
    )
    for w in snap.workers:
        healthy.add_metric([w.url], 1.0 if w.healthy else 0.0)
        routable.add_metric([w.url], 1.0 if w.routable else 0.0)
        if w.breaker is not None:
            breaker.add_metric([w.url], 0.0 if w.breaker == "closed" else 1.0)
    pool = GaugeMetricFamily(
        "sentinel_router_workers",
        "Workers in the router's pool by state: routable, breaker_open (healthy, breaker not closed),"
        " unhealthy.",
        labels=["state"],
    )
    counts = snap.counts()
    for state in WORKER_STATES:
        pool.add_metric([state], float(counts[state]))
    out: list[Metric] = [ready, healthy, routable, pool]
    if snap.breakers_read:
        out.append(breaker)
    if snap.counters is not None:
        out.extend(_counter_families(snap.counters, [w.url for w in snap.workers]))
    if expected_workers:
        expected = GaugeMetricFamily(
            "sentinel_router_workers_expected", "The pool size the configuration expects ([server.router])."
        )
        expected.add_metric([], float(expected_workers))
        out.append(expected)
    return out


# The router's own counts, exposed as the router reports them: a router restart resets them, which
# Prometheus reads as a counter reset (rate() and increase() handle it), as for the re-exposed
# sglang:* counters of a restarted server. Keeping a running offset here would need state across
# scrapes and would still be wrong whenever sentinel restarts too.
_RESET_NOTE = " The router's own count: a router restart shows as a counter reset."


def _counter_families(c: RouterCounters, workers: list[str]) -> list[Metric]:
    exhausted = CounterMetricFamily(
        "sentinel_router_retries_exhausted",
        "Requests the router gave up on after all its retries, router-wide: the sum of"
        " smg_worker_retries_exhausted_total over worker_type and endpoint (it has no worker label)."
        + _RESET_NOTE,
    )
    exhausted.add_metric([], c.retries_exhausted)
    upstream = CounterMetricFamily(
        "sentinel_router_upstream_5xx",
        "5xx answers to routed requests, router-wide: smg_router_upstream_responses_total with a 5xx"
        " status_code, summed; source=worker when a worker answered it (empty error_code), gateway when"
        " the router made it up (connection failed, no available workers)." + _RESET_NOTE,
        labels=["source"],
    )
    for source in UPSTREAM_SOURCES:
        upstream.add_metric([source], c.upstream_5xx.get(source, 0.0))
    failures = CounterMetricFamily(
        "sentinel_router_worker_breaker_failures",
        "Failures the router's circuit breaker counted for the worker (5xx answers, failed"
        ' connections): smg_worker_cb_outcomes_total{outcome="failure"}.' + _RESET_NOTE,
        labels=["worker"],
    )
    # Every worker of the pool at 0 from its first read; a URL only the counters name (left the
    # pool) is still reported while the router keeps it.
    for url in sorted(set(workers) | set(c.worker_failures)):
        failures.add_metric([url], c.worker_failures.get(url, 0.0))
    return [exhausted, upstream, failures]


class RouterCollector:
    def __init__(self, cfg: _Config, transport: httpx.AsyncBaseTransport | None = None) -> None:
        self._cfg = cfg
        self._transport = transport

    async def _read(self) -> RouterSnapshot:
        async with httpx.AsyncClient(
            base_url=self._cfg.base_url,
            transport=self._transport,
            trust_env=False,
            verify=tls_context(trust_env=False),
        ) as c:
            return await read_router(c, timeout_s=self._cfg.timeout, metrics_url=self._cfg.metrics_url)

    def collect(self) -> Iterator[Metric]:
        if not self._cfg.enabled:
            return
        try:
            # Scrape threads have no event loop; one short-lived loop per scrape is cheap next to
            # the reads themselves, and keeps one reader (sglang_sentinel.router) for daemon and fleet.
            snap = asyncio.run(self._read())
        except RouterReadError as exc:
            raise CollectionFailed(f"router: {exc}") from None
        yield from router_families(snap, self._cfg.expected_workers)


def _section(settings: CollectorInputs) -> _Config:
    server = settings.server
    kind = getattr(server, "kind", "server")
    router = getattr(server, "router", None)
    host = server.host if ":" not in server.host or server.host.startswith("[") else f"[{server.host}]"
    return _Config(
        enabled=kind == "router",
        base_url=f"http://{host}:{server.port}",
        metrics_url=(router.metrics_url or None) if router is not None else None,
        expected_workers=router.expected_workers if router is not None else 0,
        timeout=router.timeout_seconds if router is not None else 2.0,
    )


@register("router", section=_section)
def _factory(cfg: _Config) -> RouterCollector:
    return RouterCollector(cfg)
