"""One HTTP client per test process for the suite's own reads of daemons, simulators and peers.

``httpx.get()`` and its siblings build a new ``Client`` per call, and with it an SSL context that
loads the CA bundle: about 25 ms of CPU a call here, against about 1.4 ms for a request on a kept
client. The suite polls (a daemon's ``/status.json`` every 0.2 s while it waits for a state, a
simulator's ``/health`` every 20 ms while it starts), so on the 2-core CI box those contexts were
a share of the CPU every other test waited for. Import as ``from support.loopback import HTTP``.

Keep-alive is off: every request opens a new connection, as ``httpx.get()`` did, so a test of
a server's connection handling (auth lanes by address, a hostile client) sees what it saw
before. ``trust_env=False``: loopback reads never go through a proxy from the environment.
httpx's clients are safe to share between threads.
"""

from __future__ import annotations

import httpx

__all__ = ["HTTP"]

HTTP = httpx.Client(trust_env=False, timeout=5.0, limits=httpx.Limits(max_keepalive_connections=0))
