"""The streaming HTTP client against raw loopback servers: reuse, retry, framing, bad bytes, aborts."""

from __future__ import annotations

import asyncio
import time

import pytest

from sglang_sentinel.load.transport import ConnectError, ConnectionLost, HttpClient, ProtocolError
from support.rawhttp import Reader, Sink, Start, Writer, chunked

pytestmark = pytest.mark.asyncio


async def test_keep_alive_reuse_and_chunked_body(
    raw_server: Start,
) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        writer.write(chunked(b"data: 1\n\n", b"data: [DONE]\n\n"))
        await writer.drain()
        return True

    server = await raw_server(handler)
    client = HttpClient(server.url, {"Content-Type": "application/json"})
    try:
        for _ in range(3):
            sink = Sink()
            assert await client.post("/generate", b"{}", sink) == 200
            assert bytes(sink.data) == b"data: 1\n\ndata: [DONE]\n\n"
        assert server.connections == 1
        assert server.requests == 3
    finally:
        await client.close()


async def test_content_length_body_and_error_status(
    raw_server: Start,
) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        body = b'{"error":"Unauthorized"}'
        writer.write(b"HTTP/1.1 401 Unauthorized\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        return True

    server = await raw_server(handler)
    client = HttpClient(server.url + "/prefix", {})
    try:
        sink = Sink()
        assert await client.post("/generate", b"{}", sink) == 401
        assert bytes(sink.data) == b'{"error":"Unauthorized"}'
    finally:
        await client.close()


async def test_stale_keep_alive_connection_is_retried_once(
    raw_server: Start,
) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        if n == 2:  # the server dropped the idle connection just as the client reused it
            return False
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
        await writer.drain()
        return True

    server = await raw_server(handler)
    client = HttpClient(server.url, {})
    try:
        assert await client.post("/x", b"a", Sink()) == 200
        sink = Sink()
        assert await client.post("/x", b"b", sink) == 200
        assert bytes(sink.data) == b"ok"
        assert server.connections == 2
    finally:
        await client.close()


async def test_connection_lost_mid_response(raw_server: Start) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n9\r\ndata: 1\n\n\r\n")
        await writer.drain()
        return False

    server = await raw_server(handler)
    client = HttpClient(server.url, {})
    try:
        sink = Sink()
        with pytest.raises(ConnectionLost):
            await client.post("/x", b"", sink)
        assert bytes(sink.data) == b"data: 1\n\n"
    finally:
        await client.close()


async def test_garbage_is_a_protocol_error(raw_server: Start) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()
        await asyncio.sleep(1)
        return False

    server = await raw_server(handler)
    client = HttpClient(server.url, {})
    try:
        with pytest.raises(ProtocolError):
            await client.post("/x", b"", Sink())
    finally:
        await client.close()


async def test_connect_refused() -> None:
    client = HttpClient("http://127.0.0.1:9", {})
    with pytest.raises(ConnectError):
        await client.post("/x", b"", Sink())
    await client.close()


async def test_cancel_closes_the_connection(raw_server: Start) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
        while True:  # stream forever until the client goes away
            writer.write(b"9\r\ndata: 1\n\n\r\n")
            await writer.drain()
            await asyncio.sleep(0.01)

    server = await raw_server(handler)
    client = HttpClient(server.url, {})
    try:
        sink = Sink()
        task = asyncio.create_task(client.post("/x", b"", sink))
        await asyncio.sleep(0.1)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        assert len(sink.reads) > 0
        await asyncio.wait_for(server.closed_by_peer.wait(), 2.0)
    finally:
        await client.close()


async def test_prewarm_opens_idle_connections(raw_server: Start) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        return True

    server = await raw_server(handler)
    client = HttpClient(server.url, {})
    try:
        assert await client.prewarm(5) == 5
        await asyncio.gather(*(client.post("/x", b"", Sink()) for _ in range(5)))
        assert server.connections == 5
    finally:
        await client.close()


async def test_header_injection_refused() -> None:
    with pytest.raises(ValueError, match="line breaks"):
        HttpClient("http://127.0.0.1:1", {"X": "a\r\nB: c"})


async def test_body_until_close_is_complete(raw_server: Start) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        writer.write(b'HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n{"text": "ok"}')
        await writer.drain()
        return False  # no length, no chunking: the body ends at the close

    server = await raw_server(handler)
    client = HttpClient(server.url, {})
    try:
        sink = Sink()
        assert await client.post("/x", b"", sink) == 200
        assert bytes(sink.data) == b'{"text": "ok"}'
    finally:
        await client.close()


async def test_send_time_is_taken_after_the_connect(
    raw_server: Start,
) -> None:
    async def handler(reader: Reader, writer: Writer, line: bytes, n: int) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
        await writer.drain()
        return True

    server = await raw_server(handler)
    client = HttpClient(server.url, {})
    try:
        sink = Sink()
        before = time.perf_counter()
        assert await client.post("/x", b"", sink) == 200
        assert before < sink.sent < time.perf_counter()
    finally:
        await client.close()
