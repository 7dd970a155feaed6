"""The streamed responses' writer: one chunked-encoding frame per SSE event, written straight to
the connection's transport while nothing is queued on it.

Why not ``StreamResponse.write`` for every event: at one token per event it is the simulator's
hot path, and aiohttp's writer costs a coroutine, a header-state check, a three-part
``writelines`` and a byte count per event on top of the one ``send()`` that matters. The frame is
the same bytes aiohttp writes (``<hex length>\\r\\n<event>\\r\\n``), so what a client receives does
not change. aiohttp still writes the first event (it coalesces the buffered headers with it),
every event while the transport holds unsent data (its writer then counts the bytes and waits
for the client: the backpressure), every event of a response that is not chunked (an HTTP/1.0
client), and the end of the stream.
"""

from __future__ import annotations

import asyncio
from typing import cast

from aiohttp import hdrs, web

__all__ = ["SseWriter", "frame", "writable"]


def frame(data: bytes) -> bytes:
    """One chunk of a chunked body, the bytes aiohttp writes for it: ``<hex length>\\r\\n<data>\\r\\n``."""
    return b"%x\r\n%b\r\n" % (len(data), data)


def writable(transport: asyncio.BaseTransport | None) -> asyncio.WriteTransport | None:
    """``transport`` if it can be written to directly. Duck-typed: uvloop's transports have the
    methods but do not derive from asyncio's classes."""
    if transport is None or not all(
        hasattr(transport, m) for m in ("write", "is_closing", "get_write_buffer_size")
    ):
        return None
    return cast(asyncio.WriteTransport, transport)


class SseWriter:
    __slots__ = ("chunked", "primed", "resp", "transport")

    def __init__(self, request: web.Request, resp: web.StreamResponse) -> None:
        self.resp = resp
        self.transport = writable(request.transport)
        # Set by prepare() for an HTTP/1.1 response without a length: what SGLang's servers send.
        self.chunked = resp.headers.get(hdrs.TRANSFER_ENCODING, "").lower() == "chunked"
        self.primed = False  # the headers are out (aiohttp sends them with the first event)

    def direct(self) -> asyncio.WriteTransport | None:
        """The transport while an event may go straight to it: the headers out (so chunked), the
        connection open and nothing queued on it; else None (aiohttp's writer must take it)."""
        t = self.transport
        if self.primed and t is not None and not t.is_closing() and t.get_write_buffer_size() == 0:
            return t
        return None

    async def write(self, data: bytes) -> None:
        t = self.direct()
        if t is not None:
            t.write(frame(data))
            return
        await self.resp.write(data)
        self.primed = self.chunked
