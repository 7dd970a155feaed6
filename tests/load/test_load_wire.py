"""The engine's HTTP use against raw loopback servers: pooling, pre-warm, bad bytes, cut streams, aborts."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sglang_sentinel.load import ArrivalProcess, FailureReason, LoadSpec, RandomDataset, run_load
from support.rawhttp import Reader, Start, Writer, chunked

pytestmark = pytest.mark.asyncio


def _event(n: int, finish: bool = False) -> bytes:
    fr = {"type": "length"} if finish else None
    meta = {"completion_tokens": n, "prompt_tokens": 4, "finish_reason": fr}
    return b"data: " + json.dumps({"text": "x" * n, "meta_info": meta}).encode() + b"\n\n"


def _spec(url: str, **kw: Any) -> LoadSpec:
    defaults: dict[str, Any] = {
        "base_url": url,
        "dataset": RandomDataset(input_len=4, output_len=2, range_ratio=1.0),
        "num_requests": 3,
        "warmup_requests": 0,
        "request_timeout_s": 5.0,
    }
    defaults.update(kw)
    return LoadSpec(**defaults)


async def _good(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
    writer.write(chunked(_event(1), _event(2, finish=True) + b"data: [DONE]\n\n"))
    await writer.drain()
    return True


async def test_keep_alive_reuse_across_requests(raw_server: Start) -> None:
    server = await raw_server(_good)
    spec = _spec(server.url, arrival=ArrivalProcess.CLOSED, max_concurrency=1, num_requests=4)
    result = await run_load(spec)
    assert result.metrics.completed == 4
    assert result.metrics.total_output_tokens == 8
    assert server.posts == 4
    assert server.connections == 1  # the pre-warmed connection carried every request


async def test_prewarm_opens_one_connection_per_stream(
    raw_server: Start,
) -> None:
    server = await raw_server(_good)
    spec = _spec(server.url, arrival=ArrivalProcess.BURST, max_concurrency=5, num_requests=10)
    result = await run_load(spec)
    assert result.metrics.completed == 10
    assert server.connections == 5  # opened before the clock, reused, never more than the cap
    assert server.requests == 10  # pre-warm only connects: no request of its own


async def test_path_prefix_of_base_url_is_kept(raw_server: Start) -> None:
    lines: list[bytes] = []

    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        lines.append(line)
        return await _good(reader, writer, line, n)

    server = await raw_server(handler)
    result = await run_load(_spec(server.url + "/sglang/", num_requests=1))
    assert result.metrics.completed == 1
    assert lines == [b"POST /sglang/generate HTTP/1.1"]


async def test_garbage_is_malformed(raw_server: Start) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        return False

    server = await raw_server(handler)
    result = await run_load(_spec(server.url, num_requests=2))
    assert result.metrics.failures == {FailureReason.MALFORMED: 2}
    assert "invalid HTTP" in (result.records[0].error or "")


async def test_bad_chunk_framing_is_not_a_success(raw_server: Start) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
        writer.write(head + b"zz\r\n" + _event(1) + b"\r\n0\r\n\r\n")
        await writer.drain()
        return False

    server = await raw_server(handler)
    result = await run_load(_spec(server.url, num_requests=1))
    assert result.metrics.completed == 0
    assert result.records[0].failure in (FailureReason.MALFORMED, FailureReason.DISCONNECTED)


async def test_connection_lost_mid_stream_is_disconnected(
    raw_server: Start,
) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        writer.write(chunked(_event(1), end=False))
        await writer.drain()
        return False  # closes the socket in the middle of the chunked body

    server = await raw_server(handler)
    result = await run_load(_spec(server.url, num_requests=2))
    assert result.metrics.failures == {FailureReason.DISCONNECTED: 2}
    rec = result.records[0]
    assert rec.chunk_times  # the token that did arrive was recorded
    assert rec.error


async def test_content_length_error_body(raw_server: Start) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        body = b'{"error":{"message":"Unauthorized"}}'
        writer.write(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        return True

    server = await raw_server(handler)
    result = await run_load(_spec(server.url, num_requests=1))
    assert result.metrics.failures == {"http_401": 1}
    assert result.records[0].error == "HTTP 401: Unauthorized"


async def test_endless_error_body_is_cut_not_waited_for(
    raw_server: Start,
) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        writer.write(b"HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n")
        while True:
            writer.write(b"400\r\n" + b"e" * 1024 + b"\r\n")
            await writer.drain()
            await asyncio.sleep(0.005)

    server = await raw_server(handler)
    result = await run_load(_spec(server.url, num_requests=1, request_timeout_s=3.0))
    rec = result.records[0]
    assert rec.failure == "http_500"
    assert (rec.latency or 99) < 2.0
    await asyncio.wait_for(server.closed_by_peer.wait(), 2.0)


async def test_cancel_drops_the_connection(raw_server: Start) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        k = 0
        while True:  # stream until the client goes away
            k += 1
            ev = _event(k)
            writer.write(b"%x\r\n%s\r\n" % (len(ev), ev))
            await writer.drain()
            await asyncio.sleep(0.01)

    server = await raw_server(handler)
    cancel = asyncio.Event()
    task = asyncio.create_task(run_load(_spec(server.url, num_requests=1), cancel=cancel))
    await asyncio.wait_for(server.first_post.wait(), 5.0)
    await asyncio.sleep(0.1)
    cancel.set()
    result = await asyncio.wait_for(task, 5.0)
    assert result.cancelled
    assert result.metrics.cancelled == 1
    assert result.records[0].chunk_times
    await asyncio.wait_for(server.closed_by_peer.wait(), 2.0)


async def test_long_cumulative_event_is_read_whole(
    raw_server: Start,
) -> None:
    """One event far over 64 KB (cumulative text of a long answer) must not break the stream."""

    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        event = {"text": "y" * 3_000_000, "meta_info": {"completion_tokens": 1}}
        big = b"data: " + json.dumps(event).encode()
        writer.write(chunked(big + b"\n\n", _event(2, finish=True) + b"data: [DONE]\n\n"))
        await writer.drain()
        return True

    server = await raw_server(handler)
    result = await run_load(_spec(server.url, num_requests=1))
    assert result.metrics.completed == 1
    assert result.records[0].chunk_tokens == [1, 1]


async def test_server_closing_an_idle_connection_costs_no_request(raw_server: Start) -> None:
    """The server drops a kept-alive connection just as it is reused: the request is resent."""

    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        await _good(reader, writer, line, n)
        return n != 1  # closes after the first POST, as an idle timeout would

    server = await raw_server(handler)
    spec = _spec(server.url, arrival=ArrivalProcess.CLOSED, max_concurrency=1, num_requests=3)
    result = await run_load(spec)
    assert result.metrics.completed == 3
    assert result.metrics.failures == {}


@pytest.mark.parametrize("newlines", [False, True])
async def test_a_never_ending_sse_event_is_a_counted_malformed_failure(
    raw_server: Start, newlines: bool
) -> None:
    # Before: the whole line was buffered (641 MB for 2 requests in the issue). Now the request
    # fails as malformed_stream once the unfinished event passes EVENT_LIMIT, and memory stays
    # near the limit. Lines within one never-ending event (newlines=True) count the same.
    import tracemalloc

    from sglang_sentinel.load.sink import EVENT_LIMIT
    from support.rawhttp import CHUNKED_HEAD, chunk

    sent = [0]

    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        writer.write(CHUNKED_HEAD + chunk(b'data: {"text": "'))
        piece = (b"data: more\n" if newlines else b"x" * 1000) * 64
        try:
            while sent[0] < 4 * EVENT_LIMIT:  # bounded: a test server stops by itself
                writer.write(chunk(piece))
                sent[0] += len(piece)
                await writer.drain()
        except ConnectionError:
            pass
        return False

    server = await raw_server(handler)
    tracemalloc.start()
    try:
        result = await run_load(_spec(server.url, num_requests=1, request_timeout_s=60.0))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert result.metrics.failures == {FailureReason.MALFORMED: 1}
    assert "SSE event over" in (result.records[0].error or "")
    assert peak < 6 * EVENT_LIMIT
