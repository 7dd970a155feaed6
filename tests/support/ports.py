"""Ports for the servers a test starts before it can ask them which port they took: free, and
outside the kernel's ephemeral range.

A port from ``bind(("127.0.0.1", 0))`` comes from the ephemeral range
(``net.ipv4.ip_local_port_range``), the pool every outgoing connection takes its local port from:
between a test choosing it and its server binding it, any of the suite's many client connections
could take it (seen: a simulator's control port "address already in use" for five seconds with
two suites on one box, and the daemon restarting its server three times). A port below that
range is never given to a connection; the race left is two tests choosing the same port at
once, about 1 in 20,000. (Servers that can bind port 0 themselves and report it should.)
"""

from __future__ import annotations

import functools
import random
import socket
from pathlib import Path

__all__ = ["free_port"]

# Above the well-known and registered services a box commonly runs (Prometheus 9090, node
# exporter 9100, ...) and below the ephemeral range.
_LOW = 10000
_RANDOM = random.SystemRandom()


@functools.cache  # (read once a process)
def _ephemeral_start() -> int:
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768  # Linux's default


def free_port() -> int:
    """A loopback TCP port nothing is bound to now, below the ephemeral range."""
    high = _ephemeral_start()
    if high - _LOW >= 1000:
        for _ in range(100):
            port = _RANDOM.randrange(_LOW, high)
            with socket.socket() as s:
                try:
                    s.bind(("127.0.0.1", port))  # (no SO_REUSEADDR: a port in TIME_WAIT is skipped)
                except OSError:
                    continue
            return port
    with socket.socket() as s:  # a box with no room below its ephemeral range
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
