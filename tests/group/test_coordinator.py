"""Rank 0's coordinator against fake peers (httpx.MockTransport): what it calls, with which
token, what it counts, and that orchestrated mode never stops or starts anything."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.core import Metric

from sglang_sentinel.group.coordinator import GroupCoordinator
from sglang_sentinel.group.settings import GroupSettings
from sglang_sentinel.supervise import Supervisor
from sglang_sentinel.supervise.settings import ServerSettings

TOKEN = "coordinator-test-token-0123456789"


class FakePeer:
    """Rank 1's agent: answers state, records stop/start, can be made to fail."""

    def __init__(self) -> None:
        self.view: dict[str, Any] = {
            "rank": 1,
            "state": "stopped",
            "pid": None,
            "gpu_memory_used_bytes": None,
            "granted_epoch": 0,
            "stopped_epoch": 0,
        }
        self.calls: list[tuple[str, str, int | None]] = []
        self.fail: str = ""

    def handle(self, request: httpx.Request) -> httpx.Response:
        assert request.headers["Authorization"] == f"Bearer {TOKEN}"
        if self.fail == "connect":
            raise httpx.ConnectError("refused", request=request)
        if self.fail == "unauthorized":
            return httpx.Response(401)
        if self.fail == "bad_reply":
            return httpx.Response(200, json={"rank": 1, "state": "??"})
        path = request.url.path.rsplit("/", 1)[1]
        epoch = json.loads(request.content)["epoch"] if request.content else None
        self.calls.append((request.method, path, epoch))
        if path == "start" and epoch > self.view["granted_epoch"]:
            self.view["granted_epoch"] = epoch
        if path == "stop" and epoch > self.view["stopped_epoch"]:
            self.view["stopped_epoch"] = epoch
            self.view.update(state="restarting", pid=None)
        return httpx.Response(200, json=self.view)


def _coordinator(tmp_path: Path, peer: FakePeer, **fields: Any) -> GroupCoordinator:
    token = tmp_path / "token"
    token.write_text(TOKEN)
    token.chmod(0o600)
    settings = GroupSettings(
        nnodes=2,
        node_rank=0,
        dist_init_addr="127.0.0.1:5000",
        peers=("http://node2:9480",),
        token_file=token,
        **fields,
    )
    return GroupCoordinator(
        settings, Supervisor(ServerSettings()), transport=httpx.MockTransport(peer.handle)
    )


def _phase(coord: GroupCoordinator) -> str:
    return coord.plan.phase  # read anew each time (mypy would keep an asserted value narrowed)


def _samples(coord: GroupCoordinator) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    out = {}
    metric: Metric
    for metric in coord.collector().collect():
        for s in metric.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


async def test_start_then_group_restart_when_the_peer_dies(tmp_path: Path) -> None:
    peer = FakePeer()
    coord = _coordinator(tmp_path, peer)
    try:
        await coord.tick()
        epoch = coord.plan.epoch
        assert ("POST", "start", epoch) in peer.calls
        assert coord.local.granted_epoch == epoch  # rank 0's own start, after the peer's
        m = _samples(coord)
        assert m[("sentinel_group_restarts_total", (("reason", "peer_down"),))] == 0
        assert m[("sentinel_group_members", ())] == 2
        assert m[("sentinel_group_members_ready", ())] == 0
        # The peer's server runs, then dies.
        peer.view.update(state="running", pid=77)
        await coord.tick()
        assert _samples(coord)[("sentinel_group_member_state", (("rank", "1"), ("state", "running")))] == 1
        assert _samples(coord)[("sentinel_group_members_ready", ())] == 1
        peer.view.update(state="restarting", pid=None)
        peer.calls.clear()
        await coord.tick()
        assert _phase(coord) == "stopping"
        assert coord.plan.epoch > epoch
        assert peer.calls == [("GET", "state", None), ("POST", "stop", coord.plan.epoch)]
        assert coord.local.stopped_epoch == coord.plan.epoch
        assert _samples(coord)[("sentinel_group_restarts_total", (("reason", "peer_down"),))] == 1
        # Both released (no NVML: the process exits are the signal): start, rank 0 last.
        await coord.tick()
        assert _phase(coord) == "up"
        assert peer.calls[-1] == ("POST", "start", coord.plan.epoch)
        assert coord.local.granted_epoch == coord.plan.epoch
        assert coord.snapshot().members[1].state == "restarting"
    finally:
        await coord.stop()


@pytest.mark.parametrize("reason", ["connect", "unauthorized", "bad_reply"])
async def test_peer_errors_are_counted_not_taken_for_a_dead_server(tmp_path: Path, reason: str) -> None:
    peer = FakePeer()
    coord = _coordinator(tmp_path, peer)
    try:
        await coord.tick()
        peer.view.update(state="running", pid=77)
        await coord.tick()
        peer.fail = reason
        await coord.tick()
        await coord.tick()
        assert _phase(coord) == "up"  # an agent that does not answer is no dead server
        m = _samples(coord)
        assert m[("sentinel_group_peer_errors_total", (("peer", "node2:9480"), ("reason", reason)))] == 2
        assert m[("sentinel_group_member_state", (("rank", "1"), ("state", "unknown")))] == 1
    finally:
        await coord.stop()


async def test_orchestrated_only_observes(tmp_path: Path) -> None:
    peer = FakePeer()
    coord = _coordinator(tmp_path, peer, orchestrated=True)
    try:
        for state in ("running", "restarting", "stopped"):
            peer.view["state"] = state
            await coord.tick()
        assert {c[0] for c in peer.calls} == {"GET"}
        assert coord.local.granted_epoch == 0
        assert _samples(coord)[("sentinel_group_restarts_total", (("reason", "peer_down"),))] == 0
    finally:
        await coord.stop()
