"""The ground truth's arrival: the kernel's receive time of a request, not when its handler ran."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import sys
import time
from collections.abc import Iterator

import pytest

from sglang_sentinel_sim import SimServer, rxtime, serve

pytestmark = pytest.mark.skipif(sys.platform != "linux", reason="kernel receive timestamps are Linux's")

_BODY = json.dumps({"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}})
_REQUEST = (
    f"POST /generate HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
    f"Content-Length: {len(_BODY)}\r\n\r\n{_BODY}"
).encode()


@contextlib.contextmanager
def _connection(sim: SimServer) -> Iterator[socket.socket]:
    """A plain blocking client socket: it sends at once, whatever the simulator's loop is doing."""
    with socket.create_connection(("127.0.0.1", sim.port), timeout=10) as sock:
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        yield sock


def _read_response(sock: socket.socket) -> dict[str, object]:
    """One HTTP/1.1 response with a Content-Length body (blocking; run in a thread)."""
    buf = b""
    while b"\r\n\r\n" not in buf:
        chunk = sock.recv(65536)
        assert chunk, "connection closed before the response headers"
        buf += chunk
    head, _, body = buf.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    length = next(
        int(line.split(b":", 1)[1])
        for line in head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    while len(body) < length:
        chunk = sock.recv(65536)
        assert chunk, "connection closed inside the response body"
        body += chunk
    reply: dict[str, object] = json.loads(body[:length])
    return reply


async def _send_while_blocked(sock: socket.socket, hold_s: float) -> tuple[float, dict[str, object]]:
    """Send a request while this (the simulator's) loop is held up ``hold_s``; its reply."""
    sent = time.time()
    sock.sendall(_REQUEST)
    time.sleep(hold_s)  # noqa: ASYNC251 -- on purpose: the simulator is too busy to reach the handler
    return sent, await asyncio.wait_for(asyncio.to_thread(_read_response, sock), 10)


async def test_arrival_is_the_kernel_receive_time_before_the_handler() -> None:
    async with serve(speed=200, enable_metrics=True) as sim:
        with _connection(sim) as sock:
            sent = time.time()
            sock.sendall(_REQUEST)
            reply = await asyncio.wait_for(asyncio.to_thread(_read_response, sock), 10)
            done = time.time()
    (rec,) = sim.truth.records()
    assert rec.arrival_source == "kernel"
    assert sent - 0.005 <= rec.arrival_time <= rec.handler_time <= done
    assert rec.handler_wait_s >= 0.0
    # SGLang's own figures still start at handler entry (its created_time).
    meta = reply["meta_info"]
    assert isinstance(meta, dict)
    assert meta["request_received_ts"] == pytest.approx(rec.handler_time, abs=1e-6)


async def test_a_blocked_simulator_loop_moves_the_handler_time_but_not_the_arrival() -> None:
    async with serve(speed=200, enable_metrics=True) as sim:
        with _connection(sim) as sock:
            sent, _ = await _send_while_blocked(sock, 0.3)
    (rec,) = sim.truth.records()
    summary = sim.truth.summary()
    assert rec.arrival_source == "kernel"
    # The bytes reached the socket at once; the handler only 300 ms later.
    assert sent - 0.005 <= rec.arrival_time <= sent + 0.1
    assert rec.handler_time >= sent + 0.3
    assert rec.handler_wait_s >= 0.25
    # The truth's TTFT is the server's as its socket sees it: the wait counts.
    assert rec.ttft_s is not None
    assert rec.ttft_s >= 0.3
    assert summary["kernel_arrivals"] == 1
    assert summary["mean_handler_wait_s"] >= 0.25


async def test_each_request_on_a_keep_alive_connection_gets_its_own_stamp() -> None:
    async with serve(speed=200) as sim:
        with _connection(sim) as sock:
            sock.sendall(_REQUEST)
            await asyncio.wait_for(asyncio.to_thread(_read_response, sock), 10)
            await asyncio.sleep(0.2)
            # The second request waits 300 ms for its handler: a stale stamp (the connection's first
            # read) would be 200 ms too early, a handler stamp 300 ms too late.
            sent, _ = await _send_while_blocked(sock, 0.3)
    first, second = sim.truth.records()
    assert first.arrival_source == second.arrival_source == "kernel"
    assert second.arrival_time >= first.arrival_time + 0.2
    assert sent - 0.005 <= second.arrival_time <= sent + 0.1
    assert second.handler_time >= sent + 0.3


@pytest.mark.parametrize("option", [None, 0x7FFF], ids=["platform-lacks-it", "kernel-refuses-it"])
async def test_without_timestamps_arrival_falls_back_to_handler_entry(
    monkeypatch: pytest.MonkeyPatch, option: int | None
) -> None:
    monkeypatch.setattr(rxtime, "SO_TIMESTAMPNS", option)
    with rxtime.listening_socket(socket.AF_INET, socket.SOCK_STREAM, 0) as plain:
        assert type(plain) is socket.socket
    async with serve(speed=200) as sim:
        with _connection(sim) as sock:
            sent, _ = await _send_while_blocked(sock, 0.2)
    (rec,) = sim.truth.records()
    assert rec.arrival_source == "handler"
    assert rec.arrival_time == rec.handler_time
    assert rec.arrival_time >= sent + 0.2


# ---- the socket layer ----------------------------------------------------------------------------


def _stamped_pair() -> tuple[socket.socket, socket.socket, socket.socket]:
    listener = rxtime.listening_socket(socket.AF_INET, socket.SOCK_STREAM, 0)
    listener.bind(("127.0.0.1", 0))
    listener.listen()
    # Linux turns packet timestamping on with deferred work once the first socket asks for it
    # (and off when the last one closes): packets in that window carry no stamp. Wait until a
    # probe connection sees one; the listener keeps it on for the real pair.
    deadline = time.monotonic() + 5
    while True:
        probe = socket.create_connection(listener.getsockname(), timeout=5)
        probe_conn, _ = listener.accept()
        try:
            probe.sendall(b".")
            probe_conn.settimeout(5)
            probe_conn.recv(1)
            if rxtime.receive_time(probe_conn) is not None or time.monotonic() > deadline:
                break
        finally:
            probe.close()
            probe_conn.close()
        time.sleep(0.01)
    client = socket.create_connection(listener.getsockname(), timeout=5)
    conn, _ = listener.accept()
    conn.settimeout(5)
    return listener, client, conn


def test_accepted_connections_stamp_every_read_including_recv_into() -> None:
    listener, client, conn = _stamped_pair()
    try:
        assert isinstance(listener, rxtime.StampingListener)
        assert isinstance(conn, rxtime.StampedConnection)
        assert rxtime.receive_time(conn) is None  # nothing read yet
        client.sendall(b"first")
        time.sleep(0.05)
        before = time.monotonic()
        assert conn.recv(64) == b"first"
        first = rxtime.receive_time(conn)
        assert first is not None
        # Stamped when it was sent (at least the 50 ms sleep before the read), not when read.
        assert before - 1.0 <= first <= before - 0.049
        client.sendall(b"second")
        time.sleep(0.01)
        buf = bytearray(64)
        assert conn.recv_into(buf, 3) == 3
        assert bytes(buf[:3]) == b"sec"
        second = rxtime.receive_time(conn)
        assert second is not None
        assert second > first + 0.04
        assert second <= time.monotonic()
        # A read without a stamp (option turned off) forgets the last one instead of reusing it.
        assert rxtime.SO_TIMESTAMPNS is not None
        conn.setsockopt(socket.SOL_SOCKET, rxtime.SO_TIMESTAMPNS, 0)
        assert conn.recv(64) == b"ond"
        assert rxtime.receive_time(conn) is None
    finally:
        for s in (conn, client, listener):
            s.close()


def test_a_closed_connection_leaves_no_stamp_behind() -> None:
    listener, client, conn = _stamped_pair()
    try:
        client.sendall(b"x")
        conn.recv(64)
        fd = conn.fileno()

        class Wrapper:  # what asyncio hands out: something with fileno()
            def fileno(self) -> int:
                return fd

        assert rxtime.receive_time(Wrapper()) is not None
        conn.close()
        assert rxtime.receive_time(Wrapper()) is None
        assert rxtime.receive_time(conn) is None  # fileno() is -1 now
        assert rxtime.receive_time(None) is None
    finally:
        for s in (client, listener):
            s.close()


def _timespec_ancdata(realtime_ns: int) -> list[tuple[int, int, bytes]]:
    assert rxtime.SO_TIMESTAMPNS is not None
    sec, nsec = divmod(realtime_ns, 1_000_000_000)
    return [(socket.SOL_SOCKET, rxtime.SO_TIMESTAMPNS, struct.pack("@ll", sec, nsec))]


def test_implausible_stamps_are_clamped_or_ignored() -> None:
    stamp = rxtime._monotonic_stamp
    now = time.monotonic()
    # From the future (a clock step between kernel and us): never after now.
    future = stamp(_timespec_ancdata(time.time_ns() + 5_000_000_000))
    assert future is not None
    assert now <= future <= time.monotonic()
    # Hours old: not queueing but a clock of another kind -- unknown.
    assert stamp(_timespec_ancdata(time.time_ns() - 7200 * 1_000_000_000)) is None
    assert stamp([]) is None
    assert stamp([(socket.SOL_SOCKET, 1, b"\0" * 16)]) is None
    half_second = stamp(_timespec_ancdata(time.time_ns() - 500_000_000))
    assert half_second is not None
    assert time.monotonic() - 0.6 <= half_second <= time.monotonic() - 0.5
