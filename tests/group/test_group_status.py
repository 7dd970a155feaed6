"""``sentinel status`` on a group: the ranks and their states; rank >= 1 healthy when running."""

from __future__ import annotations

from typing import Any

from sglang_sentinel.cli.status import EXIT_DEGRADED, EXIT_OK, health_code, summarize


def _status(state: str, group: dict[str, Any]) -> dict[str, Any]:
    return {"server": {"state": state, "mode": "child", "url": "http://x:1"}, "group": group}


def _group(rank: int, ready: int | None, *states: str) -> dict[str, Any]:
    members = [
        {"rank": r, "state": s, "pid": 10 + r, "reachable": s != "unknown", "error": ""}
        for r, s in enumerate(states)
    ]
    return {
        "rank": rank,
        "nnodes": 2,
        "members_ready": ready,
        "phase": "up",
        "orchestrated": False,
        "members": members,
    }


def test_rank1_running_is_healthy_ready_is_not_expected() -> None:
    assert health_code(_status("running", _group(1, None, "running"))) == EXIT_OK
    assert health_code(_status("starting", _group(1, None, "starting"))) == EXIT_DEGRADED


def test_rank0_of_a_half_up_group_is_degraded() -> None:
    assert health_code(_status("ready", _group(0, 1, "ready", "restarting"))) == EXIT_DEGRADED
    assert health_code(_status("ready", _group(0, 2, "ready", "running"))) == EXIT_OK


def test_summary_lists_the_ranks() -> None:
    text = summarize(_status("ready", _group(0, 1, "ready", "unknown")), now=0.0)
    assert "group       rank 0 of 2, 1/2 ranks up, phase up" in text
    assert "  rank 1    unknown, pid 11 (agent unreachable: )" in text
