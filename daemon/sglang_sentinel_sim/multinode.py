"""Rank 0 of a multi-node simulated server: wait for the other ranks, die when one goes away.

SimServer calls :meth:`Rank0.start` when it binds its ports and :meth:`Rank0.wait_peers` where
SGLang's ``Init torch distributed begin.`` blocks; ranks ≥ 1 are :mod:`sglang_sentinel_sim.follower`.
The rendezvous itself (our own line over TCP, not torch's) is :mod:`sglang_sentinel_sim.rendezvous`.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING

from sglang_sentinel_sim.rendezvous import (
    DEFAULT_TIMEOUT_S,
    RendezvousHost,
    nccl_timeout_line,
    parse_dist_init_addr,
)

if TYPE_CHECKING:
    from sglang_sentinel_sim.context import SimContext

__all__ = ["Rank0"]


class Rank0:
    def __init__(self, srv: SimContext) -> None:
        c = srv.config
        assert c.dist_init_addr is not None  # SimConfig.validate() requires it for nnodes > 1
        host, port = parse_dist_init_addr(c.dist_init_addr)
        self.srv = srv
        # Server seconds: torch's default 600 s unless --dist-timeout (what SGLang passes on).
        self.timeout_s = c.dist_timeout if c.dist_timeout is not None else DEFAULT_TIMEOUT_S
        self.host = RendezvousHost(host, port, c.nnodes, self._peer_lost)
        self._dead = False

    async def start(self) -> None:
        await self.host.start()

    async def wait_peers(self) -> bool:
        """Block start-up until ranks 1..N-1 joined; on timeout die as torch's store does."""
        srv = self.srv
        if await self.host.wait_all(srv.server_seconds(self.timeout_s)):
            return True
        joined = len(self.host.joined) + 1
        srv.log.scheduler(
            f"torch.distributed.DistStoreError: Timed out after {int(self.timeout_s) + 1} seconds waiting "
            f"for clients. {joined}/{self.host.nnodes} clients joined."
        )
        self._die("rendezvous_timeout")
        return False

    async def close(self) -> None:
        await self.host.close()

    def _peer_lost(self, rank: int) -> None:
        if self._dead or self.srv.stopped:
            return
        self.srv.spawn(self._time_out(rank), f"peer-{rank}-lost")

    async def _time_out(self, rank: int) -> None:
        # NCCL notices a dead peer only when the next collective times out.
        await asyncio.sleep(self.srv.server_seconds(self.timeout_s))
        if self._dead or self.srv.stopped:
            return
        self.srv.log.scheduler(nccl_timeout_line(0, self.timeout_s))
        self.srv.log.main("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        self._die(f"peer_lost:{rank}")

    def _die(self, why: str) -> None:
        self._dead = True
        srv = self.srv
        srv.exit_reason = why
        if srv.on_fatal is not None:
            srv.on_fatal()
        else:
            srv.spawn(srv.stop(why), "die")
