"""``sentinel_group_*``: a multi-node group as this agent sees it (rank 0 sees every rank).

- ``sentinel_group_members``: ranks the group should have (``[group] nnodes``).
- ``sentinel_group_members_ready``: ranks whose server is up — rank 0's API ready, a rank ≥ 1
  running and joined (never its dummy ``/health``). Rank 0 only: a rank ≥ 1 knows only itself.
- ``sentinel_group_member_state{rank,state}``: 1 for each rank's current server state
  (``unknown`` while its agent does not answer), as ``sentinel_server_state`` is one-hot.
- ``sentinel_group_restarts_total{reason}``: group-wide restarts rank 0 made (at 0 from start).
- ``sentinel_group_peer_errors_total{peer,reason}``: failed peer calls (rank 0; at 0 from start).
- ``sentinel_group_peer_calls_denied_total``: peer API calls this agent refused (no/bad token).
- ``sentinel_group_epoch``: the current restart id (changes on every group restart).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sglang_sentinel.group.state import MEMBER_STATES

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from sglang_sentinel.group.snapshot import GroupSnapshot

__all__ = ["GroupCollector"]


class GroupCollector(Collector):
    def __init__(self, snapshot: Callable[[], GroupSnapshot], denied: Callable[[], int]) -> None:
        self._snapshot = snapshot
        self._denied = denied

    def describe(self) -> Iterator[Metric]:
        return iter(())

    def collect(self) -> Iterator[Metric]:
        snap = self._snapshot()
        yield GaugeMetricFamily("sentinel_group_members", "Ranks the group should have.", value=snap.nnodes)
        if snap.rank == 0:
            yield GaugeMetricFamily(
                "sentinel_group_members_ready",
                "Ranks whose server is up (rank 0: API ready; rank >= 1: running and joined).",
                value=snap.members_ready,
            )
        g = GaugeMetricFamily(
            "sentinel_group_member_state",
            "Server state of each rank: 1 for the current one.",
            labels=["rank", "state"],
        )
        for m in snap.members:
            for st in MEMBER_STATES:
                g.add_metric([str(m.rank), st], int(st == m.state))
        yield g
        yield GaugeMetricFamily("sentinel_group_epoch", "The group's current restart id.", value=snap.epoch)
        c = CounterMetricFamily(
            "sentinel_group_restarts", "Group-wide restarts, by reason.", labels=["reason"]
        )
        for reason, n in sorted(snap.restarts.items()):
            c.add_metric([reason], n)
        yield c
        e = CounterMetricFamily(
            "sentinel_group_peer_errors",
            "Failed calls to peer agents, by peer and reason.",
            labels=["peer", "reason"],
        )
        for (peer, reason), n in sorted(snap.peer_errors.items()):
            e.add_metric([peer, reason], n)
        yield e
        yield CounterMetricFamily(
            "sentinel_group_peer_calls_denied",
            "Peer API calls refused for a missing or wrong token.",
            value=self._denied(),
        )
