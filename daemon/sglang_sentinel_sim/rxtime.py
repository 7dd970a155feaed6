"""When a request's bytes really reached the simulator: the kernel's receive timestamp.

The simulator is one asyncio loop. When many requests arrive at once (256 closed-loop streams
that all finish in the same engine step send 256 new requests together) it takes tens of
milliseconds to reach each one's handler, and a stamp taken at handler entry hides that queueing
from the ground truth -- it then shows up as "client-added TTFT" although it happened inside the
server. The kernel stamps every received packet (``SO_TIMESTAMPNS``), and ``recvmsg`` hands the
receive time of the last packet a read consumed back as ancillary data, however late the loop
gets round to the read.

How it is wired: the API's listening socket is a :class:`StampingListener`; its ``accept()``
returns :class:`StampedConnection` sockets, whose ``recv``/``recv_into`` (what asyncio's
selector transport calls) go through ``recvmsg`` and remember the receive time of the last read.
:func:`receive_time` finds that time from the socket a transport reports
(``transport.get_extra_info("socket")``) through a registry keyed by file descriptor, so no
private attribute of asyncio or aiohttp is needed.

Limits, stated where they bite: the time is that of the *last* packet of the last read before
the handler ran, so a request split over several reads is stamped at the headers' read when the
body comes later (aiohttp starts the handler on the headers) and at the body's when both were
already waiting; a pipelined request read in the same chunk as the one before it shares that
chunk's stamp. ``SIOCGSTAMPNS`` (the ioctl) answers ENOENT on TCP sockets, hence ``recvmsg``.
Where the option is missing (not Linux) or refused, the sockets are plain ones, and an event loop
that reads sockets itself (uvloop) never calls these methods: :func:`receive_time` then answers
``None`` and callers fall back to their own clock and say so.
"""

from __future__ import annotations

import socket
import time
import weakref
from typing import TYPE_CHECKING, Any, Final, Protocol

from sglang_sentinel.kernelstamp import ANCBUF_SIZE, SO_TIMESTAMPNS, stamp_age

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = [
    "SO_TIMESTAMPNS",
    "StampedConnection",
    "StampingListener",
    "listening_socket",
    "receive_time",
]

# A stamp this far in the past is not queueing but a clock of another kind (older kernels left
# the sender's monotonic departure time on loopback packets); such a stamp is ignored.
_MAX_AGE_S: Final = 3600.0


class _HasFileno(Protocol):
    def fileno(self) -> int: ...


def _monotonic_stamp(ancdata: list[tuple[int, int, bytes]]) -> float | None:
    """The kernel receive time in ``ancdata`` as a ``time.monotonic()`` value (never after now)."""
    age = stamp_age(ancdata)
    if age is None or age > _MAX_AGE_S:
        return None
    # The engine runs on CLOCK_MONOTONIC.
    return time.monotonic() - max(age, 0.0)


# Live stamped connections by file descriptor: how a handler that only sees asyncio's
# TransportSocket finds its connection's receive time. Weak values: a connection dropped without
# close() leaves no entry behind.
_live: weakref.WeakValueDictionary[int, StampedConnection] = weakref.WeakValueDictionary()


class StampedConnection(socket.socket):
    """An accepted connection that remembers the kernel receive time of its last read."""

    __slots__ = ("rx_time",)

    def __init__(self, family: int, type: int, proto: int, fileno: int) -> None:
        super().__init__(family, type, proto, fileno)
        # time.monotonic() of the last packet the last read consumed; None when that read
        # carried no stamp (so an earlier request's stamp is never reused).
        self.rx_time: float | None = None
        _live[fileno] = self

    def recv(self, bufsize: int, flags: int = 0, /) -> bytes:
        data, ancdata, _, _ = self.recvmsg(bufsize, ANCBUF_SIZE, flags)
        self.rx_time = _monotonic_stamp(ancdata)
        return data

    def recv_into(self, buffer: WriteableBuffer, nbytes: int = 0, flags: int = 0, /) -> int:
        view = memoryview(buffer).cast("B")
        nread, ancdata, _, _ = self.recvmsg_into([view[:nbytes] if nbytes else view], ANCBUF_SIZE, flags)
        self.rx_time = _monotonic_stamp(ancdata)
        return nread

    def _forget(self) -> None:
        fd = self.fileno()
        if fd >= 0 and _live.get(fd) is self:
            del _live[fd]

    def close(self) -> None:
        self._forget()
        super().close()

    def detach(self) -> int:
        self._forget()
        return super().detach()


class StampingListener(socket.socket):
    """A listening socket whose accepted connections are :class:`StampedConnection` sockets."""

    __slots__ = ()

    def accept(self) -> tuple[socket.socket, Any]:
        conn, addr = super().accept()  # CPython's own handling of blocking mode and flags
        if SO_TIMESTAMPNS is None:
            return conn, addr
        try:
            # Inherited from the listener on Linux; set again so that a platform that does not
            # inherit it still stamps, and one that refuses it still serves (unstamped).
            conn.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        except OSError:
            return conn, addr
        timeout = conn.gettimeout()
        stamped = StampedConnection(conn.family, conn.type, conn.proto, conn.detach())
        stamped.settimeout(timeout)
        return stamped, addr


def listening_socket(family: int, type: int, proto: int) -> socket.socket:
    """A new, unbound socket for a server: stamping where the platform supports it, else plain.

    The option is set on the listener too: Linux then timestamps every received packet from the
    start (a request sent right after connect() lands before accept() and is still stamped), and
    accepted connections inherit it.
    """
    if SO_TIMESTAMPNS is None or ANCBUF_SIZE == 0:
        return socket.socket(family, type, proto)
    sock = StampingListener(family, type, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
    except OSError:
        return socket.socket(family, type, proto, sock.detach())
    return sock


def receive_time(sock: _HasFileno | None) -> float | None:
    """Kernel receive time (``time.monotonic()``) of the last read on the connection ``sock``
    (a socket, or asyncio's TransportSocket for it); ``None`` when it is not known."""
    if sock is None:
        return None
    try:
        fd = sock.fileno()
    except OSError:
        return None
    conn = _live.get(fd)
    return None if conn is None else conn.rx_time
