"""End to end on loopback: the simulator's /metrics and log lines through collectors and exporter."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.collect import CollectorSet, SGLangLogCollector, SGLangMetricsCollector

pytestmark = pytest.mark.slow


async def test_sim_metrics_and_logs_through_the_exporter(
    sim_factory: Callable[..., Any], exporter_factory: Any
) -> None:
    sim = sim_factory("--enable-metrics", "--decode-log-interval", "5", "--speed", "100")
    async with httpx.AsyncClient(timeout=30) as client:
        body = {"text": "hello " * 20, "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}}
        replies = await asyncio.gather(
            *(client.post(sim.base_url + "/generate", json=body) for _ in range(8))
        )
    assert all(r.status_code == 200 for r in replies)

    sglang = SGLangMetricsCollector(sim.base_url + "/metrics", timeout=2.0)
    log = SGLangLogCollector()
    for line in sim.stderr_text().splitlines():
        log.feed(line)
    collectors = CollectorSet([("sglang", sglang), ("sglang_log", log)])
    exporter = await exporter_factory(collectors)
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(exporter.url + "/metrics")).text
    families = {f.name: f for f in text_string_to_metric_families(text)}
    assert 'sentinel_collector_success{collector="sglang"} 1.0' in text
    assert "sglang:num_running_reqs" in families
    generated = families["sglang:generation_tokens"].samples
    assert sum(s.value for s in generated if s.name.endswith("_total")) >= 8 * 64
    assert families["sentinel_sglang_log_batch_lines"].samples  # the sim printed batch lines
    decode = [s for s in families["sentinel_sglang_log_batch_lines"].samples if s.labels["kind"] == "decode"]
    assert decode
    assert decode[0].value > 0
    assert sum(s.value for s in families["sentinel_sglang_log_lines_unparsed"].samples) == 0

    sim.kill()  # the server dies: its series go, nothing stale stays
    async with httpx.AsyncClient(timeout=10) as client:
        text = (await client.get(exporter.url + "/metrics")).text
    assert 'sentinel_collector_success{collector="sglang"} 0.0' in text
    assert "sglang:num_running_reqs" not in text
    assert 'sentinel_sglang_metrics_fetch_failures_total{reason="connect"} 1.0' in text
