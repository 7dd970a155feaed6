"""The streams' push path (sglang_sentinel_sim/push.py) writes the very bytes the handler's own loop writes.

Every route and format runs the same scripted request twice on one simulator: once with the
engine pushing the steady state's events from its decode step, once with every event written by
the handler's task (``engine.push_events = False``, the path before the push existed). The
decoded chunked frames must be equal one for one, apart from what differs between two requests
by design (the request id, the ``created`` second, the final chunk's timings), and the push path
must really have been taken.
"""

from __future__ import annotations

import asyncio
import json
import re
import time
from collections.abc import AsyncIterator
from typing import Any

import pytest

from sglang_sentinel_sim import SimServer, serve
from sglang_sentinel_sim.faults import parse_fault_spec
from support.sim_sse import dechunk, raw_post
from support.waits import until

pytestmark = pytest.mark.asyncio

_CHAT = "/v1/chat/completions"
_COMP = "/v1/completions"
_GEN = "/generate"
_USAGE = {"stream_options": {"include_usage": True, "continuous_usage_stats": True}}
_NO_THINK = {"chat_template_kwargs": {"enable_thinking": False}}

# (path, body): every stream format, its usage variants, stop strings, echo, stream_interval.
SCENARIOS: list[tuple[str, dict[str, Any]]] = [
    (_GEN, {"input_ids": [5, 6, 7], "sampling_params": {"max_new_tokens": 24, "ignore_eos": True}}),
    (_GEN, {"text": "What is 2+2?", "sampling_params": {"max_new_tokens": 400}}),  # EOS
    (_GEN, {"text": "Tell me a story", "sampling_params": {"max_new_tokens": 60, "stop": ["the"]}}),
    (
        _GEN,
        {"text": "x", "sampling_params": {"max_new_tokens": 24, "ignore_eos": True, "stream_interval": 3}},
    ),
    (_COMP, {"model": 'm "q" é', "prompt": "hi", "max_tokens": 24, "ignore_eos": True}),
    (_COMP, {"model": "m", "prompt": "hi", "max_tokens": 24, "ignore_eos": True, **_USAGE}),
    (_COMP, {"model": "m", "prompt": "hi", "max_tokens": 24, "echo": True, "stop": [" the"]}),
    (
        _COMP,
        {
            "model": "m",
            "prompt": "What is 2+2?",
            "max_tokens": 400,
            "stream_options": {"include_usage": True},
        },
    ),
    (
        _CHAT,
        {"model": 'm "q" é', "messages": [{"role": "user", "content": "hi"}], "max_tokens": 24, **_NO_THINK},
    ),
    (_CHAT, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 120}),  # thinking
    (
        _CHAT,
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 120,
            "separate_reasoning": False,
        },
    ),
    (_CHAT, {"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 90, **_USAGE}),
    (
        _CHAT,
        {
            "model": "m",
            "messages": [{"role": "user", "content": "hi"}],
            "max_tokens": 24,
            "stop": ["the"],
            **_NO_THINK,
        },
    ),
]

_VOLATILE = [
    (re.compile(rb'"id":"[^"]*"'), b'"id":"RID"'),
    (re.compile(rb'"created":\d+'), b'"created":0'),
    (re.compile(rb'"(\w+_ts|e2e_latency|inference_time|queue_time|decode_throughput)":[-\d.e]+'), rb'"\1":0'),
]


async def raw_stream(port: int, path: str, body: dict[str, Any]) -> bytes:
    """One streamed request on a fresh HTTP/1.1 connection: the whole reply, headers included."""
    return await raw_post(port, path, {**body, "stream": True}, read_s=60)


def events(reply: bytes) -> list[bytes]:
    """The chunked body's frames (decoded strictly), with the per-request values normalised."""
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding: chunked" in head.lower()
    out: list[bytes] = []
    for frame in dechunk(body)[:-1]:  # (the last, empty chunk ends the body)
        for pattern, repl in _VOLATILE:
            frame = pattern.sub(repl, frame)
        out.append(frame)
    return out


@pytest.fixture
async def slow_sim() -> AsyncIterator[SimServer]:
    # Slow enough that the engine keeps its schedule on a busy box (it pushes only then).
    async with serve(speed=10, enable_metrics=True, enable_cache_report=True) as server:
        yield server


async def _all(sim: SimServer, scenarios: list[tuple[str, dict[str, Any]]]) -> list[list[bytes]]:
    replies = await asyncio.gather(*(raw_stream(sim.port, path, body) for path, body in scenarios))
    return [events(r) for r in replies]


async def _both_paths(
    sim: SimServer, scenarios: list[tuple[str, dict[str, Any]]]
) -> tuple[list[list[bytes]], list[list[bytes]]]:
    """Every scenario's frames on the handler's path and on the push path, all at once each time
    (one batch, so that the decode step pushes several streams' events).

    A process descheduled on a busy box merges tokens into one event in either run (the timing,
    not the format): a scenario whose two runs differ runs again, up to eight times; a difference
    in bytes repeats every time, and the caller's comparison then shows it."""
    engine = sim.engine
    todo = list(range(len(scenarios)))
    task_path: dict[int, list[bytes]] = {}
    pushed: dict[int, list[bytes]] = {}
    for _ in range(8):
        batch = [scenarios[i] for i in todo]
        engine.push_events = False
        before = engine.stats.pushed_events
        task_path.update(zip(todo, await _all(sim, batch), strict=True))
        assert engine.stats.pushed_events == before
        engine.push_events = True
        pushed.update(zip(todo, await _all(sim, batch), strict=True))
        assert engine.stats.pushed_events > before, "the push path was not taken"
        todo = [i for i in todo if pushed[i] != task_path[i]]
        if not todo:
            break
    return [task_path[i] for i in range(len(scenarios))], [pushed[i] for i in range(len(scenarios))]


async def test_pushed_events_are_the_handlers_bytes(slow_sim: SimServer) -> None:
    await _all(slow_sim, SCENARIOS)  # both runs below then hit the prefix cache alike
    task_path, pushed = await _both_paths(slow_sim, SCENARIOS)
    for i, (path, body) in enumerate(SCENARIOS):
        assert len(task_path[i]) >= 5, (path, body)
        assert pushed[i] == task_path[i], (path, body)


@pytest.mark.parametrize("spec", ["error_chunk:tokens=7", "malformed_sse:tokens=7", "garbage:style=bang"])
async def test_faults_mid_stream_are_the_handlers_bytes(slow_sim: SimServer, spec: str) -> None:
    # The pusher leaves the token a fault is planned at to the handler (error_chunk aborts there,
    # malformed_sse inserts its truncated event); garbage changes every piece's text.
    slow_sim.faults.arm(parse_fault_spec(spec), now=time.monotonic(), delay_s=0)
    scenarios = [s for s in SCENARIOS if s[1].get("max_new_tokens", s[1].get("max_tokens")) == 24]
    await _all(slow_sim, scenarios)
    task_path, pushed = await _both_paths(slow_sim, scenarios)
    assert pushed == task_path
    mark = {"error_chunk": b"illegal memory access", "malformed_sse": b"", "garbage": b"!"}[
        spec.split(":")[0]
    ]
    assert all(any(mark in ev for ev in evs) for evs in pushed)
    if spec.startswith("malformed_sse"):
        assert all(
            any(not ev.endswith(b"}\n\n") and ev != b"data: [DONE]\n\n" for ev in evs) for evs in pushed
        )


async def test_a_client_gone_mid_push_aborts_its_request(slow_sim: SimServer) -> None:
    # The pusher declines once the connection is closing; the handler's write then fails and the
    # request is aborted (its KV released), as on the handler's own path.
    engine = slow_sim.engine
    body = {"model": "m", "prompt": "hi", "max_tokens": 100000, "ignore_eos": True, "stream": True}
    data = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", slow_sim.port)
    writer.write(
        f"POST {_COMP} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(data)}\r\n\r\n".encode()
        + data
    )
    before = engine.stats.pushed_events
    while engine.stats.pushed_events < before + 5:
        await asyncio.wait_for(reader.read(65536), 30)
    writer.close()
    await until(lambda: not engine.busy, what="the request aborted")
    assert engine.kv_used == 0
    rec = slow_sim.truth.records()[-1]
    assert rec.status == "aborted"
