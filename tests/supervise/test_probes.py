"""Probes against httpx.MockTransport: canaries, garbage detector, stall detector, /health."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import httpx
import pytest

from sglang_sentinel.supervise.probes import (
    Progress,
    StallDetector,
    detect_garbage,
    probe_canary,
    probe_health,
    read_progress,
)
from sglang_sentinel.supervise.settings import CanaryCheckSettings

SETTINGS = CanaryCheckSettings()
ARITH, PRIME = SETTINGS.canaries


def client(handler: Callable[[httpx.Request], httpx.Response]) -> httpx.AsyncClient:
    return httpx.AsyncClient(transport=httpx.MockTransport(handler), base_url="http://sglang")


def chat_reply(content: str | None, finish: str = "stop", reasoning: str | None = None) -> httpx.Response:
    msg = {"role": "assistant", "content": content, "reasoning_content": reasoning, "tool_calls": None}
    return httpx.Response(200, json={"choices": [{"index": 0, "message": msg, "finish_reason": finish}]})


@pytest.mark.parametrize(
    ("text", "reason"),
    [
        ("2 + 2 = 4.", None),
        ("```python\ndef is_prime(n):\n    return n > 1\n```", None),
        ("", "garbage_empty"),
        ("   \n", "garbage_empty"),
        ("!!!!!!!!!!!!!!!!!!!!!!!!", "garbage_repeated"),
        (" NaN NaN NaN NaN NaN NaN NaN NaN NaN NaN", "garbage_repeated"),  # the sim's style=nan
        ("\ufffd" * 20, "garbage_nonprintable"),  # the sim's style=random
        ("4\x00\x01\x02\x03", "garbage_nonprintable"),
        ("the the the the the the the the the the", "garbage_repeated"),
        ("4", None),  # short answers are fine
        ("Four.", None),
    ],
)
def test_garbage_detector(text: str, reason: str | None) -> None:
    assert detect_garbage(text, max_nonprintable_ratio=0.1, max_repeats=8) == reason


async def test_canary_sends_a_temperature_zero_chat_without_thinking() -> None:
    seen: list[dict[str, Any]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        seen.append(json.loads(request.content))
        assert request.url.path == "/v1/chat/completions"
        return chat_reply("2 + 2 = 4.")

    async with client(handler) as c:
        r = await probe_canary(c, ARITH, SETTINGS)
    assert r.ok
    assert r.probe == "canary_arithmetic"
    assert r.reason == "ok"
    body = seen[0]
    assert body["temperature"] == 0
    assert body["chat_template_kwargs"] == {"enable_thinking": False}
    assert body["messages"][0]["content"].startswith("What is 2+2?")


@pytest.mark.parametrize(
    ("response", "reason"),
    [
        (chat_reply("2 + 2 = 5."), "wrong_answer"),
        (chat_reply("!!!!!!!!!!!!!!!!"), "garbage_repeated"),
        (chat_reply(None), "garbage_empty"),
        (chat_reply("4", finish="abort"), "abort"),
        (httpx.Response(503, json={"error": "x"}), "http_503"),
        (httpx.Response(200, text="not json"), "bad_reply"),
        (httpx.Response(200, json={"choices": []}), "bad_reply"),
        (httpx.Response(200, json={"choices": [{"message": {"content": 4}}]}), "bad_reply"),
    ],
)
async def test_canary_failures(response: httpx.Response, reason: str) -> None:
    async with client(lambda _: response) as c:
        r = await probe_canary(c, ARITH, SETTINGS)
    assert not r.ok
    assert r.reason == reason


async def test_canary_uses_reasoning_when_content_is_null() -> None:
    async with client(lambda _: chat_reply(None, reasoning="so 2+2 is 4")) as c:
        assert (await probe_canary(c, ARITH, SETTINGS)).ok


async def test_canary_on_native_generate() -> None:
    settings = CanaryCheckSettings(api="generate")

    def handler(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        assert request.url.path == "/generate"
        assert body["sampling_params"]["temperature"] == 0
        return httpx.Response(
            200, json={"text": "def is_prime(n):", "meta_info": {"finish_reason": {"type": "length"}}}
        )

    async with client(handler) as c:
        assert (await probe_canary(c, PRIME, settings)).ok

    def aborted(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            200, json={"text": "", "meta_info": {"finish_reason": {"type": "abort", "message": "x"}}}
        )

    async with client(aborted) as c:
        assert (await probe_canary(c, PRIME, settings)).reason == "abort"


async def test_canary_connection_errors() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    def slow(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("slow", request=request)

    async with client(refuse) as c:
        assert (await probe_canary(c, ARITH, SETTINGS)).reason == "refused"
    async with client(slow) as c:
        assert (await probe_canary(c, ARITH, SETTINGS)).reason == "timeout"


async def test_health_probe_statuses() -> None:
    async with client(lambda _: httpx.Response(200)) as c:
        r = await probe_health(c, "/health", "health", 1.0)
        assert r.ok
        assert r.status_code == 200
    async with client(lambda _: httpx.Response(503)) as c:
        r = await probe_health(c, "/health", "health", 1.0)
        assert not r.ok
        assert r.reason == "http_503"
        assert r.status_code == 503


METRICS = """# HELP sglang:realtime_tokens_total Tokens processed.
# TYPE sglang:realtime_tokens_total counter
sglang:realtime_tokens_total{mode="decode",tp_rank="0"} 1200.0
sglang:realtime_tokens_total{mode="decode",tp_rank="1"} 1200.0
sglang:realtime_tokens_total{mode="prefill_compute",tp_rank="0"} 9000.0
# TYPE sglang:num_running_reqs gauge
sglang:num_running_reqs{tp_rank="0"} 0.0
"""


async def test_read_progress_prefers_live_running_count() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=METRICS)
        return httpx.Response(200, json={"aggregate": {"total_running_reqs": 5}})

    async with client(handler) as c:
        p = await read_progress(c, 1.0)
    # Two TP ranks of one replica count the same tokens (--enable-metrics-for-all-schedulers).
    assert p == Progress(decode_tokens=1200.0, running=5.0, running_source="loads_aggregate")

    def old_server(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=METRICS)
        return httpx.Response(404)

    async with client(old_server) as c:
        p = await read_progress(c, 1.0)
    assert (p.running, p.running_source) == (0.0, "metrics_gauge")


async def test_read_progress_sums_0_5_23_loads_without_aggregate() -> None:
    """0.5.23's /v1/loads has per-DP-rank entries and no aggregate (entrypoints/v1_loads.py)."""
    loads = {"version": "0.5.23", "loads": [
        {"dp_rank": 0, "num_running_reqs": 3, "num_waiting_reqs": 1, "token_usage": 0.2},
        {"dp_rank": 1, "num_running_reqs": 4, "num_waiting_reqs": 0, "token_usage": 0.4},
    ]}  # fmt: skip

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=METRICS)
        return httpx.Response(200, json=loads)

    async with client(handler) as c:
        p = await read_progress(c, 1.0)
    assert (p.running, p.running_source) == (7.0, "loads_ranks")
    d = StallDetector(stall_after=60)
    assert "loads_ranks" in d.observe(p, now=0).detail


async def test_read_progress_counts_priority_gauges_once() -> None:
    """--enable-priority-scheduling: total under priority="" plus one series per priority."""
    metrics = METRICS.replace(
        'sglang:num_running_reqs{tp_rank="0"} 0.0',
        'sglang:num_running_reqs{priority="",tp_rank="0"} 6.0\n'
        'sglang:num_running_reqs{priority="0",tp_rank="0"} 4.0\n'
        'sglang:num_running_reqs{priority="1",tp_rank="0"} 2.0',
    )

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path == "/metrics":
            return httpx.Response(200, text=metrics)
        return httpx.Response(404)

    async with client(handler) as c:
        p = await read_progress(c, 1.0)
    assert (p.running, p.running_source) == (6.0, "metrics_gauge")


def test_stall_detector() -> None:
    d = StallDetector(stall_after=60)
    assert d.observe(Progress(100, 3), now=0).ok
    assert d.observe(Progress(100, 3), now=59).ok
    r = d.observe(Progress(100, 3), now=61)
    assert not r.ok
    assert r.reason == "stalled"
    assert "3 running" in r.detail
    assert d.observe(Progress(101, 3), now=62).ok  # moved again
    # Idle is not a stall however long it lasts.
    assert d.observe(Progress(101, 0), now=500).ok
    assert d.observe(Progress(101, 2), now=501).ok
    assert not d.observe(Progress(101, 2), now=562).ok
    unsupported = d.observe(Progress(None, 2), now=600)
    assert unsupported.reason == "unsupported"
    assert not unsupported.conclusive
