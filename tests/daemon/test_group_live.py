"""Acceptance: two agents on loopback, simulator ranks 0 and 1 as their managed children.

SIGKILL of rank 1's server restarts the whole group (rank 0's server gets a new pid too) and the
group is back at members_ready = 2; rank 1's dummy /health never makes it count as API-ready,
and rank 0 is not ready before rank 1 has joined.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from support.daemon_proc import DaemonProcess, free_port
from support.loopback import HTTP

pytestmark = pytest.mark.slow

TOKEN = "group-token-for-the-live-test-0123456789"


def _config(
    tmp_path: Path, rank: int, server_port: int, exporter_port: int, dist: str, peers: list[str]
) -> Path:
    token = tmp_path / f"token{rank}"
    token.write_text(TOKEN + "\n")
    token.chmod(0o600)
    cfg = tmp_path / f"rank{rank}.toml"
    peer_list = ", ".join(f'"{p}"' for p in peers)
    cfg.write_text(
        f"""
state_dir = "{tmp_path / f"state{rank}"}"

[log]
format = "json"

[server]
profile = "groupsim"
port = {server_port}
stop_timeout = 1
startup_poll_interval = 0.2
start_timeout = 60

[server.checks.health]
interval = 0.5

[server.restart]
backoff_initial = 0.2

[server.profiles.groupsim]
base = "sim"
kind = "command"
extra_args = ["--speed", "20", "--startup-time", "4", "--dist-timeout", "600", "--disable-access-log"]

[exporter]
port = {exporter_port}

[schedule]
calibrate_when_missing = false
recalibrate_cron = ""

[schedule.profiles.reference]
interval_seconds = 3600
run_on_ready = false

[group]
nnodes = 2
node_rank = {rank}
dist_init_addr = "{dist}"
peers = [{peer_list}]
token_file = "{token}"
poll_interval = 0.3
release_timeout = 20
"""
    )
    return cfg


def _group(d: DaemonProcess) -> dict[str, Any]:
    result: dict[str, Any] = d.status()["group"]
    return result


def _member(d: DaemonProcess, rank: int) -> dict[str, Any]:
    return next((m for m in _group(d)["members"] if m["rank"] == rank), {})


def test_killing_rank1_restarts_the_whole_group(tmp_path: Path, daemons: list[DaemonProcess]) -> None:
    dist = f"127.0.0.1:{free_port()}"
    e0, e1 = free_port(), free_port()
    s0, s1 = free_port(), free_port()
    cfg1 = _config(tmp_path, 1, s1, e1, dist, [])
    cfg0 = _config(tmp_path, 0, s0, e0, dist, [f"http://127.0.0.1:{e1}"])
    r0 = DaemonProcess(cfg0, e0, tmp_path / "rank0.log")
    daemons.append(r0)
    # Rank 1's agent comes late: rank 0's server is launched but cannot be ready alone.
    r0.wait("rank 0's server launched", lambda: _member(r0, 0).get("pid") is not None, 30)
    # Alone, this simulator would be ready in 0.2 s (--startup-time 4 at --speed 20).
    time.sleep(1.5)
    assert r0.status()["server"]["state"] == "starting"
    assert _group(r0)["members_ready"] == 0
    r1 = DaemonProcess(cfg1, e1, tmp_path / "rank1.log")
    daemons.append(r1)

    r0.wait("both ranks up", lambda: _group(r0)["members_ready"] == 2, 60)
    assert r0.status()["server"]["state"] == "ready"
    assert r1.status()["server"]["state"] == "running"  # never "ready": its /health is the dummy
    assert HTTP.get(f"http://127.0.0.1:{s1}/health", timeout=5).status_code == 200
    m = r0.metrics()
    assert r0.value(m, "sentinel_group_members_ready") == 2
    assert r0.value(m, "sentinel_group_member_state", rank="1", state="running") == 1
    assert r0.value(m, "sentinel_group_member_state", rank="1", state="ready") == 0
    assert r0.value(m, "sentinel_group_restarts_total", reason="peer_down") == 0
    assert r1.value(r1.metrics(), "sentinel_server_state", state="ready") == 0
    pid0, pid1 = _member(r0, 0)["pid"], _member(r0, 1)["pid"]
    epoch = _group(r0)["epoch"]

    os.kill(pid1, signal.SIGKILL)

    r0.wait("a group restart", lambda: _group(r0)["epoch"] != epoch, 30)
    r0.wait("both ranks up again", lambda: _group(r0)["members_ready"] == 2, 60)
    assert _member(r0, 0)["pid"] != pid0  # rank 0's server was restarted too
    assert _member(r0, 1)["pid"] != pid1
    m = r0.metrics()
    assert r0.value(m, "sentinel_group_restarts_total", reason="peer_down") == 1
    assert r0.value(m, "sentinel_group_members_ready") == 2
    assert TOKEN not in r0.text()
    assert TOKEN not in r1.text()
    assert r0.stop() == 0
    assert r1.stop() == 0
