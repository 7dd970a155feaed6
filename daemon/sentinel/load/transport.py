"""A lean HTTP/1.1 client for streamed responses: asyncio protocol callbacks + httptools' C parser.

Why not aiohttp or httpx for the request path (numbers: `benchmarks/load_http_clients.py`,
`benchmarks/load_efficiency.py`): both hand every received HTTP chunk through several Python
layers (stream reader, flow control, a coroutine wake-up per read) before we see a byte; on an
SSE stream that is one chunk per token, and it was most of the client's CPU. Here the body
bytes of one socket read go straight from the protocol callback to the request's sink with one
timestamp, taken when the read arrived. httptools (llhttp, the parser uvicorn uses) does the
HTTP framing. An aiohttp-based engine was built and measured against this one (same session,
same simulator): streamed tokens per client CPU-second vs bench_serving fell from 2.57x to
1.89x (256/256) and from 4.29x to 2.66x (1024/1024), and the Poisson p99 schedule lag rose from
about 2 ms to 3.4-6 ms, so this client stayed.

Scope, on purpose: one POST at a time per connection, keep-alive reuse (LIFO), plain TCP or
TLS, no proxies, no redirects, no compression (we ask for none). Anything the server does
outside that is an error for the request, never a hang: the caller wraps each request in its
own timeout.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from typing import Protocol, cast
from urllib.parse import urlsplit

import httptools

__all__ = ["KEEPALIVE_S", "BodySink", "ConnectError", "ConnectionLost", "HttpClient", "ProtocolError"]

_perf = time.perf_counter

# SGLang's uvicorn closes idle keep-alive connections after 5 s; reusing one at that moment
# would lose the request, so ours are dropped a little earlier.
KEEPALIVE_S = 4.0


class BodySink(Protocol):
    def on_sent(self, now: float) -> None:
        """The request's bytes were handed to the socket (`transport.write` returned) at `now`."""

    def on_status(self, status: int) -> None: ...

    def on_data(self, data: bytes, now: float) -> None:
        """Body bytes (de-chunked) of one socket read; `now` = perf_counter() when it arrived."""


class ConnectError(OSError):
    """The connection could not be opened (refused, unreachable, DNS, TLS)."""


class ConnectionLost(ConnectionError):
    """The server closed the connection before the response was complete."""


class ProtocolError(ValueError):
    """The server's bytes are not valid HTTP/1.1."""


class _Exchange:
    __slots__ = ("complete", "future", "received", "sink", "status")

    def __init__(self, sink: BodySink, future: asyncio.Future[None]) -> None:
        self.sink = sink
        self.future = future
        self.status = 0
        self.received = False
        self.complete = False

    def fail(self, exc: BaseException) -> None:
        if not self.future.done():
            self.future.set_exception(exc)


class _Connection(asyncio.Protocol):
    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.parser = httptools.HttpResponseParser(self)
        self.exchange: _Exchange | None = None
        self.closed = False
        self.idle_since = 0.0
        self.keep_alive = False
        self._body: list[bytes] = []  # body pieces of the read being parsed
        self._framed = False  # the response has Content-Length or Transfer-Encoding

    # -- asyncio.Protocol --
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's transports do not subclass asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        now = _perf()
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
        pieces = self._body
        if pieces:
            # One call per read: a read holding many small chunks (a fast server, a client
            # that fell behind) is joined once, not piece by piece.
            body = pieces[0] if len(pieces) == 1 else b"".join(pieces)
            pieces.clear()
            try:
                ex.sink.on_data(body, now)
            except Exception as exc:  # the sink's verdict (e.g. an in-band error) ends the request
                ex.fail(exc)
                self.close()
                return
        if ex.complete and not ex.future.done():
            ex.future.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
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

    def on_header(self, name: bytes, value: bytes) -> None:
        if name.lower() in (b"content-length", b"transfer-encoding"):
            self._framed = True

    def on_headers_complete(self) -> None:
        ex = self.exchange
        if ex is not None:
            ex.status = self.parser.get_status_code()
            ex.sink.on_status(ex.status)

    def on_body(self, body: bytes) -> None:
        self._body.append(body)

    def on_message_complete(self) -> None:
        # Asked here: after the callback llhttp has reset for the next message and answers no.
        self.keep_alive = self.parser.should_keep_alive()
        if self.exchange is not None:
            self.exchange.complete = True

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()


class HttpClient:
    """POSTs to one origin over a pool of keep-alive connections. Use inside one event loop."""

    def __init__(self, base_url: str, headers: dict[str, str], connect_timeout: float = 30.0) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL: {base_url!r}")
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.prefix = parts.path.rstrip("/")
        self.ssl: ssl.SSLContext | None = ssl.create_default_context() if parts.scheme == "https" else None
        self.connect_timeout = connect_timeout
        host_header = self.host if parts.port is None else f"{self.host}:{self.port}"
        if ":" in self.host and not self.host.startswith("["):
            host_header = f"[{self.host}]" + (f":{parts.port}" if parts.port else "")
        lines = [f"Host: {host_header}"] + [f"{k}: {v}" for k, v in headers.items()]
        for line in lines:
            if "\r" in line or "\n" in line:
                raise ValueError("header names and values cannot contain line breaks")
        self._head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
        self._idle: list[_Connection] = []
        self._all: set[_Connection] = set()

    async def _connect(self) -> _Connection:
        loop = asyncio.get_running_loop()
        try:
            async with asyncio.timeout(self.connect_timeout):
                _, conn = await loop.create_connection(
                    _Connection,
                    self.host,
                    self.port,
                    ssl=self.ssl,
                    server_hostname=self.host if self.ssl else None,
                )
        except TimeoutError:
            raise ConnectError(f"connect timed out after {self.connect_timeout:g} s") from None
        except OSError as exc:
            raise ConnectError(str(exc) or type(exc).__name__) from exc
        self._all.add(conn)
        return conn

    def _take_idle(self) -> _Connection | None:
        now = time.monotonic()
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed and now - conn.idle_since < KEEPALIVE_S:
                return conn
            conn.close()
            self._all.discard(conn)
        return None

    async def prewarm(self, n: int) -> int:
        """Open connections until `n` are idle in the pool (at most 64 handshakes at a time).

        Returns how many are idle; failures are left for the requests to report."""
        missing = n - sum(1 for c in self._idle if not c.closed)
        gate = asyncio.Semaphore(64)

        async def one() -> None:
            async with gate:
                conn = await self._connect()
                conn.idle_since = time.monotonic()
                self._idle.append(conn)

        if missing > 0:
            await asyncio.gather(*(one() for _ in range(missing)), return_exceptions=True)
        return len(self._idle)

    async def post(self, path: str, body: bytes, sink: BodySink) -> int:
        """Send one POST and deliver its response to `sink`; returns the HTTP status.

        Raises ConnectError, ConnectionLost, ProtocolError, or whatever the sink raised. A
        reused connection that the server had already closed (no byte of response) is retried
        once on a fresh one: the request never reached the server."""
        request = (
            b"POST " + (self.prefix + path).encode("latin-1") + b" HTTP/1.1\r\n" + self._head
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )  # fmt: skip
        for attempt in range(2):
            conn = self._take_idle()
            reused = conn is not None
            if conn is None:
                conn = await self._connect()
            ex = _Exchange(sink, asyncio.get_running_loop().create_future())
            conn.exchange = ex
            assert conn.transport is not None
            conn.transport.write(request)
            # The send time: after the write (uvloop and asyncio write straight to the socket
            # when its buffer has room), after any connect; a retry takes a new one.
            sink.on_sent(_perf())
            try:
                await ex.future
            except ConnectionLost:
                self._all.discard(conn)
                if reused and not ex.received and attempt == 0:
                    continue
                raise
            except BaseException:
                # Cancelled, timed out, or the sink gave up: the server must see the request
                # go away (SGLang aborts a request whose client disconnected).
                conn.close()
                self._all.discard(conn)
                raise
            conn.exchange = None
            if conn.keep_alive and not conn.closed:
                conn.idle_since = time.monotonic()
                self._idle.append(conn)
            else:
                conn.close()
                self._all.discard(conn)
            return ex.status
        raise AssertionError("unreachable")

    async def close(self) -> None:
        for conn in list(self._all):
            conn.close()
        self._all.clear()
        self._idle.clear()
        await asyncio.sleep(0)  # let the transports run their connection_lost callbacks
