"""A lean HTTP/1.1 client for streamed responses: non-blocking sockets + httptools' C parser.

Why not aiohttp or httpx for the request path (numbers: `benchmarks/load_http_clients.py`,
`benchmarks/load_efficiency.py`): both hand every received HTTP chunk through several Python
layers (stream reader, flow control, a coroutine wake-up per read) before we see a byte; on an
SSE stream that is one chunk per token, and it was most of the client's CPU. Here the body
bytes of one socket read go straight from the read callback to the request's sink with one
timestamp. httptools (llhttp, the parser uvicorn uses) does the HTTP framing
(`sglang_sentinel.load.framing`); the steady state of a stream (one read = one whole chunk) is
unframed here by a few byte operations instead.
An aiohttp-based engine was built and measured against this one (same session, same
simulator): streamed tokens per client CPU-second vs bench_serving fell from 2.57x to 1.89x
(256/256) and from 4.29x to 2.66x (1024/1024), and the Poisson p99 schedule lag rose from about
2 ms to 3.4-6 ms, so this client stayed.

Timestamps. On Linux, plain-HTTP connections read with `recvmsg` and `SO_TIMESTAMPNS`: each
read carries the kernel's receive time of its last segment, so a token's time is when it
reached this host, not when our event loop got round to it. Under load the loop serves
hundreds of streams in turn, and a user-space stamp would add that queueing to TTFT and ITL
(`benchmarks/load_accuracy.py`, scenario ttft-256, measures what remains). TLS connections
(asyncio's transport: TLS records are not socket reads) and other platforms stamp in user
space when the read callback runs.

Reads. Kernel stamps make the moment we read irrelevant to the figures, which allows batching:
the stream sockets of one client sit in one epoll set. While reads arrive more often than
every `_POLL_S`, that set is polled on a timer, so the process wakes once per interval for all
ready streams instead of once per token (the wake-ups were about a third of the client's CPU:
`benchmarks/load_efficiency.py`); when a poll finds nothing it goes back to waking on
readiness, so a lone stream is read at once. Two events of one stream inside one interval share
a read and its stamp, as they would in any client that fell behind.

Scope, on purpose: one POST at a time per connection, keep-alive reuse (LIFO), plain TCP or
TLS, no proxies, no redirects, no compression (we ask for none). Anything the server does
outside that is an error for the request, never a hang: the caller wraps each request in its
own timeout.
"""

from __future__ import annotations

import asyncio
import select
import socket
import ssl
import time
from typing import Any, cast
from urllib.parse import urlsplit

from sglang_sentinel.kernelstamp import ANCBUF_SIZE, SO_TIMESTAMPNS, TIMESPEC
from sglang_sentinel.load.framing import BodySink, ConnectionLost, Exchange, ProtocolError, ResponseFraming

__all__ = ["KEEPALIVE_S", "BodySink", "ConnectError", "ConnectionLost", "HttpClient", "ProtocolError"]

_perf = time.perf_counter
_wall = time.time
_inf = float("inf")
_unpack_stamp = TIMESPEC.unpack_from

# SGLang's uvicorn closes idle keep-alive connections after 5 s; reusing one at that moment
# would lose the request, so ours are dropped a little earlier.
KEEPALIVE_S = 4.0

# Module-level, so that tests can take kernel stamps away.
_SO_TIMESTAMPNS = SO_TIMESTAMPNS
# The polling interval while reads are frequent (see Reads above): a token gap below it merges
# two events into one read; real deployments' gaps are tens of milliseconds.
_POLL_S = 0.001
# A response stamp this far before our own send time is no receive time of that response.
_STAMP_SLACK_S = 1.0
# One read's buffer: an SSE event of a long native stream (cumulative text and ids) is ~10 KB;
# larger buffers cost an allocation per read that is mostly thrown away.
_READ_SIZE = 65536


class ConnectError(OSError):
    """The connection could not be opened (refused, unreachable, DNS, TLS)."""


# perf_counter - time.time sampled this close together bound the error of the pair.
_OFFSET_TIGHT_S = 20e-6


def clock_offset() -> float:
    """time.time() - perf_counter(), erring so that a converted stamp is never early.

    The wall clock is read between two perf_counter reads: the true offset lies in
    [wall - after, wall - before]; `wall - after` is the smallest, so a kernel stamp moved onto
    the perf_counter line with it (stamp - offset) is late by at most after - before, never
    early. A preemption between the reads (CPU contention) widens that pair; up to three tries
    keep the tightest. Reading perf then wall once, as before, made stamps early by the whole
    preemption, which is how a TTFT shorter than the server's own could come out."""
    best_gap = _inf
    best = 0.0
    for _ in range(3):
        before = _perf()
        wall = _wall()
        after = _perf()
        gap = after - before
        if gap < best_gap:
            best_gap = gap
            best = wall - after
            if gap <= _OFFSET_TIGHT_S:
                break
    return best


class _StampFaults:
    """Kernel stamps one client could not use (counted across its connections)."""

    __slots__ = ("bad_stamps",)

    def __init__(self) -> None:
        self.bad_stamps = 0


class _SocketConnection(ResponseFraming):
    """Plain TCP on a non-blocking socket, read with kernel receive timestamps where available."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        poller: _Poller | None,
        faults: _StampFaults,
    ) -> None:
        super().__init__()
        self.loop = loop
        self.faults = faults
        self.sock = sock
        self._recvmsg = sock.recvmsg  # bound once: looked up per read otherwise
        self.fd = sock.fileno()
        self._unsent: memoryview | None = None
        self.stamped = False
        if _SO_TIMESTAMPNS:
            try:
                sock.setsockopt(socket.SOL_SOCKET, _SO_TIMESTAMPNS, 1)
                self.stamped = True
            except OSError:  # a kernel without it: user-space stamps
                pass
        # Batched reads only with kernel stamps: a user-space stamp taken up to a poll
        # interval late would be wrong by that much.
        self.poller = poller if self.stamped else None
        if self.poller is not None:
            self.poller.add(self)
        else:
            loop.add_reader(self.fd, self._readable)

    def _readable(self) -> None:
        try:
            if self.stamped:
                data, anc, _flags, _addr = self._recvmsg(_READ_SIZE, ANCBUF_SIZE)
            else:
                data, anc = self.sock.recv(_READ_SIZE), None
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        now = _perf()
        if not data:
            self._lost(None)
            return
        ex = self.exchange
        if anc:
            # The kernel's stamp moved onto perf_counter's time line through the clocks' offset
            # (a wall-clock step between the arrival and now could move it: it is kept between
            # our send and now).
            # `kernelstamp.stamp_age`, inlined: this runs once per token, and the general
            # decoder (any item order, integer nanoseconds) cost 2-3 % of the client's CPU per
            # token in same-run A/B runs. We ask for one option, so one item comes back.
            # The clock offset is the poller's, sampled once per drain (see clock_offset).
            sec, nsec = _unpack_stamp(anc[0][2])
            poller = self.poller
            stamp = (sec - (poller.offset if poller is not None else clock_offset())) + nsec * 1e-9
            if stamp < now:
                if ex is None or stamp >= ex.sent_at:
                    now = stamp
                elif stamp > ex.sent_at - _STAMP_SLACK_S:
                    now = ex.sent_at  # within the offset's error of our send: no earlier than it
                else:
                    # Not a receive time on the wall clock (older kernels left the sender's
                    # monotonic departure time on loopback packets): keep ours, and say so.
                    self.faults.bad_stamps += 1
        if ex is not None and self._boundary:
            # A stream's steady state: the read is whole chunks (`_plain_chunks`), mostly exactly
            # one, `<hex size>\r\n<data>\r\n`. llhttp stays in its between-chunks state when such
            # chunks are not fed to it; anything else goes to llhttp, which validates it.
            body = _plain_chunks(data)
            if body is not None:
                try:
                    ex.sink.on_data(body, now)
                except Exception as exc:  # the sink's verdict ends the request
                    ex.fail(exc)
                    self.close()
                return
        self._on_read(data, now)

    def send(self, request: bytes, ex: Exchange) -> None:
        ex.mark_sent()
        try:
            n = self.sock.send(request)
        except (BlockingIOError, InterruptedError):
            n = 0
        except OSError as exc:
            self._lost(exc)
            return
        if n == len(request):
            return
        # A body larger than the socket's send buffer: the rest goes when it drains.
        self._unsent = memoryview(request)[n:]
        self.loop.add_writer(self.fd, self._writable)

    def _writable(self) -> None:
        rest = self._unsent
        if rest is None:
            self.loop.remove_writer(self.fd)
            return
        try:
            n = self.sock.send(rest)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lost(exc)
            return
        if n < len(rest):
            self._unsent = rest[n:]
            return
        self._unsent = None
        self.loop.remove_writer(self.fd)

    def _lost(self, exc: Exception | None) -> None:
        self._on_eof(exc)
        self.close()

    def close(self) -> None:
        if self.fd < 0:
            self.closed = True
            return
        self.closed = True
        if self.poller is not None:
            self.poller.remove(self.fd)
        else:
            self.loop.remove_reader(self.fd)
        if self._unsent is not None:
            self.loop.remove_writer(self.fd)
            self._unsent = None
        self.fd = -1
        self.sock.close()


def _plain_chunks(data: bytes) -> bytes | None:
    """The data of a read that is one or more whole chunks, joined as `ResponseFraming._on_read`
    joins what llhttp hands it; None for anything else (the last chunk, a partial one, a size
    that is not plain: hex digits without a leading zero or an extension), which goes to llhttp
    whole. A read holds several chunks when events came faster than the polling interval;
    llhttp would call back three times per chunk."""
    pieces: list[bytes] | None = None
    pos, n = 0, len(data)
    while True:
        i = data.find(b"\r\n", pos, pos + 18)
        if i <= pos:
            return None
        size_hex = data[pos:i]
        if not size_hex.isalnum() or size_hex[0] == 48:  # int() would take "0x..", "_"
            return None
        try:
            size = int(size_hex, 16)
        except ValueError:
            return None
        end = i + size + 4
        if not size or end > n or data[end - 2 : end] != b"\r\n":
            return None
        piece = data[i + 2 : end - 2]
        if end == n:
            if pieces is None:
                return piece  # the common read: exactly one chunk
            pieces.append(piece)
            return b"".join(pieces)
        if pieces is None:
            pieces = [piece]
        else:
            pieces.append(piece)
        pos = end


class _Poller:
    """One client's stream sockets in one epoll set, read on readiness or on a timer (see Reads)."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self.epoll = select.epoll()
        self.fd = self.epoll.fileno()
        self.conns: dict[int, _SocketConnection] = {}
        self.timer: asyncio.TimerHandle | None = None
        self.last_ready = -1.0
        self.offset = clock_offset()
        loop.add_reader(self.fd, self._ready)

    def add(self, conn: _SocketConnection) -> None:
        self.epoll.register(conn.fd, select.EPOLLIN)
        self.conns[conn.fd] = conn

    def remove(self, fd: int) -> None:
        if self.conns.pop(fd, None) is not None:
            self.epoll.unregister(fd)

    def _drain(self) -> int:
        events = self.epoll.poll(0)
        if events:
            # Once per drain, not per read: three clock reads for all the reads that follow.
            self.offset = clock_offset()
        conns = self.conns
        for fd, _ in events:
            conn = conns.get(fd)
            if conn is None:
                continue
            try:
                conn._readable()
            except Exception as exc:  # a bug must cost one request, not stall every stream
                if conn.exchange is not None:
                    conn.exchange.fail(exc)
                conn.close()
        return len(events)

    def _ready(self) -> None:
        now = self.loop.time()
        self._drain()
        if now - self.last_ready < _POLL_S and self.timer is None:
            # Reads come faster than the interval: wake on the timer instead.
            self.loop.remove_reader(self.fd)
            self.timer = self.loop.call_at(now + _POLL_S, self._tick)
        self.last_ready = now

    def _tick(self) -> None:
        self.timer = None
        if self._drain() and self.conns:
            self.timer = self.loop.call_later(_POLL_S, self._tick)
        elif self.fd >= 0:
            self.loop.add_reader(self.fd, self._ready)

    def close(self) -> None:
        if self.fd < 0:
            return
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        else:
            self.loop.remove_reader(self.fd)
        for conn in list(self.conns.values()):
            conn.close()
        self.epoll.close()
        self.fd = -1


class _TransportConnection(ResponseFraming, asyncio.Protocol):
    """TLS (or a loop without add_reader) through an asyncio transport; user-space stamps."""

    def __init__(self) -> None:
        super().__init__()
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # Not an isinstance check: uvloop's transports do not subclass asyncio.Transport.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        self._on_read(data, _perf())

    def connection_lost(self, exc: Exception | None) -> None:
        self._on_eof(exc)

    def send(self, request: bytes, ex: Exchange) -> None:
        assert self.transport is not None
        ex.mark_sent()  # before the write, see Exchange.mark_sent
        self.transport.write(request)

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
        self._idle: list[ResponseFraming] = []
        self._all: set[ResponseFraming] = set()
        self._addrs: list[tuple[socket.AddressFamily, tuple[Any, ...]]] | None = None
        self._poller: _Poller | None = None
        self._unstamped = False  # a connection could not turn kernel stamps on
        self._faults = _StampFaults()

    @property
    def kernel_timestamps(self) -> bool:
        """Whether response times are the kernel's receive times (see the module docstring):
        plain HTTP on Linux, no connection whose kernel refused the option, and no stamp that
        could not be a receive time (then the reads concerned kept their user-space times)."""
        return (
            self.ssl is None and bool(_SO_TIMESTAMPNS) and not self._unstamped and not self._faults.bad_stamps
        )

    async def _connect(self) -> ResponseFraming:
        try:
            async with asyncio.timeout(self.connect_timeout):
                conn = await (self._open_tls() if self.ssl is not None else self._open_socket())
        except TimeoutError:
            raise ConnectError(f"connect timed out after {self.connect_timeout:g} s") from None
        except ConnectError:
            raise
        except OSError as exc:
            raise ConnectError(str(exc) or type(exc).__name__) from exc
        self._all.add(conn)
        return conn

    async def _open_tls(self) -> ResponseFraming:
        loop = asyncio.get_running_loop()
        _, conn = await loop.create_connection(
            _TransportConnection, self.host, self.port, ssl=self.ssl, server_hostname=self.host
        )
        return conn

    async def _open_socket(self) -> ResponseFraming:
        loop = asyncio.get_running_loop()
        if self._addrs is None:
            infos = await loop.getaddrinfo(self.host, self.port, type=socket.SOCK_STREAM)
            self._addrs = [(family, addr) for family, _, _, _, addr in infos]
        error: OSError | None = None
        for family, addr in self._addrs:
            sock = socket.socket(family, socket.SOCK_STREAM)
            try:
                sock.setblocking(False)
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                await loop.sock_connect(sock, addr)
            except OSError as exc:
                sock.close()
                error = exc
                continue
            except BaseException:
                sock.close()
                raise
            if self._poller is None and _SO_TIMESTAMPNS and hasattr(select, "epoll"):
                self._poller = _Poller(loop)
            conn = _SocketConnection(loop, sock, self._poller, self._faults)
            self._unstamped = self._unstamped or not conn.stamped
            return conn
        raise ConnectError(str(error) if error else f"no address for {self.host}")

    def _take_idle(self) -> ResponseFraming | None:
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

    async def post(self, path: str, body: bytes, sink: BodySink, headers: bytes = b"") -> int:
        """Send one POST and deliver its response to `sink`; returns the HTTP status.

        Raises ConnectError, ConnectionLost, ProtocolError, or whatever the sink raised. A
        reused connection that the server had already closed (no byte of response) is retried
        once on a fresh one: the request never reached the server. `headers`: this request's
        own header lines (``b"Name: value\\r\\n"`` each), after the client's."""
        request = (
            b"POST " + (self.prefix + path).encode("latin-1") + b" HTTP/1.1\r\n" + self._head + headers
            + b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )  # fmt: skip
        for attempt in range(2):
            conn = self._take_idle()
            reused = conn is not None
            if conn is None:
                conn = await self._connect()
            ex = Exchange(sink, asyncio.get_running_loop().create_future())
            conn.exchange = ex
            conn.send(request, ex)
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
        if self._poller is not None:
            self._poller.close()
            self._poller = None
        await asyncio.sleep(0)  # let the transports run their connection_lost callbacks
