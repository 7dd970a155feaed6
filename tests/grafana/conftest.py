"""Every metric name sentinel can expose, gathered from the real collectors with fakes behind them."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.config import load_settings

DCGM_SAMPLE = Path(__file__).resolve().parents[1] / "support" / "samples" / "dcgm-exporter-h200.txt"


def _names(text: str) -> set[str]:
    names = set()
    for family in text_string_to_metric_families(text):
        names.add(family.name)
        if family.type == "counter":
            # A counter with no samples yet (no XID so far) still has its _total series to come.
            names.add(family.name + "_total")
        for sample in family.samples:
            names.add(sample.name)
    return names


async def _gather() -> set[str]:
    from sglang_sentinel.collect import build_collector_set
    from sglang_sentinel.schedule.metrics import RequestTimings, RunFigures, ScheduleMetrics
    from sglang_sentinel.supervise import Supervisor, SupervisorCollector
    from sglang_sentinel_sim import serve

    async with serve(speed=100, enable_metrics=True) as sim:
        port = int(sim.base_url.rsplit(":", 1)[1])
        # Some SGLang series appear only once requests went through.
        async with httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client:
            body = {"input_ids": [1, 2, 3, 4], "sampling_params": {"max_new_tokens": 8}}
            await client.post("/generate", json=body)
            sglang_text = (await client.get("/metrics")).text
        settings = load_settings(
            None,
            environ={
                "SENTINEL_COLLECTORS__GPU__BACKEND": "fake",
                "SENTINEL_SERVER__PORT": str(port),
            },
        )
        collectors = build_collector_set(settings)
        supervisor = Supervisor(settings.server)
        # Series the supervisor has only once a server became ready.
        now = time.time()
        ready = dataclasses.replace(
            supervisor.snapshot(), start_duration=12.0, ready_timestamp=now, epoch=now
        )
        collectors.add("supervisor", SupervisorCollector(lambda: ready))
        metrics = ScheduleMetrics()
        metrics.declare_profiles(["reference"])
        metrics.set_figures("reference", RunFigures(1.0, 2.0, 3.0, 4.0, False, time.time()))
        metrics.observe("reference", [RequestTimings(0.1, 0.01, 1.0, [0.01])])
        metrics.set_capacity(1.0, 2.0, 3.0, time.time(), knee_tokens_per_joule=0.4, efficient_concurrency=8)
        metrics.energy_metered = True
        metrics.energy_alert_ratio.set(1.15)
        metrics.set_energy(
            "reference",
            {
                "joules": 9.0,
                "joules_per_output_token": 2.5,
                "output_tokens_per_joule": 0.4,
                "mean_power_watts": 700.0,
                "marginal_joules_per_output_token": 2.0,
                "baseline_power_watts": 80.0,
                "energy_cost_per_million_output_tokens": 0.2,
                "currency": "USD",
            },
        )
        metrics.energy_unavailable.labels("reference", "counter_reset").inc()
        for name in ("skipped", "shrunk", "aborts", "excluded"):
            getattr(metrics, name).labels("reference", "x").inc()
        metrics.coalesced.labels("load:reference", "running").inc()
        metrics.job_errors.labels("load:reference").inc()
        metrics.calibrations.labels("completed").inc()
        collectors.add("schedule", metrics)
        await collectors.start()
        try:
            registry: CollectorRegistry = collectors.registry()
            deadline = time.monotonic() + 20
            text = ""
            while time.monotonic() < deadline:
                text = (await asyncio.to_thread(generate_latest, registry)).decode()
                if "sentinel_gpu_temperature_celsius" in text and "sglang:num_running_reqs" in text:
                    break
                await asyncio.sleep(0.2)
        finally:
            await collectors.stop()
    return _names(text) | _names(sglang_text)


def _router_names() -> set[str]:
    """The router collector's series, read from the real smg 1.13.0 captures in tests/router/data
    (a router target is another configuration than the default one gathered above)."""
    from pathlib import Path

    from sglang_sentinel.collect.router import RouterCollector, _Config

    data = Path(__file__).parents[1] / "router" / "data"
    metrics = (data / "smg-1.13.0-metrics-faults.prom").read_text()
    workers = (data / "smg-1.13.0-workers.json").read_text()

    def handle(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/readiness":
            return httpx.Response(200, json={"status": "ready"})
        if request.url.path == "/workers":
            return httpx.Response(200, content=workers)
        if request.url.path == "/metrics":
            return httpx.Response(200, text=metrics)
        return httpx.Response(404)

    registry = CollectorRegistry()
    config = _Config(True, "http://router:30000", "http://router:29000/metrics", 3, 2.0)
    registry.register(RouterCollector(config, transport=httpx.MockTransport(handle)))
    return _names(generate_latest(registry).decode())


@pytest.fixture(scope="session")
def known_metrics() -> set[str]:
    # dcgm-exporter's series (the sentinel-dcgm dashboard), as a real dcgm-exporter writes them.
    dcgm = (
        Path(__file__).resolve().parents[1] / "support" / "samples" / "dcgm-exporter-h200.txt"
    ).read_text()
    # The router collector reads with asyncio.run of its own: outside _gather's loop.
    names = asyncio.run(_gather()) | _router_names() | _names(dcgm)
    assert "sentinel_gpu_temperature_celsius" in names, "fake GPU readings did not arrive"
    return names
