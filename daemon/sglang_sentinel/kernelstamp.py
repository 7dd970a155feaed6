"""Kernel receive timestamps on TCP sockets (Linux ``SO_TIMESTAMPNS``): the one decoder.

Both ends of a measurement use them: the load client (`sglang_sentinel.load.transport`: a token's time
is when it reached this host, not when the event loop read it) and the simulator
(`sglang_sentinel_sim.rxtime`: a request's arrival is when it reached the server's socket). With the
option on, ``recvmsg`` returns the receive time of the last packet the read consumed as
ancillary data. ``SIOCGSTAMPNS`` (the ioctl) answers ENOENT on TCP sockets, hence ``recvmsg``.
"""

from __future__ import annotations

import socket
import struct
import sys
import time
from typing import Final

__all__ = ["ANCBUF_SIZE", "SO_TIMESTAMPNS", "TIMESPEC", "stamp_age"]

# Python 3.11's socket module lacks the constant; 35 is its value on every Linux architecture
# (SO_TIMESTAMPNS_OLD, a ``struct timespec`` of two native longs).
SO_TIMESTAMPNS: Final[int | None] = getattr(
    socket, "SO_TIMESTAMPNS", 35 if sys.platform.startswith("linux") else None
)
TIMESPEC: Final = struct.Struct("@ll")  # the stamp: struct timespec
# The ancillary buffer for one stamp (0 where the platform has no CMSG_SPACE).
ANCBUF_SIZE: Final = socket.CMSG_SPACE(TIMESPEC.size) if hasattr(socket, "CMSG_SPACE") else 0
_wall_ns = time.time_ns


def stamp_age(ancdata: list[tuple[int, int, bytes]]) -> float | None:
    """Seconds since the kernel received the last packet a read consumed (``recvmsg``'s
    ancillary data), read now; None when the read carried no stamp.

    The stamp is CLOCK_REALTIME; callers subtract the age from their own clock's now, which
    keeps the offset between the two clocks current. Integer nanoseconds until the end: a float
    of Unix seconds has only ~0.2 microsecond resolution."""
    for level, kind, data in ancdata:
        if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS and len(data) == TIMESPEC.size:
            sec: int
            nsec: int
            sec, nsec = TIMESPEC.unpack(data)
            return (_wall_ns() - (sec * 1_000_000_000 + nsec)) * 1e-9
    return None
