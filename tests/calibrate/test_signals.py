from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest

from sglang_sentinel.calibrate.signals import ServerSampler, parse_sample

# Real SGLang output (copies of the project's reference samples, kept in the repository).
SAMPLES = Path(__file__).resolve().parents[1] / "collect" / "samples"
REAL = SAMPLES / "sglang-metrics-docs-production-metrics.txt"

_L = 'engine_type="unified",model_name="glm-5",pp_rank="0",moe_ep_rank="0",tp_rank='
V059_TEMPLATE = """\
# HELP sglang:num_queue_reqs The number of requests in the waiting queue
# TYPE sglang:num_queue_reqs gauge
sglang:num_queue_reqs{{{L0}}} {q}
sglang:num_queue_reqs{{{L1}}} 99.0
# HELP sglang:num_running_reqs The number of running requests
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{{{L0}}} {r}
# HELP sglang:token_usage The token usage
# TYPE sglang:token_usage gauge
sglang:token_usage{{{L0}}} {u}
# HELP sglang:num_retracted_requests_total Retracted requests
# TYPE sglang:num_retracted_requests_total counter
sglang:num_retracted_requests_total{{{L0}}} {x}
"""
V059 = V059_TEMPLATE.replace("{L0}", _L + '"0"').replace("{L1}", _L + '"1"')


def test_parse_real_sglang_exposition() -> None:
    values = parse_sample(REAL.read_text())
    assert values == {
        "sglang:token_usage": 0.28,
        "sglang:num_running_reqs": 162.0,
        "sglang:num_queue_reqs": 2826.0,
    }


def test_parse_prefers_tp_rank_zero() -> None:
    values = parse_sample(V059.format(q=3, r=21, u=0.5, x=7))
    assert values["sglang:num_queue_reqs"] == 3.0
    assert values["sglang:num_retracted_requests_total"] == 7.0


def test_parse_rejects_garbage() -> None:
    with pytest.raises(ValueError, match="malformed"):
        parse_sample("sglang:num_queue_reqs{ 1 2 3\n")


async def test_sampler_summarises_a_step() -> None:
    seq = iter(
        [(0, 0, 0.0, 5)]  # baseline (counter only)
        + [(4, 21, 0.6, 5), (6, 21, 0.7, 6), (0, 20, 0.97, 8)]
        + [(0, 0, 0.1, 9)] * 50  # after the step (counter only) and any extra samples
    )

    calls = 0
    fourth = asyncio.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        if calls >= 4:
            fourth.set()
        q, r, u, x = next(seq)
        return httpx.Response(200, text=V059.format(q=q, r=r, u=u, x=x))

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        sampler = ServerSampler(client, "http://127.0.0.1:1/metrics", interval=0.005)
        async with sampler:
            await asyncio.wait_for(fourth.wait(), timeout=10)
        s = sampler.summary()
    assert s is not None
    # Three samples during the step (a fourth may slip in before the exit on a loaded machine).
    assert s.samples >= 3
    assert s.queue_nonzero_ratio == pytest.approx(2 / s.samples)
    assert s.queue_max == 6.0
    assert s.running_max == 21.0
    assert s.token_usage_max == 0.97
    assert s.retractions == 4.0  # 5 before the step, 9 after


async def test_sampler_without_metrics_endpoint() -> None:
    calls = 0

    def handler(request: httpx.Request) -> httpx.Response:
        nonlocal calls
        calls += 1
        return httpx.Response(404, text="Not Found")

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        sampler = ServerSampler(client, "http://127.0.0.1:1/metrics", interval=0.01)
        async with sampler:
            await asyncio.sleep(0.05)
    assert sampler.summary() is None
    assert sampler.disabled_reason is not None
    assert "--enable-metrics" in sampler.disabled_reason
    assert calls == 1  # stopped asking after the 404


async def test_sampler_counts_failures() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            raise httpx.ConnectError("refused")
        return httpx.Response(200)

    async with httpx.AsyncClient(transport=httpx.MockTransport(handler)) as client:
        sampler = ServerSampler(client, "http://127.0.0.1:1/metrics", interval=0.01)
        async with sampler:
            await asyncio.sleep(0.03)
    assert sampler.summary() is None
    assert sampler._samples.failures >= 2


def test_summary_judges_the_steady_window_only() -> None:
    sampler = ServerSampler(httpx.AsyncClient(), "http://127.0.0.1:1/metrics", interval=1.0)
    q, r = "sglang:num_queue_reqs", "sglang:num_running_reqs"
    # A closed loop of 16 against a 12-request cap: queued while the slots are full, drained after.
    sampler._samples.gauges = [
        (100.0, {q: 4.0, r: 12.0}),
        (101.0, {q: 3.0, r: 12.0}),
        (102.0, {q: 0.0, r: 9.0}),
        (103.0, {q: 0.0, r: 5.0}),
        (104.0, {q: 0.0, r: 1.0}),
    ]
    whole = sampler.summary()
    assert whole is not None
    assert whole.queue_nonzero_ratio == pytest.approx(0.4)
    steady = sampler.summary((99.5, 101.5))
    assert steady is not None
    assert steady.samples == 2
    assert steady.queue_nonzero_ratio == 1.0
    assert steady.running_max == 12.0
    # A window no sample falls in: everything is used rather than nothing.
    empty = sampler.summary((200.0, 201.0))
    assert empty is not None
    assert empty.samples == 5
