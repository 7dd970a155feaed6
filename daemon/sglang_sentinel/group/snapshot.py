"""What the group's agent shows the rest of the daemon: one immutable value, replaced whole.

:class:`~sglang_sentinel.group.coordinator.GroupCoordinator` publishes a new
:class:`GroupSnapshot` after each poll-and-decide round; the ``sentinel_group_*`` collector
(metrics.py), the status page and ``/status.json`` read only the latest one, as the supervisor's
readers do with :class:`~sglang_sentinel.supervise.snapshot.SupervisorSnapshot`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from sglang_sentinel.group.state import MemberView

__all__ = ["GroupSnapshot"]


@dataclass(frozen=True, slots=True)
class GroupSnapshot:
    nnodes: int
    rank: int
    orchestrated: bool
    epoch: int
    phase: str  # "stopping" | "up" (rank 0), "member" (a rank >= 1)
    members: tuple[MemberView, ...]  # rank 0: every rank; a rank >= 1: itself
    restarts: Mapping[str, int]
    peer_errors: Mapping[tuple[str, str], int]
    last_restart_reason: str = ""
    release_timed_out: bool = False

    @property
    def members_ready(self) -> int:
        return sum(m.up for m in self.members)

    def as_status(self) -> dict[str, object]:
        return {
            "nnodes": self.nnodes,
            "rank": self.rank,
            "orchestrated": self.orchestrated,
            "epoch": self.epoch,
            "phase": self.phase,
            "members_ready": self.members_ready if self.rank == 0 else None,
            "members": [
                {**m.as_json(), "up": m.up, "reachable": m.reachable, "error": m.error} for m in self.members
            ],
            "restarts": dict(self.restarts),
            "last_restart_reason": self.last_restart_reason,
            "release_timed_out": self.release_timed_out,
        }
