"""What each rank reports, and rank 0's group restart decisions as a pure function.

Each poll, rank 0 (the coordinator) gathers one :class:`MemberView` per rank and calls
:func:`decide`, which returns the next :class:`Plan` and the calls to make. Two phases:

- ``up`` (epoch E granted): a member whose agent has not accepted start E is sent it again (an
  agent that came late or restarted). A member seen alive in E that is no longer alive ends the
  epoch: a new epoch E' begins in ``stopping`` and every rank is told to stop for E'.
- ``stopping`` (epoch E): members that have not accepted stop E are sent it again. Once every
  member is *released* — stopped for E, server process gone, GPU memory at most the threshold
  (NVML; without it the process exit is the signal) — or ``release_timeout`` has passed, every
  rank is told to start E, rank 0 last (ranks ≥ 1 wait in torch's rendezvous for rank 0 anyway;
  starting rank 0 last means its rendezvous timeout counts from when the others are launching).

The agent starts in ``up`` of a fresh epoch: every rank is sent start as soon as its agent
answers (late agents included), with nothing to release first. Epochs are milliseconds since
the Unix epoch (at least the previous + 1): a restarted rank-0 agent still issues epochs newer
than any its peers accepted before.
"""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Literal

__all__ = [
    "ALIVE_STATES",
    "GROUP_RESTART_REASONS",
    "MEMBER_STATES",
    "Action",
    "MemberView",
    "Plan",
    "decide",
    "new_epoch",
]

# The server states (ServerState values) in which the server process exists.
ALIVE_STATES = frozenset({"starting", "warming", "ready", "running", "unhealthy"})
# Every state a member can be reported in; "unknown" = its agent did not answer.
MEMBER_STATES: tuple[str, ...] = (
    "stopped",
    "starting",
    "warming",
    "ready",
    "running",
    "unhealthy",
    "restarting",
    "failed",
    "unknown",
)
# sentinel_group_restarts_total{reason}: rank 0's own server went down, or a rank >= 1's did.
GROUP_RESTART_REASONS: tuple[str, ...] = ("rank0_down", "peer_down")


def new_epoch(previous: int, now: float | None = None) -> int:
    return max(previous + 1, int((time.time() if now is None else now) * 1000))


@dataclass(frozen=True, slots=True)
class MemberView:
    rank: int
    state: str  # a MEMBER_STATES value
    pid: int | None = None
    # The fullest GPU's used memory (NVML); None where NVML is not available.
    gpu_memory_used_bytes: int | None = None
    granted_epoch: int = 0  # the last start this agent accepted
    stopped_epoch: int = 0  # the last stop this agent accepted
    reachable: bool = True
    error: str = ""  # why it is not reachable (a peer_errors reason)

    @property
    def alive(self) -> bool:
        return self.state in ALIVE_STATES

    @property
    def up(self) -> bool:
        """Counted in members_ready: rank 0's API ready; a rank >= 1 running and joined. A rank
        >= 1 is never "ready": its /health is SGLang's dummy, 200 whatever happens."""
        return self.reachable and self.state == ("ready" if self.rank == 0 else "running")

    def as_json(self) -> dict[str, Any]:
        return {
            "rank": self.rank,
            "state": self.state,
            "pid": self.pid,
            "gpu_memory_used_bytes": self.gpu_memory_used_bytes,
            "granted_epoch": self.granted_epoch,
            "stopped_epoch": self.stopped_epoch,
        }

    @classmethod
    def from_json(cls, data: Any, expect_rank: int) -> MemberView:
        """A peer's reply; ValueError naming the field for anything malformed."""
        if not isinstance(data, dict):
            raise ValueError("not a JSON object")

        def integer(name: str, optional: bool = False) -> Any:
            value = data.get(name)
            if value is None and optional:
                return None
            if not isinstance(value, int) or isinstance(value, bool) or value < 0:
                raise ValueError(f"{name}: want a non-negative integer")
            return value

        rank = integer("rank")
        if rank != expect_rank:
            raise ValueError(f"rank: {rank}, expected {expect_rank} (peers out of rank order?)")
        state = data.get("state")
        if state not in MEMBER_STATES:
            raise ValueError("state: not a server state")
        return cls(
            rank,
            state,
            integer("pid", True),
            integer("gpu_memory_used_bytes", True),
            integer("granted_epoch"),
            integer("stopped_epoch"),
        )


@dataclass(frozen=True, slots=True)
class Action:
    kind: Literal["stop", "start"]
    rank: int
    epoch: int


@dataclass(frozen=True, slots=True)
class Plan:
    epoch: int
    phase: Literal["stopping", "up"] = "stopping"
    since: float = 0.0  # monotonic time the phase began
    seen_alive: frozenset[int] = field(default_factory=frozenset)
    restart_reason: str = ""  # why the current epoch began ("" = the first start)
    release_timed_out: bool = False


def _released(m: MemberView, epoch: int, threshold: int) -> bool:
    if not m.reachable or m.stopped_epoch < epoch or m.alive or m.pid is not None:
        return False
    return m.gpu_memory_used_bytes is None or m.gpu_memory_used_bytes <= threshold


def decide(
    plan: Plan,
    members: Sequence[MemberView],
    now: float,
    *,
    release_timeout: float,
    release_threshold_bytes: int,
) -> tuple[Plan, list[Action]]:
    """The next plan and the peer/local calls it needs (see the module docstring)."""
    by_rank: Mapping[int, MemberView] = {m.rank: m for m in members}
    e = plan.epoch
    if plan.phase == "up":
        actions = [Action("start", m.rank, e) for m in members if m.reachable and m.granted_epoch < e]
        seen = plan.seen_alive | {m.rank for m in members if m.alive and m.granted_epoch >= e}
        down = sorted(r for r in seen if r in by_rank and by_rank[r].reachable and not by_rank[r].alive)
        if not down:
            return replace(plan, seen_alive=seen), actions
        nxt = Plan(new_epoch(e), "stopping", now, frozenset(), "rank0_down" if 0 in down else "peer_down")
        return nxt, [Action("stop", m.rank, nxt.epoch) for m in members]
    done = all(_released(m, e, release_threshold_bytes) for m in members)
    timed_out = now - plan.since >= release_timeout
    if not done and not timed_out:
        return plan, [Action("stop", m.rank, e) for m in members if m.reachable and m.stopped_epoch < e]
    order = sorted((m.rank for m in members), key=lambda r: (r == 0, r))  # rank 0 last
    up = replace(plan, phase="up", since=now, seen_alive=frozenset(), release_timed_out=not done)
    return up, [Action("start", r, e) for r in order]
