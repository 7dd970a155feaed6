"""Every SGLang route of the simulator, its bodies and its SSE framing."""

from __future__ import annotations

import asyncio
import io
import itertools
import json
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from sglang_sentinel.sglang.logparse import DecodeBatch, parse_line
from sglang_sentinel_sim import SimServer, serve
from support.sim_sse import decode, sse
from support.waits import until

EOS = 154820


async def test_health_info_and_models(sim: SimServer, client: httpx.AsyncClient) -> None:
    health = await client.get("/health")
    assert health.status_code == 200
    assert health.headers["server"] == "uvicorn"
    assert (await client.get("/health_generate")).status_code == 200
    assert (await client.get("/ping")).status_code == 200
    for path in ("/model_info", "/get_model_info"):
        info = (await client.get(path)).json()
        assert info["architectures"] == ["GlmMoeDsaForCausalLM"]
        assert info["is_generation"] is True
        assert info["weight_version"] == "default"
    for path in ("/server_info", "/get_server_info"):
        si = (await client.get(path)).json()
        assert si["version"] == sim.version == "0.5.23"  # the default --sglang-version
        assert si["max_total_num_tokens"] == sim.profile.max_total_num_tokens
        assert si["internal_states"][0]["memory_usage"]["token_capacity"] == sim.profile.max_total_num_tokens
        assert si["tp_size"] == 8
        assert si["served_model_name"] == "glm-5"
    models = (await client.get("/v1/models")).json()
    assert models["object"] == "list"
    assert models["data"][0]["id"] == "glm-5"
    assert models["data"][0]["owned_by"] == "sglang"
    assert models["data"][0]["max_model_len"] == sim.profile.context_length
    assert (await client.get("/v1/models/glm-5")).json()["id"] == "glm-5"
    assert (await client.get("/v1/models/other")).status_code == 404
    loads = (await client.get("/v1/loads")).json()
    assert loads["loads"][0]["max_total_num_tokens"] == sim.profile.max_total_num_tokens
    assert (await client.get("/nope")).json() == {"detail": "Not Found"}
    assert (await client.get("/generate")).status_code == 405
    assert isinstance(sim.log._err, io.StringIO)
    log = sim.log._err.getvalue()
    assert "Endpoint '/get_model_info' is deprecated" in log


# 0.5.23 renames total_retractions and adds reasoning_tokens (tokenizer_manager.py _handle_batch_output).
_META_KEYS = {
    "0.5.9": ["id", "finish_reason", "prompt_tokens", "weight_version", "total_retractions",
              "completion_tokens", "cached_tokens", "cached_tokens_details", "e2e_latency"],
    "0.5.23": ["id", "finish_reason", "prompt_tokens", "weight_version", "num_retractions",
               "reasoning_tokens", "completion_tokens", "cached_tokens", "cached_tokens_details",
               "e2e_latency"],
}  # fmt: skip


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
async def test_generate_stream_format(version: str) -> None:
    # slow enough that every decode step gets its own chunk even on a loaded machine
    async with (
        serve(speed=10, startup_time=0, sglang_version=version) as sim,
        httpx.AsyncClient(base_url=sim.base_url) as client,
    ):
        status, events = await sse(
            client,
            "/generate",
            {
                "text": "What is 2+2?",
                "sampling_params": {"max_new_tokens": 64, "temperature": 0},
                "stream": True,
            },
        )
        assert status == 200
        chunks = decode(events)
        # compact JSON, no spaces after separators (orjson)
        assert ", " not in events[0].split('"text"')[0]
        texts = [c["text"] for c in chunks]
        for prev, cur in itertools.pairwise(texts):
            assert cur.startswith(prev), "text must be cumulative"
        counts = [c["meta_info"]["completion_tokens"] for c in chunks]
        assert counts == list(range(1, len(chunks) + 1))
        assert all(c["meta_info"]["finish_reason"] is None for c in chunks[:-1])
        last = chunks[-1]
        assert last["meta_info"]["finish_reason"] == {"type": "stop", "matched": EOS}
        assert last["text"] == "2 + 2 = 4."
        assert last["output_ids"][-1] == EOS
        assert len(last["output_ids"]) == last["meta_info"]["completion_tokens"] == 7
        assert last["meta_info"]["e2e_latency"] > 0
        assert "e2e_latency" not in chunks[0]["meta_info"]
        assert list(last["meta_info"]) == _META_KEYS[version]
        assert list(chunks[0]["meta_info"]) == list(last["meta_info"])[:-1]
        assert last["meta_info"]["prompt_tokens"] == 6


async def test_generate_non_stream_input_ids_batch_and_limits(client: httpx.AsyncClient) -> None:
    r = await client.post(
        "/generate",
        json={"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 20, "ignore_eos": True}},
    )
    body = r.json()
    assert body["meta_info"]["prompt_tokens"] == 3
    assert body["meta_info"]["completion_tokens"] == 20
    assert body["meta_info"]["finish_reason"] == {"type": "length", "length": 20}
    r = await client.post(
        "/generate",
        json={"text": ["a b", "c d e"], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}},
    )
    batch = r.json()
    assert isinstance(batch, list)
    assert [b["meta_info"]["prompt_tokens"] for b in batch] == [2, 3]
    r = await client.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 10**7}})
    assert r.status_code == 400
    assert "maximum context length" in r.json()["error"]["message"]
    r = await client.post("/generate", content=b"{not json")
    assert r.status_code == 400
    # min_new_tokens keeps going past EOS; stop strings end early and are trimmed
    r = await client.post(
        "/generate",
        json={"text": "What is 2+2?", "sampling_params": {"max_new_tokens": 40, "min_new_tokens": 30}},
    )
    assert r.json()["meta_info"]["completion_tokens"] == 30
    r = await client.post("/generate", json={"text": "What is 2+2?", "sampling_params": {"stop": "="}})
    body = r.json()
    assert body["text"] == "2 + 2 "
    assert body["meta_info"]["finish_reason"] == {"type": "stop", "matched": "="}


async def test_stream_interval() -> None:
    # slow enough that every step gets its own chunk even on a loaded machine
    async with serve(speed=5, startup_time=0) as sim, httpx.AsyncClient(base_url=sim.base_url) as client:
        _, events = await sse(
            client,
            "/generate",
            {
                "text": "hi",
                "sampling_params": {"max_new_tokens": 10, "ignore_eos": True, "stream_interval": 4},
                "stream": True,
            },
        )
    assert [c["meta_info"]["completion_tokens"] for c in decode(events)] == [1, 5, 9, 10]


async def test_chat_stream_with_thinking_and_usage(client: httpx.AsyncClient) -> None:
    status, events = await sse(
        client,
        "/v1/chat/completions",
        {
            "model": "whatever",
            "messages": [{"role": "user", "content": "What is 2+2?"}],
            "stream": True,
            "max_tokens": 200,
            "stream_options": {"include_usage": True},
        },
    )
    assert status == 200
    chunks = decode(events)
    first = chunks[0]
    assert first["object"] == "chat.completion.chunk"
    assert first["model"] == "whatever"
    assert first["id"].startswith("chatcmpl-")
    assert first["choices"][0]["delta"] == {
        "role": "assistant",
        "content": "",
        "reasoning_content": None,
        "tool_calls": None,
    }
    assert first["usage"] is None
    thinking = [c for c in chunks if c["choices"] and c["choices"][0]["delta"]["reasoning_content"]]
    answer = [c for c in chunks if c["choices"] and c["choices"][0]["delta"]["content"]]
    assert thinking
    assert answer
    assert all(c["choices"][0]["delta"]["content"] is None for c in thinking)
    assert chunks.index(thinking[-1]) < chunks.index(answer[0])
    assert "".join(c["choices"][0]["delta"]["content"] for c in answer) == "2 + 2 = 4."
    closing = chunks[-2]
    assert closing["choices"][0]["finish_reason"] == "stop"
    assert closing["choices"][0]["matched_stop"] == EOS
    assert closing["choices"][0]["delta"] == {
        "role": None,
        "content": None,
        "reasoning_content": None,
        "tool_calls": None,
    }
    usage = chunks[-1]
    assert usage["choices"] == []
    assert usage["usage"]["completion_tokens"] > len(answer)
    assert (
        usage["usage"]["total_tokens"]
        == usage["usage"]["prompt_tokens"] + usage["usage"]["completion_tokens"]
    )
    assert usage["usage"]["prompt_tokens"] == 3 + 1 + 6


async def test_chat_thinking_off_and_non_stream(client: httpx.AsyncClient) -> None:
    body = {
        "messages": [{"role": "user", "content": "write an is_prime function in Python"}],
        "chat_template_kwargs": {"enable_thinking": False},
        "max_tokens": 500,
    }
    r = (await client.post("/v1/chat/completions", json=body)).json()
    msg = r["choices"][0]["message"]
    assert msg["reasoning_content"] is None
    assert "def is_prime" in msg["content"]
    assert r["object"] == "chat.completion"
    assert r["metadata"] == {"weight_version": "default"}
    # budget spent inside thinking -> content null, finish length
    r = (
        await client.post(
            "/v1/chat/completions",
            json={"messages": [{"role": "user", "content": "What is 2+2?"}], "max_tokens": 5},
        )
    ).json()
    assert r["choices"][0]["message"]["content"] is None
    assert r["choices"][0]["message"]["reasoning_content"]
    assert r["choices"][0]["finish_reason"] == "length"
    assert r["usage"]["completion_tokens"] == 5
    # streaming without include_usage: no usage chunk
    _, events = await sse(client, "/v1/chat/completions", {**body, "stream": True})
    chunks = decode(events)
    assert all(c["choices"] for c in chunks)
    assert not any(c["choices"][0]["delta"]["reasoning_content"] for c in chunks)


async def test_chat_errors(client: httpx.AsyncClient) -> None:
    r = await client.post("/v1/chat/completions", json={"messages": []})
    assert r.status_code == 400
    err = r.json()
    assert err["object"] == "error"
    assert err["type"] == "BadRequestError"
    assert err["code"] == 400
    r = await client.post("/v1/chat/completions", content=b"{}", headers={"Content-Type": "text/plain"})
    assert r.status_code == 415


async def test_completions(client: httpx.AsyncClient) -> None:
    r = (
        await client.post(
            "/v1/completions", json={"prompt": "hello there", "max_tokens": 8, "ignore_eos": True}
        )
    ).json()
    assert r["object"] == "text_completion"
    assert r["usage"]["completion_tokens"] == 8
    assert r["usage"]["prompt_tokens"] == 2
    assert r["choices"][0]["finish_reason"] == "length"
    _, events = await sse(
        client,
        "/v1/completions",
        {
            "prompt": [1, 2, 3, 4],
            "max_tokens": 6,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    )
    chunks = decode(events)
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["prompt_tokens"] == 4
    assert chunks[-1]["usage"]["completion_tokens"] == 6
    # One chunk a token on schedule; a late server joins decode steps (SGLang sends what has
    # accumulated), so the count is the box's timing and the total is not.
    content = chunks[:-1]
    assert 1 <= len(content) <= 6
    assert content[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["choices"][0]["finish_reason"] is None for c in content[:-1])


async def test_flush_cache_abort_and_disconnect(sim: SimServer, client: httpx.AsyncClient) -> None:
    assert (await client.post("/flush_cache")).status_code == 200
    task = asyncio.create_task(
        client.post(
            "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True}}
        )
    )
    await until(lambda: sim.engine.running, what="the request running")
    assert (await client.get("/flush_cache")).status_code == 400  # busy
    assert (await client.post("/abort_request", json={"abort_all": True})).status_code == 200
    r = await task
    assert r.status_code in (400, 500)
    # a client that goes away mid-stream aborts its request server-side
    async with client.stream(
        "POST",
        "/generate",
        json={"text": "y", "sampling_params": {"max_new_tokens": 5000, "ignore_eos": True}, "stream": True},
    ) as resp:
        async for _ in resp.aiter_bytes():
            break
    await until(lambda: not sim.engine.busy, what="the aborted request gone from the engine")
    assert any(r.status == "aborted" for r in sim.truth.records())


async def test_api_key() -> None:
    async with (
        serve(speed=200, enable_metrics=True, api_key="s3cret") as sim,
        httpx.AsyncClient(base_url=sim.base_url) as c,
    ):
        assert (await c.get("/v1/models")).status_code == 401
        assert (await c.get("/v1/models")).json() == {"error": "Unauthorized"}
        assert (await c.get("/v1/models", headers={"Authorization": "Bearer wrong"})).status_code == 401
        assert (await c.get("/v1/models", headers={"Authorization": "s3cret"})).status_code == 401
        assert (await c.get("/v1/models", headers={"Authorization": "bearer s3cret"})).status_code == 200
        ok = {"Authorization": "Bearer s3cret"}
        r = await c.post(
            "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 2}}, headers=ok
        )
        assert r.status_code == 200
        assert (await c.post("/generate", json={"text": "x"})).status_code == 401
        assert (await c.get("/ping")).status_code == 401
        # exempt
        assert (await c.get("/health")).status_code == 200
        assert (await c.get("/health_generate")).status_code == 200
        assert (await c.get("/metrics")).status_code == 200
        # the control API has its own port and no SGLang key
        assert (await c.get(sim.control_url + "/state")).status_code == 200


async def test_ground_truth_matches_client(sim: SimServer, client: httpx.AsyncClient) -> None:
    await client.post("/reset")  # not a route: 405/404 is fine, the control API is elsewhere
    async with httpx.AsyncClient(base_url=sim.control_url) as ctl:
        await ctl.post("/reset")
        bodies = [
            {
                "input_ids": list(range(10 + i)),
                "sampling_params": {"max_new_tokens": 30 + i, "ignore_eos": True},
            }
            for i in range(5)
        ]
        spans: dict[str, tuple[float, float]] = {}

        async def timed(body: dict[str, Any]) -> None:
            start = time.time()
            r = await client.post("/generate", json=body)
            spans[r.json()["meta_info"]["id"]] = (start, time.time())

        await asyncio.gather(*(timed(b) for b in bodies))
        summary = (await ctl.get("/summary")).json()
        records = (await ctl.get("/requests")).json()["requests"]
    assert summary["completed"] == 5
    assert summary["total_output_tokens"] == sum(30 + i for i in range(5))
    assert summary["total_input_tokens"] == sum(10 + i for i in range(5))
    # The server's peak: at most the requests the client had in flight at once (5 when they all
    # overlap, fewer when a busy box sends the last after the first has finished).
    client_peak = max(sum(1 for s, e in spans.values() if s <= t < e) for t, _ in spans.values())
    assert 1 <= summary["peak_concurrency"] <= client_peak
    assert summary["peak_concurrency"] == max(
        sum(1 for r in records if r["arrival_time"] <= rec["arrival_time"] < r["finish_time"])
        for rec in records
    )
    for rec in records:
        assert rec["status"] == "ok"
        assert rec["arrival_time"] <= rec["first_token_time"] <= rec["last_token_time"] <= rec["finish_time"]
        assert rec["route"] == "/generate"
        # the truth lies inside what the client saw (same clock; 5 ms of slack for rounding)
        sent, received = spans[rec["rid"]]
        assert sent - 0.005 <= rec["arrival_time"]
        assert rec["finish_time"] <= received + 0.005
        assert rec["e2e_s"] <= received - sent + 0.005
    json.dumps(summary)


async def test_mtp_profile_streams_several_tokens_per_chunk() -> None:
    err = io.StringIO()
    async with (
        serve(speed=10, profile="glm5-nvfp4-8x-rtxpro6000-mtp", startup_time=0, err=err) as sim,
        httpx.AsyncClient(base_url=sim.base_url) as c,
    ):
        _, events = await sse(
            c,
            "/generate",
            {"text": "x", "sampling_params": {"max_new_tokens": 130, "ignore_eos": True}, "stream": True},
        )
        chunks = decode(events)
        steps = [
            b["meta_info"]["completion_tokens"] - a["meta_info"]["completion_tokens"]
            for a, b in itertools.pairwise(chunks)
        ]
        assert max(steps) > 1
        assert max(steps) <= 4  # 3 draft tokens + 1
        final = chunks[-1]["meta_info"]
        assert final["completion_tokens"] == 130
        assert 1.8 < final["spec_accept_length"] < 3.0
        info = (await c.get("/server_info")).json()
        assert info["speculative_algorithm"] == "EAGLE"
        assert info["internal_states"][0]["avg_spec_accept_length"] > 1.5
    decode_lines = [parse_line(line) for line in err.getvalue().splitlines() if "Decode batch" in line]
    assert decode_lines
    assert all(
        isinstance(d, DecodeBatch) and d.accept_len is not None and d.accept_len > 1.5 for d in decode_lines
    )


async def test_health_without_generation_and_metrics_meta_info(
    sim: SimServer, client: httpx.AsyncClient
) -> None:
    r = (
        await client.post(
            "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}}
        )
    ).json()
    meta = r["meta_info"]
    # --enable-metrics timing fields (the fixture's server runs with metrics on)
    for key in (
        "queue_time",
        "request_received_ts",
        "decode_finished_ts",
        "inference_time",
        "decode_throughput",
    ):
        assert key in meta, key
    assert meta["decode_finished_ts"] >= meta["request_received_ts"]
    async with (
        serve(speed=200, health_generation=False) as quick,
        httpx.AsyncClient(base_url=quick.base_url) as c,
    ):
        async with httpx.AsyncClient(base_url=quick.control_url) as ctl:
            await ctl.post("/faults", json={"name": "hang", "params": {"watchdog": 0}})
        assert (await c.get("/health")).status_code == 200  # liveness only
        assert (await c.get("/health_generate")).status_code == 503  # always probes


async def test_capacity_scale_is_reported_in_state_and_truth() -> None:
    async with (
        serve(speed=200, capacity_scale=0.85) as sim,
        httpx.AsyncClient(base_url=sim.control_url) as ctl,
    ):
        state = (await ctl.get("/state")).json()
        summary = (await ctl.get("/summary")).json()
    assert state["capacity_scale"] == 0.85
    assert (summary["capacity_scale"], summary["speed"]) == (0.85, 200)
    # the engine runs the scaled model (15 % slower steps)
    assert abs(sim.engine.profile.decode_base_s - 0.0777 / 0.85) < 1e-12


async def test_arrival_is_stamped_before_the_body_is_read(sim: SimServer) -> None:
    """The truth's arrival is handler entry (SGLang's created_time), not after the body arrived."""
    body = json.dumps(
        {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 4, "ignore_eos": True}}
    ).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", sim.port)
    try:
        head = (
            f"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
        )
        headers_sent = time.time()
        writer.write(head.encode())
        await writer.drain()
        await asyncio.sleep(0.3)  # a slow client: the body comes 300 ms after the headers
        body_sent = time.time()
        writer.write(body)
        await writer.drain()
        reply = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    assert reply.startswith(b"HTTP/1.1 200")
    (rec,) = sim.truth.records()
    arrival = rec.arrival_time
    assert headers_sent - 0.005 <= arrival < body_sent - 0.2
    assert rec.ttft_s is not None
    assert rec.ttft_s >= 0.2
    assert rec.arrival_time <= (rec.first_token_time or 0) <= (rec.finish_time or 0)


_FIXTURES = Path(__file__).parents[1] / "sglang" / "fixtures"


def _shape(value: object) -> object:
    """Keys in order (recursively), types of leaves and nulls: what the oracles pin down."""
    if isinstance(value, dict):
        return [(k, _shape(v)) for k, v in value.items()]
    if isinstance(value, list):
        return [_shape(v) for v in value]
    return None if value is None else type(value).__name__


@pytest.mark.parametrize(
    ("fixture", "path"),
    [
        ("generate_stream.json", "/generate"),
        ("generate_nonstream.json", "/generate"),
        ("completion_stream_usage.json", "/v1/completions"),
        ("chat_stream_no_thinking_usage.json", "/v1/chat/completions"),
    ],
)
async def test_bodies_have_the_oracles_keys_in_order(fixture: str, path: str) -> None:
    oracle = json.loads((_FIXTURES / fixture).read_text())
    # No --enable-metrics: it adds the timing keys a plain 0.5.9 server does not send. The oracles
    # are 0.5.9 captures.
    async with (
        serve(speed=200, sglang_version="0.5.9") as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        if "events" not in oracle:
            r = await client.post(path, json=oracle["request"])
            assert _shape(r.json()) == _shape(oracle["response"])
            return
        status, events = await sse(client, path, oracle["request"])
    assert status == 200
    got = [repr(_shape(e)) for e in decode(events)]
    capture = [json.loads(e[len("data: ") : -2]) for e in oracle["events"][:-1]]
    want = [repr(_shape(e)) for e in capture]
    # How many chunks carry the tokens is the server's timing, not its format: SGLang sends what
    # has accumulated when its client is behind, and the simulator joins late decode steps the
    # same way (a busy box got one chunk for both tokens). So: every event has one of the
    # capture's shapes, in the capture's order, and the stream ends as the capture does (the
    # finish chunk; with include_usage, then the usage chunk).
    first = {shape: i for i, shape in reversed(list(enumerate(want)))}
    order = [first[shape] for shape in got if shape in first]
    assert len(order) == len(got), (got, want)
    assert order == sorted(order), (got, want)
    ends = 2 if capture[-1].get("choices") == [] else 1
    assert got[-ends:] == want[-ends:]


async def test_state_reports_the_simulators_own_loop_lag() -> None:
    async with serve(speed=200) as sim, httpx.AsyncClient(base_url=sim.control_url) as ctl:
        await asyncio.sleep(0.05)
        time.sleep(0.25)  # noqa: ASYNC251 -- on purpose: the simulator's loop is held up 250 ms
        await asyncio.sleep(0.05)
        lag = (await ctl.get("/state")).json()["loop_lag"]
        assert lag["samples"] >= 2
        assert 0.2 <= lag["max_s"] < 1.0
        assert lag["p99_s"] <= lag["max_s"]
        await ctl.post("/reset")
        after = (await ctl.get("/state")).json()["loop_lag"]
    assert after["max_s"] < lag["max_s"]


async def test_truth_records_when_the_first_token_was_written(
    sim: SimServer, client: httpx.AsyncClient
) -> None:
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 5, "ignore_eos": True}}
    status, _ = await sse(client, "/generate", {**body, "stream": True})
    assert status == 200
    got_all = time.time()
    assert (await client.post("/generate", json=body)).status_code == 200
    streamed, plain = sim.truth.records()
    assert streamed.first_token_time is not None
    assert streamed.first_token_written_time is not None
    assert streamed.first_token_time <= streamed.first_token_written_time <= got_all
    assert plain.first_token_written_time is None
