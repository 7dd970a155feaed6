"""Raw loopback HTTP/1.1 for the load tests: a hand-rolled server, chunked framing, a recording sink.

The servers exist to send what no framework would (bad framing, cut streams), so they parse
requests by hand; this is the one copy of that parsing, of the server, and of the sink the
transport tests hand to `HttpClient.post`. The `raw_server` fixture (tests/load/conftest.py)
starts servers of this kind.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

Reader = asyncio.StreamReader
Writer = asyncio.StreamWriter
# (reader, writer, request line, POST number on this server) -> keep the connection open?
Handler = Callable[[Reader, Writer, bytes, int], Awaitable[bool]]

CHUNKED_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """Read one request (head and Content-Length body); return its head. Raises
    ``asyncio.IncompleteReadError`` when the peer closes."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    return head


def chunk(payload: bytes) -> bytes:
    """One chunk of a chunked body."""
    return b"%x\r\n%s\r\n" % (len(payload), payload)


def chunked(*pieces: bytes, end: bool = True) -> bytes:
    """A whole 200 event-stream response in chunked framing (without its last chunk: cut)."""
    return CHUNKED_HEAD + b"".join(chunk(p) for p in pieces) + (b"0\r\n\r\n" if end else b"")


class RawServer:
    """HTTP/1.1 by hand, so that tests can send what no framework would; counts connections."""

    def __init__(self, handler: Handler) -> None:
        self.handler = handler
        self.connections = 0
        self.posts = 0
        self.first_post = asyncio.Event()
        self.requests = 0
        self.closed_by_peer = asyncio.Event()
        self.server: asyncio.Server | None = None

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        try:
            while True:
                head = await read_request(reader)
                self.requests += 1
                line = head.split(b"\r\n", 1)[0]
                if line.startswith(b"GET "):  # the engine's pre-warm
                    writer.write(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")
                    await writer.drain()
                    continue
                self.posts += 1
                self.first_post.set()
                if not await self.handler(reader, writer, line, self.posts):
                    break
        except (asyncio.IncompleteReadError, ConnectionError):
            self.closed_by_peer.set()
        finally:
            writer.close()

    @property
    def url(self) -> str:
        assert self.server is not None
        return f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"


Start = Callable[[Handler], Awaitable[RawServer]]


class Sink:
    """A `transport.BodySink` that records every read with its time; `on_read` sees each one."""

    def __init__(self) -> None:
        self.status = 0
        self.sent = 0.0
        self.reads: list[tuple[bytes, float]] = []
        self.on_read: Callable[[bytes], None] | None = None

    def on_sent(self, now: float) -> None:
        self.sent = now

    def on_status(self, status: int) -> None:
        self.status = status

    def on_data(self, data: bytes, now: float) -> None:
        self.reads.append((data, now))
        if self.on_read is not None:
            self.on_read(data)

    @property
    def data(self) -> bytes:
        return b"".join(d for d, _ in self.reads)
