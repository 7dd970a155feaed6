"""The streaming client's read path: kernel receive stamps, batched reads, the unframed fast path.

The servers here are plain threads with blocking sockets, so they keep writing while the test
deliberately blocks the client's event loop.
"""

from __future__ import annotations

import asyncio
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from sglang_sentinel.load import transport
from sglang_sentinel.load.transport import HttpClient, ProtocolError
from support.rawhttp import CHUNKED_HEAD, Sink, chunk

pytestmark = pytest.mark.asyncio

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="SO_TIMESTAMPNS is Linux's")


class ThreadServer:
    """Accepts connections; each runs `script(conn)` in its own thread after reading the request."""

    def __init__(self, script: Callable[[socket.socket], None]) -> None:
        self.script = script
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.stop = threading.Event()
        self.errors: list[BaseException] = []
        self.threads: list[threading.Thread] = []
        self.acceptor = threading.Thread(target=self._accept, daemon=True)
        self.acceptor.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.sock.getsockname()[1]}"

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=self._serve, args=(conn,), daemon=True)
            self.threads.append(t)
            t.start()

    def _serve(self, conn: socket.socket) -> None:
        conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            buf = b""
            while b"\r\n\r\n" not in buf:
                data = conn.recv(65536)
                if not data:
                    return
                buf += data
            self.script(conn)
        except OSError:
            pass
        except BaseException as exc:  # surfaced by the test
            self.errors.append(exc)
        finally:
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.sock.close()
        self.acceptor.join(5)
        for t in self.threads:
            t.join(5)


@pytest.fixture
def thread_server() -> Iterator[Callable[[Callable[[socket.socket], None]], ThreadServer]]:
    servers: list[ThreadServer] = []

    def start(script: Callable[[socket.socket], None]) -> ThreadServer:
        srv = ThreadServer(script)
        servers.append(srv)
        return srv

    yield start
    for srv in servers:
        srv.close()
    for srv in servers:
        assert not srv.errors, srv.errors


async def _stamp_of_a_chunk_sent_while_the_loop_was_blocked(
    thread_server: Callable[[Callable[[socket.socket], None]], ThreadServer],
) -> tuple[float, bool]:
    """(our time of the second chunk - when the server sent it, client.kernel_timestamps).

    The client's loop is blocked for 0.3 s (inside the first chunk's callback) while the server
    sends the second chunk."""
    go = threading.Event()
    got_second = threading.Event()
    sent_at: list[float] = []

    def script(conn: socket.socket) -> None:
        conn.sendall(CHUNKED_HEAD + chunk(b"data: 1\n\n"))
        assert go.wait(5)
        time.sleep(0.05)
        sent_at.append(time.perf_counter())
        conn.sendall(chunk(b"data: 2\n\n"))
        # The end only once chunk 2 was read: a read holding both would carry the end's stamp.
        assert got_second.wait(5)
        conn.sendall(b"0\r\n\r\n")

    srv = thread_server(script)
    client = HttpClient(srv.url, {})
    sink = Sink()

    def block_once(data: bytes) -> None:
        if data == b"data: 1\n\n":
            go.set()
            time.sleep(0.3)  # the loop is busy elsewhere (hundreds of other streams, say)
        else:
            got_second.set()

    sink.on_read = block_once
    try:
        async with asyncio.timeout(10):
            assert await client.post("/generate", b"{}", sink) == 200
        stamped = client.kernel_timestamps
    finally:
        await client.close()
    assert sink.data == b"data: 1\n\ndata: 2\n\n"
    second = next(now for data, now in sink.reads if data == b"data: 2\n\n")
    return second - sent_at[0], stamped


@linux_only
async def test_a_chunk_is_stamped_when_it_arrived_not_when_the_busy_loop_read_it(
    thread_server: Callable[[Callable[[socket.socket], None]], ThreadServer],
) -> None:
    delay, stamped = await _stamp_of_a_chunk_sent_while_the_loop_was_blocked(thread_server)
    assert stamped
    assert -0.005 < delay < 0.05, f"stamped {delay * 1e3:.1f} ms after the server sent it"


async def test_without_kernel_stamps_the_loop_delay_shows_and_is_reported(
    thread_server: Callable[[Callable[[socket.socket], None]], ThreadServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The same exchange with the option unavailable: the stamp is the read's, 0.2+ s late, and
    # the client says so (RunResult.timestamps = "user"). This is what the first test guards.
    monkeypatch.setattr(transport, "_SO_TIMESTAMPNS", 0)
    delay, stamped = await _stamp_of_a_chunk_sent_while_the_loop_was_blocked(thread_server)
    assert not stamped
    assert delay > 0.15


@linux_only
async def test_a_kernel_that_refuses_the_option_falls_back_to_user_stamps(
    thread_server: Callable[[Callable[[socket.socket], None]], ThreadServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(transport, "_SO_TIMESTAMPNS", 0x7FFF)  # no such option: setsockopt fails

    def script(conn: socket.socket) -> None:
        conn.sendall(CHUNKED_HEAD + chunk(b"data: 1\n\n") + b"0\r\n\r\n")

    srv = thread_server(script)
    client = HttpClient(srv.url, {})
    sink = Sink()
    try:
        async with asyncio.timeout(10):
            assert await client.post("/generate", b"{}", sink) == 200
        assert not client.kernel_timestamps
    finally:
        await client.close()
    assert sink.data == b"data: 1\n\n"


async def test_chunk_framing_variants_read_one_by_one(
    thread_server: Callable[[Callable[[socket.socket], None]], ThreadServer],
) -> None:
    # Each piece is its own read (a pause between writes). After the first chunk the client
    # unframes plain chunks itself; every other form must still come out exactly.
    pieces = [
        CHUNKED_HEAD,
        chunk(b"data: a\n\n"),  # llhttp: first chunk after the head
        chunk(b"data: b\n\n"),  # fast path
        b"1A\r\n" + b"data: " + b"c" * 18 + b"\n\n\r\n",  # upper-case size: llhttp
        b"001a\r\n" + b"data: " + b"d" * 18 + b"\n\n\r\n",  # leading zeros: llhttp
        b"9;ext=1\r\ndata: e\n\n\r\n",  # chunk extension: llhttp
        chunk(b"data: f\n\n") + chunk(b"data: g\n\n"),  # two chunks in one read
        b"9\r\ndata",  # a chunk split over two reads
        b": h\n\n\r\n",
        chunk(b"data: i\n\n"),  # back on the fast path
        chunk(b"data: j\n\n") + chunk(b"data: k\n\n") + chunk(b"data: l\n\n"),  # unframed here
        chunk(b"data: m\n\n") + b"1A\r\n" + b"data: " + b"n" * 18 + b"\n\n\r\n",  # mixed: llhttp
        chunk(b"data: o\n\n") + b"9\r\ndata",  # whole chunk + a partial one: llhttp
        b": p\n\n\r\n",
        chunk(b"data: q\n\n") + b"0\r\n\r\n",  # the last chunk with the end: llhttp
    ]

    def script(conn: socket.socket) -> None:
        for piece in pieces:
            conn.sendall(piece)
            time.sleep(0.02)

    srv = thread_server(script)
    client = HttpClient(srv.url, {})
    sink = Sink()
    try:
        async with asyncio.timeout(10):
            assert await client.post("/generate", b"{}", sink) == 200
    finally:
        await client.close()
    want = b"".join(
        [b"data: a\n\n", b"data: b\n\n", b"data: " + b"c" * 18 + b"\n\n", b"data: " + b"d" * 18 + b"\n\n"]
        + [b"data: %s\n\n" % c for c in (b"e", b"f", b"g", b"h", b"i", b"j", b"k", b"l", b"m")]
        + [b"data: " + b"n" * 18 + b"\n\n"]
        + [b"data: %s\n\n" % c for c in (b"o", b"p", b"q")]
    )
    assert sink.data == want


@pytest.mark.parametrize("after_a_chunk", [False, True], ids=["alone", "after-a-chunk"])
@pytest.mark.parametrize("bad_size", [b"zz", b"0x9", b"+9", b"9_0", b" 9"])
async def test_a_malformed_chunk_size_in_the_steady_state_is_a_protocol_error(
    thread_server: Callable[[Callable[[socket.socket], None]], ThreadServer],
    bad_size: bytes,
    after_a_chunk: bool,
) -> None:
    # int(x, 16) would take several of these; the fast path must leave them to llhttp, also
    # when a whole chunk precedes the bad one in the read (nothing of that read is delivered).
    def script(conn: socket.socket) -> None:
        conn.sendall(CHUNKED_HEAD + chunk(b"data: a\n\n"))
        time.sleep(0.02)
        conn.sendall(chunk(b"data: b\n\n"))
        time.sleep(0.02)
        conn.sendall((chunk(b"data: x\n\n") if after_a_chunk else b"") + bad_size + b"\r\ndata: c\n\n\r\n")
        time.sleep(0.5)

    srv = thread_server(script)
    client = HttpClient(srv.url, {})
    sink = Sink()
    try:
        async with asyncio.timeout(10):
            with pytest.raises(ProtocolError):
                await client.post("/generate", b"{}", sink)
    finally:
        await client.close()
    assert sink.data == b"data: a\n\ndata: b\n\n"


@linux_only
async def test_frequent_reads_switch_to_timer_polling_and_back(
    thread_server: Callable[[Callable[[socket.socket], None]], ThreadServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # 8 streams of 300 chunks 0.2 ms apart: reads come faster than the poll interval, so the
    # client polls on its timer; every byte still arrives in order. Then a lone stream, read on
    # readiness again, is read at once.
    ticks: list[int] = []
    orig_tick = transport._Poller._tick

    def counting_tick(self: transport._Poller) -> None:
        ticks.append(len(self.conns))
        orig_tick(self)

    monkeypatch.setattr(transport._Poller, "_tick", counting_tick)
    n_chunks = 300

    def fast(conn: socket.socket) -> None:
        conn.sendall(CHUNKED_HEAD)
        for i in range(n_chunks):
            conn.sendall(chunk(b"data: %d\n\n" % i))
            time.sleep(0.0002)
        conn.sendall(b"0\r\n\r\n")

    srv = thread_server(fast)
    client = HttpClient(srv.url, {})
    try:
        sinks = [Sink() for _ in range(8)]
        async with asyncio.timeout(30):
            statuses = await asyncio.gather(*(client.post("/generate", b"{}", s) for s in sinks))
        assert statuses == [200] * 8
        want = b"".join(b"data: %d\n\n" % i for i in range(n_chunks))
        assert all(s.data == want for s in sinks)
        assert ticks, "the poller never switched to its timer"
        poller = client._poller
        assert poller is not None
        await asyncio.sleep(0.05)
        assert poller.timer is None  # idle: back to waking on readiness
    finally:
        await client.close()
    assert client._poller is None


@linux_only
async def test_a_stamp_that_cannot_be_a_receive_time_is_not_used(
    thread_server: Callable[[Callable[[socket.socket], None]], ThreadServer],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Stamps that read as older than our own send (older kernels put the sender's monotonic
    # departure time on loopback packets; here: the wall clock seen as 10 s ahead) are not
    # receive times: the read keeps its user-space time and the client stops claiming kernel stamps.
    real_wall = time.time
    monkeypatch.setattr(transport, "_wall", lambda: real_wall() + 10.0)
    delay, stamped = await _stamp_of_a_chunk_sent_while_the_loop_was_blocked(thread_server)
    assert not stamped
    assert delay > 0.15
