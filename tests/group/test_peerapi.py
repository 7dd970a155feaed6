"""The group's peer API on the exporter: bearer token or 401/429, idempotent stop/start, the
token in no log line, and the scrapers' basic auth neither covering nor blocking it."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import bcrypt
import httpx
import pytest

from sglang_sentinel.collect import CollectorSet
from sglang_sentinel.export import Exporter
from sglang_sentinel.export.settings import ExporterSettings
from sglang_sentinel.group.local import LocalMember
from sglang_sentinel.group.peerapi import PeerApi
from sglang_sentinel.log import configure_logging
from sglang_sentinel.supervise import Supervisor
from sglang_sentinel.supervise.settings import ServerSettings

TOKEN = "peer-token-0123456789abcdef"


async def _serve(
    tmp_path: Path, *, coordinator: bool = False, basic_auth: bool = False
) -> tuple[Exporter, PeerApi]:
    member = LocalMember(Supervisor(ServerSettings()), 0 if coordinator else 1, None)
    api = PeerApi(member, TOKEN, coordinator=coordinator, failure_burst=3)
    users = None
    if basic_auth:
        users = tmp_path / "users"
        users.write_text("prom:" + bcrypt.hashpw(b"pw", bcrypt.gensalt(4)).decode() + "\n")
    exporter = Exporter(
        CollectorSet([]),
        ExporterSettings(port=0, basic_auth_users_file=users),
        routes=api.routes(),
        own_auth_prefixes=("/group/",),
    )
    await exporter.start()
    return exporter, api


def _auth(token: str = TOKEN) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


@pytest.mark.parametrize("basic_auth", [False, True])
async def test_bearer_token_or_401(tmp_path: Path, basic_auth: bool) -> None:
    exporter, api = await _serve(tmp_path, basic_auth=basic_auth)
    try:
        async with httpx.AsyncClient(base_url=exporter.url, timeout=5) as c:
            r = await c.get("/group/v1/state")
            assert r.status_code == 401
            assert r.headers["WWW-Authenticate"].startswith("Bearer")
            assert (
                await c.get("/group/v1/state", headers=_auth("wrong-token-0123456789"))
            ).status_code == 401
            # A scraper's basic credentials are no peer credential.
            assert (await c.get("/group/v1/state", auth=("prom", "pw"))).status_code == 401
            r = await c.get("/group/v1/state", headers=_auth())
            assert r.status_code == 200
            assert r.json() == {
                "rank": 1,
                "state": "stopped",
                "pid": None,
                "gpu_memory_used_bytes": None,
                "granted_epoch": 0,
                "stopped_epoch": 0,
            }
            if basic_auth:  # the rest of the exporter still needs the scrape credentials
                assert (await c.get("/metrics", headers=_auth())).status_code == 401
        assert api.denied == 3
    finally:
        await exporter.stop()


async def test_repeated_failures_from_one_address_are_limited(tmp_path: Path) -> None:
    exporter, _ = await _serve(tmp_path)
    try:
        async with httpx.AsyncClient(base_url=exporter.url, timeout=5) as c:
            codes = [
                (await c.get("/group/v1/state", headers=_auth(f"guess-{i:020d}"))).status_code
                for i in range(6)
            ]
            assert codes[:3] == [401, 401, 401]
            assert set(codes[3:]) == {429}
            # The right token still passes: a limit on failures, not on the peer.
            assert (await c.get("/group/v1/state", headers=_auth())).status_code == 200
    finally:
        await exporter.stop()


async def test_stop_and_start_are_idempotent_per_epoch(tmp_path: Path) -> None:
    exporter, _ = await _serve(tmp_path)
    try:
        async with httpx.AsyncClient(base_url=exporter.url, timeout=5, headers=_auth()) as c:
            r = await c.post("/group/v1/start", json={"epoch": 5})
            assert (r.status_code, r.json()["changed"], r.json()["granted_epoch"]) == (200, True, 5)
            r = await c.post("/group/v1/start", json={"epoch": 5})  # a retry
            assert (r.status_code, r.json()["changed"]) == (200, False)
            r = await c.post("/group/v1/stop", json={"epoch": 6})
            assert (r.json()["changed"], r.json()["stopped_epoch"]) == (True, 6)
            assert (await c.post("/group/v1/stop", json={"epoch": 6})).json()["changed"] is False
            assert (await c.post("/group/v1/start", json={"epoch": 4})).json()["changed"] is False  # stale
            bodies: list[object] = [{"epoch": 0}, {"epoch": "7"}, {"epoch": True}, [], None]
            for body in bodies:
                assert (await c.post("/group/v1/start", json=body)).status_code == 400
            assert (await c.post("/group/v1/start", content=b"{not json")).status_code == 400
            assert (await c.get("/group/v1/stop")).status_code == 405
    finally:
        await exporter.stop()


async def test_rank0_takes_no_orders(tmp_path: Path) -> None:
    exporter, _ = await _serve(tmp_path, coordinator=True)
    try:
        async with httpx.AsyncClient(base_url=exporter.url, timeout=5, headers=_auth()) as c:
            assert (await c.post("/group/v1/stop", json={"epoch": 9})).status_code == 409
            assert (await c.get("/group/v1/state")).json()["rank"] == 0
    finally:
        await exporter.stop()


async def test_the_token_is_in_no_log_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    configure_logging("debug", "json")
    exporter, _ = await _serve(tmp_path)
    try:
        async with httpx.AsyncClient(base_url=exporter.url, timeout=5) as c:
            await c.get("/group/v1/state", headers=_auth(TOKEN + "x"))  # nearly right: logged as denied
            await c.post("/group/v1/start", headers=_auth(), json={"epoch": 3})
    finally:
        await exporter.stop()
    err = capsys.readouterr().err
    events = [json.loads(line)["event"] for line in err.splitlines() if line.startswith("{")]
    assert "group_peer_call_denied" in events
    assert "group_start_accepted" in events
    assert TOKEN not in err


async def test_the_launch_gate_opens_once_per_granted_epoch() -> None:
    member = LocalMember(Supervisor(ServerSettings()), 1, None)
    gate = asyncio.create_task(member.gate())
    await asyncio.sleep(0.05)
    assert not gate.done()  # nothing granted: a rank waits for the group's start
    member.start(3)
    await asyncio.wait_for(gate, 2)
    again = asyncio.create_task(member.gate())
    await asyncio.sleep(0.05)
    assert not again.done()  # its server died: no relaunch of its own within epoch 3
    member.stop(4)
    member.start(4)
    await asyncio.wait_for(again, 2)
    assert member.launched_epoch == 4
