"""sentinel fleet's HTTP side in-process against a simulator: /probe from cache, /metrics, file_sd."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.fleet import FleetFile, FleetService
from sglang_sentinel_sim.testing import SimProcess
from support.waits import until


def values(text: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


async def test_probe_serves_each_targets_cached_round_and_metrics_the_fleets_health(
    sim_factory: Callable[..., SimProcess], tmp_path: Path
) -> None:
    sim = sim_factory()
    sd = tmp_path / "sd.json"
    sd.write_text(json.dumps([{"targets": [f"127.0.0.1:{sim.port}"], "labels": {"name": "from-sd"}}]))
    config = FleetFile.model_validate(
        {
            "fleet": {
                "interval": 1,
                "jitter": 0,
                "file_sd": str(sd),
                "file_sd_check_interval": 0.1,
                "canary": {"enabled": False},
                "targets": [{"name": "static", "url": sim.base_url}],
            },
            "exporter": {"port": 0},
        }
    )
    service = FleetService(config)
    await service.start()
    try:
        base = service.exporter.url
        async with httpx.AsyncClient(base_url=base, trust_env=False, timeout=10) as c:
            await until(lambda: {"static", "from-sd"} <= set(service.prober.results))
            for name in ("static", "from-sd"):
                got = values((await c.get("/probe", params={"target": name})).text)
                assert got[("sentinel_probe_success", frozenset({("probe", "readiness")}))] == 1
                assert got[("sentinel_fleet_round_timestamp_seconds", frozenset())] > 0
            # Unknown and hostile names: 404, never an echo of the whole input.
            for name in ("nope", "x" * 2000, "a\nb", ""):
                r = await c.get("/probe", params={"target": name})
                assert r.status_code == 404
                assert len(r.text) < 200
            # Over aiohttp's 8190-byte request line: refused by the server before any handler.
            assert (await c.get("/probe", params={"target": "x" * 10_000})).status_code == 400
            own = values((await c.get("/metrics")).text)
            assert own[("sentinel_fleet_targets", frozenset())] == 2
            assert own[("sentinel_fleet_file_sd_reloads_total", frozenset())] == 1

            # The file changes: the old name goes, the new one is probed; a bad edit is refused.
            sd.write_text(json.dumps([{"targets": [f"127.0.0.1:{sim.port}"], "labels": {"name": "renamed"}}]))
            await until(lambda: "renamed" in service.prober.results)
            assert (await c.get("/probe", params={"target": "from-sd"})).status_code == 404
            sd.write_text('[{"targets": ["a:1", "b:1"], "labels": {"name": "two"}}]')
            await until(lambda: service._sd_counts[1] == 1)
            assert set(service.prober.targets) == {"static", "renamed"}
            own = values((await c.get("/metrics")).text)
            assert own[("sentinel_fleet_file_sd_errors_total", frozenset())] == 1
    finally:
        await service.stop()


async def test_the_optional_slo_round_reports_the_latencies_of_a_small_load(
    sim_factory: Callable[..., SimProcess],
) -> None:
    sim = sim_factory()
    config = FleetFile.model_validate(
        {
            "fleet": {
                "interval": 1,
                "jitter": 0,
                "canary": {"enabled": False},
                "slo": {"enabled": True, "every_rounds": 100, "num_requests": 6, "output_len": 16},
                "targets": [{"name": "s", "url": sim.base_url}],
            },
            "exporter": {"port": 0},
        }
    )
    service = FleetService(config)
    await service.start()
    try:
        await until(
            lambda: (r := service.prober.results.get("s")) is not None and r.slo is not None, what="slo round"
        )
        async with httpx.AsyncClient(base_url=service.exporter.url, trust_env=False, timeout=10) as c:
            got = values((await c.get("/probe", params={"target": "s"})).text)
    finally:
        await service.stop()
    assert got[("sentinel_fleet_slo_requests", frozenset({("outcome", "completed")}))] == 6
    assert got[("sentinel_fleet_slo_requests", frozenset({("outcome", "failed")}))] == 0
    p50 = got[("sentinel_fleet_slo_ttft_seconds", frozenset({("quantile", "0.5")}))]
    p99 = got[("sentinel_fleet_slo_ttft_seconds", frozenset({("quantile", "0.99")}))]
    assert 0 < p50 <= p99
    assert got[("sentinel_fleet_slo_output_throughput_tokens_per_second", frozenset())] > 0
    # The simulator saw exactly those requests (every_rounds = 100: one SLO round in this test).
    summary = sim.control("/summary")
    assert summary["completed"] == 6
    assert summary["total_output_tokens"] == 6 * 16
