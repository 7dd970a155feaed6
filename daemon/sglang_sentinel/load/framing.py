"""HTTP/1.1 response framing for the load client: httptools' (llhttp's) callbacks, one exchange's state.

What a connection does with the bytes of a read, whatever carried them: feed llhttp, gather the
body pieces of that read and hand them to the request's sink in one call, and end the exchange
on a complete message, a clean close of an unframed body, or an error. The I/O (non-blocking
sockets with kernel stamps, the epoll poller, TLS transports) and the steady-state chunk
unframing that bypasses llhttp are `sglang_sentinel.load.transport`'s; the `_chunk_end`/`_boundary`
state kept here is what tells that fast path a read starts at a chunk boundary.
"""

from __future__ import annotations

import asyncio
import time
from typing import Protocol

import httptools

__all__ = ["BodySink", "ConnectionLost", "Exchange", "ProtocolError", "ResponseFraming"]

_perf = time.perf_counter


class BodySink(Protocol):
    def on_sent(self, now: float) -> None:
        """The request is about to be handed to the kernel, at `now` (perf_counter)."""

    def on_status(self, status: int) -> None: ...

    def on_data(self, data: bytes, now: float) -> None:
        """Body bytes (de-chunked) of one socket read; `now` = perf_counter() time it arrived."""


class ConnectionLost(ConnectionError):
    """The server closed the connection before the response was complete."""


class ProtocolError(ValueError):
    """The server's bytes are not valid HTTP/1.1."""


class Exchange:
    """One request on its connection: the sink, the future its caller awaits, how far it got."""

    __slots__ = ("complete", "future", "received", "sent_at", "sink", "status")

    def __init__(self, sink: BodySink, future: asyncio.Future[None]) -> None:
        self.sink = sink
        self.future = future
        self.status = 0
        self.received = False
        self.complete = False
        self.sent_at = 0.0

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)

    def mark_sent(self) -> None:
        # Called just BEFORE the request's first byte goes to the kernel: a stamp taken after
        # send() returns can be late by a preemption (measured under CPU contention: TTFT
        # 0.61 ms against the server's 4.08 ms), and every time measured from it would
        # then be short, down to impossible. From before the send, a response time is never
        # earlier than the server could have produced it (bench_serving stamps before
        # `session.post` for the same reason).
        self.sent_at = now = _perf()
        self.sink.on_sent(now)


class ResponseFraming:
    """HTTP/1.1 response framing of one connection; the I/O is the subclass's."""

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.exchange: Exchange | None = None
        self.closed = False
        self.idle_since = 0.0
        self.keep_alive = False
        self._body: list[bytes] = []  # body pieces of the read being parsed
        self._framed = False  # the response has Content-Length or Transfer-Encoding
        # The parser's last event was the end of a chunk, and the read ended there: the next
        # read starts with a chunk-size line, the one shape `_on_read` unframes itself.
        self._chunk_end = False
        self._boundary = False

    def send(self, request: bytes, ex: Exchange) -> None:
        raise NotImplementedError

    def close(self) -> None:
        raise NotImplementedError

    def _on_read(self, data: bytes, now: float) -> None:
        ex = self.exchange
        if ex is None:  # bytes on an idle connection: not HTTP we can trust any more
            self.close()
            return
        ex.received = True
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserError as exc:
            self._body.clear()
            ex.fail(ProtocolError(f"invalid HTTP from the server: {exc}"))
            self.close()
            return
        self._boundary = self._chunk_end and data.endswith(b"\r\n")
        pieces = self._body
        if pieces:
            # One call per read: a read holding many small chunks (a fast server, a client
            # that fell behind) is joined once, not piece by piece.
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            self._deliver(ex, body, now)
            if self.closed:
                return
        if ex.complete and not ex.future.done():
            ex.future.set_result(None)

    def _deliver(self, ex: Exchange, body: bytes, now: float) -> None:
        try:
            ex.sink.on_data(body, now)
        except Exception as exc:  # the sink's verdict (e.g. an in-band error) ends the request
            ex.fail(exc)
            self.close()

    def _on_eof(self, exc: Exception | None) -> None:
        self.closed = True
        ex = self.exchange
        if ex is None or ex.complete:
            return
        if exc is None and ex.status and not self._framed:
            # A body without Content-Length or chunking ends at the server's clean close
            # (HTTP/1.1 section 6.3); httptools has no feed_eof, so that end is ours to call.
            ex.complete = True
            if not ex.future.done():
                ex.future.set_result(None)
            return
        ex.fail(ConnectionLost(f"the server closed the connection{f': {exc}' if exc else ''}"))

    # -- httptools callbacks --
    def on_message_begin(self) -> None:
        self._framed = False
        self._chunk_end = False

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        ex = self.exchange
        if ex is not None:
            ex.status = self.parser.get_status_code()
            ex.sink.on_status(ex.status)

    def on_body(self, body: bytes) -> None:
        self._chunk_end = False
        self._body.append(body)

    def on_chunk_header(self) -> None:
        self._chunk_end = False

    def on_chunk_complete(self) -> None:
        self._chunk_end = True

    def on_message_complete(self) -> None:
        self._chunk_end = False
        # Asked here: after the callback llhttp has reset for the next message and answers no.
        self.keep_alive = self.parser.should_keep_alive()
        if self.exchange is not None:
            self.exchange.complete = True
