"""The streamed responses on the wire: one chunked-encoding frame per SSE event (the simulator's
fast path writes the frames itself, sglang_sentinel_sim/sse.py), HTTP/1.0 clients without chunking,
and template-built deltas byte-identical to the ones built from the whole object."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sglang_sentinel_sim import SimServer
from support.sim_sse import dechunk, raw_post

pytestmark = pytest.mark.asyncio


async def _raw(sim: SimServer, path: str, body: dict[str, Any], version: str = "1.1") -> bytes:
    return await raw_post(sim.port, path, body, version=version, read_s=30)


_BODIES: dict[str, dict[str, Any]] = {
    "/generate": {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 12, "ignore_eos": True}},
    "/v1/completions": {"model": 'm "q" é', "prompt": "hi", "max_tokens": 12, "ignore_eos": True},
    "/v1/chat/completions": {
        "model": 'm "q" é',
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 12,
        "ignore_eos": True,
        "chat_template_kwargs": {"enable_thinking": False},
    },
}


@pytest.mark.parametrize("path", list(_BODIES))
async def test_every_chunk_is_one_event_and_the_text_adds_up(sim: SimServer, path: str) -> None:
    reply = await _raw(sim, path, {**_BODIES[path], "stream": True})
    head, _, body = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding: chunked" in head.lower()
    chunks = dechunk(body)
    assert chunks[-1] == b""
    events = chunks[:-1]
    for ev in events:
        assert ev.startswith(b"data: ")
        assert ev.endswith(b"\n\n")
        assert ev.count(b"\n\n") == 1  # one event per frame
    assert events[-1] == b"data: [DONE]\n\n"
    objs = [json.loads(ev[6:]) for ev in events[:-1]]
    if path == "/generate":
        text = objs[-1]["text"]
    elif path == "/v1/completions":
        text = "".join(o["choices"][0]["text"] for o in objs if o["choices"])
        assert {o["model"] for o in objs} == {'m "q" é'}
    else:
        text = "".join(o["choices"][0]["delta"]["content"] or "" for o in objs if o["choices"])
        assert {o["model"] for o in objs} == {'m "q" é'}
    plain = json.loads((await _raw(sim, path, _BODIES[path])).partition(b"\r\n\r\n")[2])
    if path == "/generate":
        assert text == plain["text"]
    elif path == "/v1/completions":
        assert text == plain["choices"][0]["text"]
    else:
        assert text == plain["choices"][0]["message"]["content"]


async def test_an_http10_client_gets_the_events_without_chunking(sim: SimServer) -> None:
    reply = await _raw(sim, "/v1/completions", {**_BODIES["/v1/completions"], "stream": True}, "1.0")
    head, _, body = reply.partition(b"\r\n\r\n")
    assert b"200" in head.split(b"\r\n")[0]
    assert b"chunked" not in head.lower()
    events = body.split(b"\n\n")
    assert events[-1] == b""
    assert events[-2] == b"data: [DONE]"
    assert all(e.startswith(b"data: ") for e in events[:-1])
    # How many tokens share an event depends on how far the simulator runs behind its schedule (a
    # busy box coalesces, at most 8 decode steps per yield), so the events are checked by what
    # they carry: the whole text, the finish reason on the last, and more than one event for 12
    # tokens.
    objs = [json.loads(e[6:]) for e in events[:-2]]
    assert len(objs) >= 2, events
    assert objs[-1]["choices"][0]["finish_reason"] == "length"
    plain = json.loads(
        (await _raw(sim, "/v1/completions", _BODIES["/v1/completions"])).partition(b"\r\n\r\n")[2]
    )
    assert "".join(o["choices"][0]["text"] for o in objs if o["choices"]) == plain["choices"][0]["text"]


async def test_templated_deltas_equal_the_object_built_ones(sim: SimServer) -> None:
    # continuous_usage_stats sends a usage object in every delta (its counts filled into a usage
    # template). Apart from the usage key, its events must be byte for byte the plain ones.
    # How many tokens share a frame depends on how far the simulator runs behind its schedule (a
    # busy box coalesces), so the two streams are compared per frame shape and by their text,
    # never frame for frame.
    path = "/v1/completions"
    base = {**_BODIES[path], "stream": True}
    fast = dechunk((await _raw(sim, path, base)).partition(b"\r\n\r\n")[2])
    slow = dechunk(
        (await _raw(sim, path, {**base, "stream_options": {"continuous_usage_stats": True}})).partition(
            b"\r\n\r\n"
        )[2]
    )
    for stream in (fast, slow):
        assert stream[-2:] == [b"data: [DONE]\n\n", b""]
        assert all(ev.startswith(b"data: {") and ev.endswith(b"\n\n") for ev in stream[:-2])

    def text(stream: list[bytes]) -> str:
        return "".join(json.loads(ev[6:])["choices"][0]["text"] for ev in stream[:-2])

    def shape(ev: bytes) -> bytes:
        """The event with what may differ between the two streams blanked: id, time, the text
        (its grouping into frames) and the usage object."""
        obj = json.loads(ev[6:])
        obj.pop("id")
        obj.pop("created")
        obj["choices"][0]["text"] = ""
        obj["usage"] = None
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()

    plain = json.loads((await _raw(sim, path, _BODIES[path])).partition(b"\r\n\r\n")[2])
    assert text(fast) == text(slow) == plain["choices"][0]["text"]
    # Every delta before the last is templated, the last one is built from the object: all the
    # templated ones share one shape, the same in both streams, and so does the last. (There are
    # templated ones: the engine coalesces at most 8 decode steps per yield, 12 tokens are sent.)
    assert len(fast) > 3, fast
    assert len(slow) > 3, slow
    assert {shape(e) for e in fast[:-3]} == {shape(e) for e in slow[:-3]}
    assert len({shape(e) for e in fast[:-3] + slow[:-3]}) == 1
    assert shape(fast[-3]) == shape(slow[-3])
    # The templated deltas against the object-built last one: only the finish reason differs.
    last = json.loads(fast[-3][6:])
    assert last["choices"][0]["finish_reason"] == "length"
    last["choices"][0]["finish_reason"] = None
    last["choices"][0]["matched_stop"] = None
    last.pop("id")
    last.pop("created")
    last["choices"][0]["text"] = ""
    assert shape(fast[0]) == json.dumps(last, separators=(",", ":"), ensure_ascii=False).encode()
    # And the templated ones are the compact, non-ASCII-preserving JSON of SGLang's chunks, the
    # usage objects with the counts of the tokens sent so far.
    for ev in fast[:-2] + slow[:-2]:
        obj = json.loads(ev[6:])
        assert ev[6:-2] == json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    usages = [json.loads(ev[6:])["usage"] for ev in slow[:-2]]
    counts = [u["completion_tokens"] for u in usages]
    assert counts == sorted(set(counts))  # rising (a busy box may merge tokens into one event)
    assert counts[0] >= 1
    assert counts[-1] == 12
    assert all(u["total_tokens"] == u["prompt_tokens"] + u["completion_tokens"] for u in usages)
    assert all(json.loads(ev[6:])["usage"] is None for ev in fast[:-2])
