"""/metrics against SGLang's families (names, types, help, labels, buckets) and semantics.

The reference is generated from the wheels' source (0.5.9 and 0.5.23, each family marked with the
versions that have it): ``support.sglang_metricnames``, see ``tests/support/extract_sglang_metricnames.py``.
"""

from __future__ import annotations

import asyncio
import io
import re

import httpx
import pytest
from prometheus_client.exposition import generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from sglang_sentinel_sim import SimServer, serve
from sglang_sentinel_sim.metrics import E2E_BUCKETS, ITL_BUCKETS, TTFT_BUCKETS, SimMetrics
from support.sglang_metricnames import MetricFamily, by_name
from support.sim_sse import decode, sse


async def _scrape(client: httpx.AsyncClient) -> dict[str, list[Sample]]:
    r = await client.get("/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    out: dict[str, list[Sample]] = {}
    for fam in text_string_to_metric_families(r.text):
        out[fam.name] = list(fam.samples)
    return out


def _value(samples: list[Sample], name: str, **labels: str) -> float:
    hits = [
        s.value for s in samples if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert hits, f"no sample {name} {labels}"
    return sum(hits)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
async def test_families_match_sglang(version: str) -> None:
    async with (
        serve(speed=200, enable_metrics=True, sglang_version=version) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        await client.post(
            "/generate",
            json={
                "text": "hi",
                "sampling_params": {"max_new_tokens": 50, "ignore_eos": True},
                "stream": True,
            },
        )
        await client.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 5}})
        text = (await client.get("/metrics")).text
    assert "_created" not in text

    def ref_by_name(name: str) -> tuple[MetricFamily, ...]:
        return by_name(name, version)

    seen = 0
    for fam in text_string_to_metric_families(text):
        expected_name = fam.name + ("_total" if fam.type == "counter" else "")
        refs = ref_by_name(expected_name)
        assert refs, f"{expected_name} is not an SGLang {version} family"
        ref = refs[0]
        assert fam.type == ref.type, expected_name
        assert fam.documentation == ref.documentation, expected_name
        extra = {"le"} if fam.type == "histogram" else set()
        if ref.multiprocess_mode is None and ref.type == "gauge":
            extra.add("pid")  # multiprocess "all" mode adds it
        for s in fam.samples:
            assert set(s.labels) - extra == set(ref.labels), (expected_name, s.labels)
        if ref.buckets is not None and fam.type == "histogram":
            les = sorted({float(s.labels["le"]) for s in fam.samples if "le" in s.labels})
            assert les[:-1] == [float(b) for b in ref.buckets], expected_name
        seen += 1
    assert seen >= 40


async def test_counters_histograms_and_gauges(sim: SimServer, client: httpx.AsyncClient) -> None:
    m = await _scrape(client)
    # the warm-up request is counted, as on a fresh real server
    assert _value(m["sglang:num_requests"], "sglang:num_requests_total") == 1
    assert _value(m["sglang:generation_tokens"], "sglang:generation_tokens_total") == 8
    assert (await client.get("/health")).status_code == 200  # probes are not counted
    status, events = await sse(
        client,
        "/generate",
        {
            "input_ids": list(range(40)),
            "sampling_params": {"max_new_tokens": 90, "ignore_eos": True},
            "stream": True,
        },
    )
    assert status == 200
    # (chunks may coalesce at this speed; the counts below are per token either way)
    assert decode(events)[-1]["meta_info"]["completion_tokens"] == 90
    m = await _scrape(client)
    assert _value(m["sglang:num_requests"], "sglang:num_requests_total") == 2
    assert _value(m["sglang:generation_tokens"], "sglang:generation_tokens_total") == 98
    assert _value(m["sglang:prompt_tokens"], "sglang:prompt_tokens_total") == 47
    assert _value(m["sglang:time_to_first_token_seconds"], "sglang:time_to_first_token_seconds_count") == 2
    assert _value(m["sglang:e2e_request_latency_seconds"], "sglang:e2e_request_latency_seconds_count") == 2
    # ITL: one observation per token after the first, weighted (SGLang's trick); the non-stream
    # warm-up has a single output, hence only a TTFT
    assert _value(m["sglang:inter_token_latency_seconds"], "sglang:inter_token_latency_seconds_count") == 89
    assert _value(m["sglang:realtime_tokens"], "sglang:realtime_tokens_total", mode="decode") == (90 - 1) + (
        8 - 1
    )
    assert (
        _value(m["sglang:realtime_tokens"], "sglang:realtime_tokens_total", mode="prefill_compute") == 47 + 1
    )  # + the health probe's 1-token prompt: a real scheduler request
    passes = [s for s in m["sglang:cuda_graph_passes"] if s.name.endswith("_total")]
    assert {s.labels["tp_rank"] for s in passes} == {str(r) for r in range(8)}
    # --disable-cuda-graph deployment; 0.5.23 also counts prefill passes on the metrics rank
    # (metrics_reporter.py increment_prefill_cuda_graph_pass), decode ones on every rank.
    assert {s.labels["mode"] for s in passes} == {"decode_none", "prefill_none"}
    assert {s.labels["tp_rank"] for s in passes if s.labels["mode"] == "prefill_none"} == {"0"}
    queue = [s for s in m["sglang:queue_time_seconds"] if s.name.endswith("_count")]
    assert len(queue) == 8
    # scheduler gauges are snapshots from the last log event, not live values
    assert (
        _value(m["sglang:max_total_num_tokens"], "sglang:max_total_num_tokens")
        == sim.profile.max_total_num_tokens
    )
    assert _value(m["sglang:num_queue_reqs"], "sglang:num_queue_reqs") == 0
    assert isinstance(sim.log._err, io.StringIO)
    decode_lines = re.findall(r"Decode batch, #running-req: (\d+)", sim.log._err.getvalue())
    assert decode_lines
    assert _value(m["sglang:num_running_reqs"], "sglang:num_running_reqs") == int(decode_lines[-1])
    assert (
        _value(m["sglang:http_requests"], "sglang:http_requests_total", endpoint="/generate", method="POST")
        == 1
    )
    assert (
        _value(
            m["sglang:http_responses"], "sglang:http_responses_total", endpoint="/generate", status_code="200"
        )
        == 1
    )
    assert _value(m["sglang:http_requests_active"], "sglang:http_requests_active", endpoint="/generate") == 0


def test_bucket_constants_are_sglangs() -> None:
    assert by_name("sglang:time_to_first_token_seconds")[0].buckets == tuple(float(b) for b in TTFT_BUCKETS)
    assert by_name("sglang:e2e_request_latency_seconds")[0].buckets == tuple(float(b) for b in E2E_BUCKETS)
    assert by_name("sglang:inter_token_latency_seconds")[0].buckets == tuple(float(b) for b in ITL_BUCKETS)


async def test_metrics_off_and_disabled_fault() -> None:
    async with serve(speed=200) as sim, httpx.AsyncClient(base_url=sim.base_url) as c:
        r = await c.get("/metrics")
        assert r.status_code == 404
    async with (
        serve(speed=200, enable_metrics=True, faults=("metrics_disabled",)) as sim,
        httpx.AsyncClient(base_url=sim.base_url) as c,
    ):
        assert (await c.get("/metrics")).status_code == 404
        async with httpx.AsyncClient(base_url=sim.control_url) as ctl:
            assert (await ctl.delete("/faults/metrics_disabled")).status_code == 200
        assert (await c.get("/metrics")).status_code == 200


async def test_idle_refresh_zeroes_gen_throughput() -> None:
    # 30 idle server seconds at speed 3000 = 10 ms
    async with serve(speed=3000, enable_metrics=True) as sim, httpx.AsyncClient(base_url=sim.base_url) as c:
        await c.post(
            "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 100, "ignore_eos": True}}
        )
        await asyncio.sleep(0.1)
        m = await _scrape(c)
        assert _value(m["sglang:gen_throughput"], "sglang:gen_throughput") == 0
        assert _value(m["sglang:num_running_reqs"], "sglang:num_running_reqs") == 0


def _reference_render(m: SimMetrics) -> bytes:
    """What render() replaced: generate_latest, minus _created samples and empty families."""
    out: list[bytes] = []
    block: list[bytes] = []
    has_samples = False
    for line in generate_latest(m.registry).splitlines(keepends=True):
        if line.startswith(b"# HELP "):
            if has_samples:
                out.extend(block)
            block, has_samples = [line], False
        elif line.startswith(b"#"):
            block.append(line)
        elif b"_created{" not in line and b"_created " not in line:
            block.append(line)
            has_samples = True
    if has_samples:
        out.extend(block)
    return b"".join(out)


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
def test_render_is_byte_identical_to_generate_latest(version: str) -> None:
    m = SimMetrics(
        model_name="glm-5",
        tp_size=8,
        page_size=64,
        max_total_num_tokens=524288,
        version=version,
        priority_scheduling=True,
        constants={"max_total_num_tokens": 524288, "page_size": 64},
    )
    assert m.render() == _reference_render(m)
    for i in range(300):
        m.observe_queue_time(i / 37)
        m.observe_itl(i / 1000, 1 + i % 3)
    m.log_stats({"num_running_reqs": {"0": 2, "None": 1}})
    m.finished(prompt_tokens=10, completion_tokens=1234567, cached_tokens=3, e2e=1e9, retractions=1)
    m.finished(
        prompt_tokens=1, completion_tokens=3, cached_tokens=0, e2e=1, retractions=0, stream=True, decode_s=1
    )
    m.observe_ttft(0.5, True, priority=2)
    m.aborted()
    # label values that need escaping, added between two renders (the line cache must follow)
    first = m.render()
    m.http_requests.labels('/odd"path\\x\n', "GET").inc(2.5)
    m.http_responses.labels("/generate", "200", "POST").inc()
    assert m.render() == _reference_render(m) != first
