"""The group's agent on this node: the launch gate everywhere, rank 0's poll-and-decide loop.

Rank 0 polls every peer's ``/group/v1/state`` each ``poll_interval`` (polling rather than
peers notifying: a notification lost while rank 0's agent restarts would be a restart never
made; a poll catches up) and applies :func:`~sglang_sentinel.group.state.decide`. Ranks ≥ 1 only
answer (peerapi.py) and publish their own view. ``orchestrated = true``: no gate, no stop/start —
the views and metrics only; the controller (LeaderWorkerSet, OME) restarts the group.

What others read is :meth:`GroupCoordinator.snapshot`, one immutable value replaced whole.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter

import httpx

from sglang_sentinel.group.client import PeerClient
from sglang_sentinel.group.local import GpuMemoryReader, LocalMember
from sglang_sentinel.group.metrics import GroupCollector
from sglang_sentinel.group.peerapi import PeerApi
from sglang_sentinel.group.settings import GroupSettings
from sglang_sentinel.group.snapshot import GroupSnapshot
from sglang_sentinel.group.state import GROUP_RESTART_REASONS, Action, MemberView, Plan, decide, new_epoch
from sglang_sentinel.log import get_logger
from sglang_sentinel.supervise.snapshot import frozen
from sglang_sentinel.supervise.supervisor import Supervisor
from sglang_sentinel.supervise.tasks import cancel_and_wait

__all__ = ["GroupCoordinator", "GroupSnapshot"]

_log = get_logger(__name__)


class GroupCoordinator:
    def __init__(
        self,
        settings: GroupSettings,
        supervisor: Supervisor,
        *,
        gpu_reader: GpuMemoryReader | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.settings = s = settings
        self.local = LocalMember(supervisor, s.node_rank, gpu_reader)
        if not s.orchestrated:
            supervisor.set_launch_gate(self.local.gate)
        token = s.read_token()
        self.api = PeerApi(self.local, token, coordinator=s.node_rank == 0)
        self.client = PeerClient(s.peers, token, s.peer_timeout, transport) if s.node_rank == 0 else None
        self.restarts: Counter[str] = Counter(dict.fromkeys(GROUP_RESTART_REASONS, 0))
        # The first start: nothing of this agent's ran yet, so there is nothing to release.
        self.plan = Plan(new_epoch(0), "up", time.monotonic())
        self._members: tuple[MemberView, ...] = ()
        self._task: asyncio.Task[None] | None = None
        self._snapshot = self._build()

    def snapshot(self) -> GroupSnapshot:
        return self._snapshot

    def collector(self) -> GroupCollector:
        return GroupCollector(self.snapshot, lambda: self.api.denied)

    def _build(self) -> GroupSnapshot:
        s = self.settings
        return GroupSnapshot(
            nnodes=s.nnodes,
            rank=s.node_rank,
            orchestrated=s.orchestrated,
            epoch=self.plan.epoch if s.node_rank == 0 else self.local.granted_epoch,
            phase=self.plan.phase if s.node_rank == 0 else "member",
            members=self._members,
            restarts=frozen(self.restarts),
            peer_errors=frozen(self.client.errors if self.client is not None else {}),
            last_restart_reason=self.plan.restart_reason,
            release_timed_out=self.plan.release_timed_out,
        )

    async def start(self) -> None:
        self._task = asyncio.create_task(self._run(), name="sentinel-group")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            await cancel_and_wait(task)
        if self.client is not None:
            await self.client.aclose()

    async def _run(self) -> None:
        while True:
            try:
                await self.tick()
            except Exception:
                _log.exception("group_tick_failed")  # never a dead coordinator
            await asyncio.sleep(self.settings.poll_interval)

    async def _views(self) -> list[MemberView]:
        local = await self.local.view()
        if self.client is None:
            return [local]
        peers = await asyncio.gather(
            *(self.client.call(r, "GET", "state") for r in range(1, self.settings.nnodes))
        )
        return [local, *peers]

    async def tick(self) -> None:
        """One poll: gather the views, decide (rank 0, not orchestrated), carry the calls out."""
        views = await self._views()
        if self.client is not None and not self.settings.orchestrated:
            before = self.plan
            self.plan, actions = decide(
                self.plan,
                views,
                time.monotonic(),
                release_timeout=self.settings.release_timeout,
                release_threshold_bytes=self.settings.release_threshold_bytes,
            )
            self._log_transition(before, views)
            if actions:
                views = await self._carry_out(actions, views)
        self._members = tuple(views)
        self._snapshot = self._build()

    def _log_transition(self, before: Plan, views: list[MemberView]) -> None:
        p = self.plan
        if p.epoch != before.epoch and p.restart_reason:
            self.restarts[p.restart_reason] += 1
            down = [v.rank for v in views if v.rank in before.seen_alive and not v.alive]
            states = {v.rank: v.state for v in views}
            _log.warning(
                "group_restart", reason=p.restart_reason, down_ranks=down, states=states, epoch=p.epoch
            )
        elif p.phase == "up" and before.phase == "stopping":
            if p.release_timed_out:
                _log.warning("group_release_timeout", epoch=p.epoch, timeout=self.settings.release_timeout)
            _log.info("group_starting", epoch=p.epoch, nnodes=self.settings.nnodes)

    async def _carry_out(self, actions: list[Action], views: list[MemberView]) -> list[MemberView]:
        by_rank = {v.rank: v for v in views}
        # Peers first, concurrently; rank 0's own start last (decide() orders it so).
        peer = [a for a in actions if a.rank != 0]
        assert self.client is not None
        replies = await asyncio.gather(*(self.client.call(a.rank, "POST", a.kind, a.epoch) for a in peer))
        for a, reply in zip(peer, replies, strict=True):
            if reply.reachable:
                by_rank[a.rank] = reply
        for a in actions:
            if a.rank == 0:
                (self.local.stop if a.kind == "stop" else self.local.start)(a.epoch)
                by_rank[0] = await self.local.view()
        return [by_rank[r] for r in sorted(by_rank)]
