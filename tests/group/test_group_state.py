"""Rank 0's restart decisions (group/state.py), as a pure function of the members' views."""

from __future__ import annotations

import pytest

from sglang_sentinel.group.state import Action, MemberView, Plan, decide

GIB = 1024**3


def _decide(plan: Plan, members: list[MemberView], now: float = 100.0) -> tuple[Plan, list[Action]]:
    return decide(plan, members, now, release_timeout=30.0, release_threshold_bytes=GIB)


def _up(epoch: int, seen: frozenset[int] = frozenset({0, 1})) -> Plan:
    return Plan(epoch, "up", 0.0, seen)


def test_first_start_sends_start_to_every_reachable_member_and_again_to_a_late_one() -> None:
    plan = Plan(10, "up", 0.0)
    members = [MemberView(0, "stopped"), MemberView(1, "unknown", reachable=False)]
    plan, actions = _decide(plan, members)
    assert actions == [Action("start", 0, 10)]
    # Rank 1's agent answers later: it gets its start then.
    plan, actions = _decide(plan, [MemberView(0, "starting", 5, granted_epoch=10), MemberView(1, "stopped")])
    assert actions == [Action("start", 1, 10)]
    assert plan.phase == "up"


def test_rank1_dummy_health_state_never_counts_as_ready_and_running_counts_as_up() -> None:
    assert not MemberView(1, "ready").up  # a rank >= 1 is never API-ready
    assert MemberView(1, "running").up
    assert MemberView(0, "ready").up
    assert not MemberView(0, "running").up
    assert not MemberView(1, "running", reachable=False).up


def test_a_member_that_died_after_it_was_alive_stops_the_whole_group() -> None:
    plan = _up(10)
    alive = [MemberView(0, "ready", 5, granted_epoch=10), MemberView(1, "running", 6, granted_epoch=10)]
    plan, actions = _decide(plan, alive)
    assert actions == []
    dead = [MemberView(0, "ready", 5, granted_epoch=10), MemberView(1, "restarting", None, granted_epoch=10)]
    plan, actions = _decide(plan, dead)
    assert plan.phase == "stopping"
    assert plan.restart_reason == "peer_down"
    assert plan.epoch > 10
    assert actions == [Action("stop", 0, plan.epoch), Action("stop", 1, plan.epoch)]


def test_rank0_down_is_its_own_reason() -> None:
    views = [MemberView(0, "restarting", granted_epoch=10), MemberView(1, "running", 6, granted_epoch=10)]
    plan, _ = _decide(_up(10), views)
    assert plan.restart_reason == "rank0_down"


def test_a_member_not_yet_alive_in_this_epoch_is_not_down() -> None:
    # Granted but still in its backoff: not a death of this epoch's server.
    views = [MemberView(0, "ready", 5, granted_epoch=10), MemberView(1, "restarting", granted_epoch=10)]
    plan, actions = _decide(_up(10, frozenset({0})), views)
    assert plan.phase == "up"
    assert actions == []


def test_an_unreachable_agent_is_not_a_dead_server() -> None:
    views = [MemberView(0, "ready", 5, granted_epoch=10), MemberView(1, "unknown", reachable=False)]
    plan, actions = _decide(_up(10), views)
    assert plan.phase == "up"
    assert actions == []


@pytest.mark.parametrize(
    ("rank1", "released"),
    [
        (MemberView(1, "restarting", None, None, 10, 20), True),  # no NVML: the process exit is it
        (MemberView(1, "restarting", None, GIB // 2, 10, 20), True),
        (MemberView(1, "restarting", None, 40 * GIB, 10, 20), False),  # memory not given back yet
        (MemberView(1, "restarting", 7, None, 10, 20), False),  # the process still exists
        (MemberView(1, "running", None, None, 10, 20), False),
        (MemberView(1, "restarting", None, None, 10, 10), False),  # has not accepted stop 20
    ],
)
def test_start_waits_for_release_on_every_node(rank1: MemberView, released: bool) -> None:
    plan = Plan(20, "stopping", 90.0)
    rank0 = MemberView(0, "restarting", None, None, 10, 20)
    plan, actions = _decide(plan, [rank0, rank1], now=100.0)
    if released:
        assert plan.phase == "up"
        assert actions == [Action("start", 1, 20), Action("start", 0, 20)]  # rank 0 last
    else:
        assert plan.phase == "stopping"
        assert all(a.kind == "stop" for a in actions)


def test_release_timeout_starts_anyway_and_says_so() -> None:
    plan = Plan(20, "stopping", 0.0)
    views = [MemberView(0, "restarting", None, None, 10, 20), MemberView(1, "unknown", reachable=False)]
    plan, actions = _decide(plan, views, now=31.0)
    assert plan.phase == "up"
    assert plan.release_timed_out
    assert [a.kind for a in actions] == ["start", "start"]


def test_a_stop_not_yet_accepted_is_sent_again() -> None:
    plan = Plan(20, "stopping", 95.0)
    views = [MemberView(0, "restarting", None, None, 10, 20), MemberView(1, "running", 8, None, 10, 10)]
    plan, actions = _decide(plan, views)
    assert actions == [Action("stop", 1, 20)]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ([], "object"),
        ({"rank": 2, "state": "running", "granted_epoch": 1, "stopped_epoch": 0}, "rank"),
        ({"rank": 1, "state": "dancing", "granted_epoch": 1, "stopped_epoch": 0}, "state"),
        ({"rank": 1, "state": "running", "granted_epoch": "1", "stopped_epoch": 0}, "granted_epoch"),
        ({"rank": 1, "state": "running", "granted_epoch": 1, "stopped_epoch": 0, "pid": True}, "pid"),
    ],
)
def test_a_malformed_peer_reply_names_the_field(body: object, field: str) -> None:
    with pytest.raises(ValueError, match=field):
        MemberView.from_json(body, 1)
