"""The simulator's stand-in for torch.distributed's rendezvous between the nodes of one group.

Real SGLang with ``--nnodes N`` calls ``torch.distributed.init_process_group`` with
``tcp://<--dist-init-addr>``: rank 0 hosts the TCPStore there, ranks ≥ 1 connect to it, and
nothing serves until all N ranks have joined; afterwards NCCL carries the collectives. This is
**not** that protocol — one line of our own over TCP, enough to model what a supervisor can see:

- rank 0 listens on the dist-init port and waits until ranks 1..N-1 have each sent
  ``sentinel-sim-rendezvous rank=K nnodes=N`` (answered ``ok``); each connection then stays open;
- a rank ≥ 1 retries connecting until the timeout, then fails with torch's client-socket text;
- a closed connection is a dead peer. Real NCCL notices a dead peer only when a collective times
  out (``Watchdog caught collective operation timeout``, ProcessGroupNCCL) and the scheduler then
  dies, taking the tree down: the simulator waits ``peer_timeout`` server seconds and reports the
  same line (the supervisor classifies it as ``nccl_timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable

__all__ = ["HELLO", "RendezvousHost", "join", "nccl_timeout_line", "parse_dist_init_addr"]

HELLO = "sentinel-sim-rendezvous"
# torch's ProcessGroupNCCL default (10 min); SGLang passes --dist-timeout when given.
DEFAULT_TIMEOUT_S = 600.0


def parse_dist_init_addr(addr: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` too) -> (host, port); ValueError naming the flag."""
    host, sep, port = addr.rpartition(":")
    host = host.strip("[]")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"--dist-init-addr must be HOST:PORT, got {addr!r}")
    return host, int(port)


def nccl_timeout_line(rank: int, timeout_s: float) -> str:
    """ProcessGroupNCCL's watchdog text for a collective that a dead peer never completed."""
    ms = int(timeout_s * 1000)
    return (
        f"[rank{rank}]:[E ProcessGroupNCCL.cpp:616] [Rank {rank}] Watchdog caught collective operation "
        f"timeout: WorkNCCL(SeqNum=1, OpType=ALLREDUCE, NumelIn=1, NumelOut=1, Timeout(ms)={ms}) "
        f"ran for {ms + 3} milliseconds before timing out."
    )


class RendezvousHost:
    """Rank 0's side: listen, count the ranks that joined, report a peer whose connection closed."""

    def __init__(self, host: str, port: int, nnodes: int, on_peer_lost: Callable[[int], None]) -> None:
        self.host, self.port, self.nnodes = host, port, nnodes
        self._on_peer_lost = on_peer_lost
        self.joined: set[int] = set()
        self._all = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._writers: list[asyncio.StreamWriter] = []

    async def start(self) -> None:
        self._server = await asyncio.start_server(self._client, self.host, self.port, reuse_address=True)
        if self.nnodes <= 1:
            self._all.set()

    async def wait_all(self, timeout_s: float) -> bool:
        """True once every rank joined; False after ``timeout_s`` real seconds."""
        try:
            async with asyncio.timeout(timeout_s):
                await self._all.wait()
        except TimeoutError:
            return False
        return True

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            self._server = None
        for w in self._writers:
            w.close()
        self._writers.clear()

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        rank = None
        try:
            line = (await asyncio.wait_for(reader.readline(), 10.0)).decode("ascii", "replace").split()
            fields = dict(f.split("=", 1) for f in line[1:] if "=" in f)
            rank = int(fields.get("rank", "-1"))
            if line[:1] != [HELLO] or not 0 < rank < self.nnodes or rank in self.joined:
                rank = None
                return
            if int(fields.get("nnodes", "0")) != self.nnodes:
                rank = None
                return
            self.joined.add(rank)
            self._writers.append(writer)
            writer.write(b"ok\n")
            await writer.drain()
            if len(self.joined) == self.nnodes - 1:
                self._all.set()
            await reader.read()  # until the peer's side closes: that rank is gone
        except (OSError, ValueError, IndexError, TimeoutError):
            pass
        finally:
            writer.close()
            if rank is not None and rank in self.joined:
                self.joined.discard(rank)
                self._on_peer_lost(rank)


async def join(
    host: str, port: int, rank: int, nnodes: int, timeout_s: float
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
    """A rank ≥ 1's side: connect (retrying) and say hello; None after ``timeout_s`` real seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    while loop.time() < deadline:
        with contextlib.suppress(OSError, TimeoutError, asyncio.IncompleteReadError):
            reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), 2.0)
            writer.write(f"{HELLO} rank={rank} nnodes={nnodes}\n".encode())
            await writer.drain()
            if (await asyncio.wait_for(reader.readline(), 5.0)).strip() == b"ok":
                return reader, writer
            writer.close()
        await asyncio.sleep(0.1)
    return None
