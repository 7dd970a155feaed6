"""`sentinel run` end to end: a real daemon process, the simulator as its child, a notify socket."""

from __future__ import annotations

import itertools
import json
import os
import re
import signal
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.daemon_proc import DaemonProcess, alive, clean_env, descendants, free_port
from support.loopback import HTTP

pytestmark = pytest.mark.slow


def write_config(tmp_path: Path, state: Path) -> tuple[Path, int]:
    exporter_port = free_port()
    cfg = tmp_path / "sentinel.toml"
    cfg.write_text(
        f"""
state_dir = "{state}"

[log]
format = "json"

[server]
profile = "fastsim"
port = {free_port()}
stop_timeout = 5
startup_poll_interval = 0.2

[server.checks.health]
interval = 0.5

[server.restart]
backoff_initial = 0.2

[server.profiles.fastsim]
kind = "sim"
sim_speed = 50

[exporter]
port = {exporter_port}

[schedule]
warmup_seconds = 0.3
reference_exclusion_seconds = 2.5
calibrate_when_missing = false
recalibrate_cron = ""

[schedule.profiles.reference]
num_prompts = 12
request_rate = 24
input_len = 32
output_len = 32
interval_seconds = 0.7
run_on_ready = false

[schedule.polite]
check_interval_seconds = 0.2

[schedule.breaker]
check_interval_seconds = 0.2
"""
    )
    return cfg, exporter_port


# This file's checks parse /metrics: a ValueError there is a failure, not a retry.
_TOLERATE = (httpx.HTTPError, KeyError, TypeError)


def test_daemon_end_to_end(
    tmp_path: Path, daemons: list[DaemonProcess], notify_receiver: Callable[[str | bytes], Any]
) -> None:
    state = tmp_path / "state"
    cfg, port = write_config(tmp_path, state)
    notify = notify_receiver(str(tmp_path / "notify.sock"))
    d = DaemonProcess(
        cfg,
        port,
        tmp_path / "daemon1.log",
        env={"NOTIFY_SOCKET": str(tmp_path / "notify.sock"), "WATCHDOG_USEC": "1000000"},
        tolerate=_TOLERATE,
    )
    daemons.append(d)
    notify.wait_for("READY=1", timeout=30)

    # Runs fire; the first ones after ready are kept out of the reference series.
    def reference_ran() -> bool:
        m = d.metrics()
        return (
            d.value(m, "sentinel_load_runs_excluded_total", profile="reference", reason="restart_window") or 0
        ) >= 1 and (
            d.value(m, "sentinel_load_output_throughput_tokens_per_second", profile="reference") or 0
        ) > 0

    d.wait("an excluded run, then a reference run", reference_ran, 45)
    m = d.metrics()
    assert d.value(m, "sentinel_server_up") == 1
    assert d.value(m, "sentinel_probe_success", probe="health") == 1
    # The GPU collector has a verdict: ok/failing where NVML is there, not_applicable on a host
    # without a driver (the simulated server needs no GPU), exactly one state at 1.
    gpu_states = [
        d.value(m, "sentinel_collector_state", collector="gpu", state=s)
        for s in ("ok", "failing", "not_applicable")
    ]
    assert sorted(v or 0.0 for v in gpu_states) == [0, 0, 1], gpu_states
    assert (d.value(m, "sentinel_load_runs_total", profile="reference", outcome="completed") or 0) >= 2
    assert (d.value(m, "sentinel_request_ttft_seconds_count", profile="reference") or 0) >= 1
    # The server's log lines reach the log collector through the supervisor.
    assert (d.value(m, "sentinel_sglang_log_lines_total") or 0) > 0
    excluded_before = d.value(
        m, "sentinel_load_runs_excluded_total", profile="reference", reason="restart_window"
    )

    page = HTTP.get(d.url + "/", timeout=5)
    assert page.status_code == 200
    assert "sglang-sentinel" in page.text
    assert "reference" in page.text
    status = subprocess.run(
        [sys.executable, "-m", "sglang_sentinel", "status", "--url", d.url],
        capture_output=True,
        text=True,
        timeout=30,
        env=clean_env(),
    )
    assert status.returncode in (0, 1), status.stderr
    assert "server      ready" in status.stdout

    # The server dies: the supervisor restarts it, a new epoch starts a new exclusion window.
    children = descendants(d.proc.pid)
    assert children
    for pid in children:
        os.kill(pid, signal.SIGKILL)

    def restarted() -> bool:
        restarts = (state / "restarts.jsonl").read_text().splitlines()
        m = d.metrics()
        excluded = d.value(
            m, "sentinel_load_runs_excluded_total", profile="reference", reason="restart_window"
        )
        return len(restarts) >= 2 and (excluded or 0) > (excluded_before or 0)

    d.wait("a restart and a run in its exclusion window", restarted, 45)
    restarts = [json.loads(line) for line in (state / "restarts.jsonl").read_text().splitlines()]
    assert restarts[-1]["ready_at"] > restarts[-2]["ready_at"]

    # SIGTERM: cancel the load, stop the server, exit 0, nothing left behind.
    children = descendants(d.proc.pid)
    assert d.stop() == 0
    assert not [pid for pid in children if alive(pid)]
    notify.wait_for("STOPPING=1")
    pings = [m for _, m in notify.messages if m == "WATCHDOG=1"]
    assert len(pings) >= 3
    assert any(m.startswith("STATUS=server ready") for _, m in notify.messages)

    # Load runs never overlapped (the whole history, both server lives).
    runs = [json.loads(line) for line in (state / "runs.jsonl").read_text().splitlines()]
    spans = sorted((r["started_at"], r["finished_at"]) for r in runs if r.get("kind") == "run")
    assert len(spans) >= 3
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert all(r["launch_hash"] for r in runs if r.get("kind") == "run")
    # Every record names its target: the restarted daemon below counts only its own server's.
    server_port = re.search(r"^port = (\d+)$", cfg.read_text(), re.M)
    assert server_port is not None
    assert {(r.get("server_url"), r.get("served_model")) for r in runs} == {
        (f"http://127.0.0.1:{server_port.group(1)}", "sim")
    }

    # State survives a daemon restart: history on the status page, spending in the budget.
    d2 = DaemonProcess(cfg, port, tmp_path / "daemon2.log", tolerate=_TOLERATE)
    daemons.append(d2)
    d2.wait("the exporter", lambda: HTTP.get(d2.url + "/status.json", timeout=5).status_code == 200, 30)
    snapshot = HTTP.get(d2.url + "/status.json", timeout=5).json()
    old_runs = [r for r in snapshot["schedule"]["recent"] if r.get("started_at", 0) <= spans[-1][0]]
    assert old_runs
    assert snapshot["schedule"]["budget"]["spent"] > 0

    # SIGHUP: the budget changes live; a bad edit is rejected and the daemon keeps running.
    cfg.write_text(
        cfg.read_text().replace(
            "[schedule.polite]", "[schedule.budget]\ntokens_per_hour = 4242\n\n[schedule.polite]"
        )
    )
    d2.proc.send_signal(signal.SIGHUP)
    d2.wait(
        "the reloaded budget",
        lambda: d2.value(d2.metrics(), "sentinel_budget_limit_tokens") == 4242,
        15,
    )
    cfg.write_text(cfg.read_text() + "\n[nonsense]\n")
    d2.proc.send_signal(signal.SIGHUP)
    d2.wait("the rejected reload", lambda: "reload_rejected" in d2.log.read_text(), 15)
    assert d2.value(d2.metrics(), "sentinel_budget_limit_tokens") == 4242
    assert d2.stop() == 0


def test_bad_config_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from sglang_sentinel.cli import main

    cfg = tmp_path / "bad.toml"
    cfg.write_text("[schedule.profiles.x]\ncron = 'whenever'\n")
    assert main(["run", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "schedule.profiles.x.cron" in err
    assert "Traceback" not in err
    assert main(["run", "--config", str(tmp_path / "missing.toml")]) == 2
    assert main(["run", "--listen", "nowhere"]) == 2
    assert "HOST:PORT" in capsys.readouterr().err


def test_busy_exporter_port_is_one_clean_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from sglang_sentinel.cli import main

    monkeypatch.setenv("SENTINEL_STATE_DIR", str(tmp_path / "state"))
    monkeypatch.setenv("SENTINEL_SERVER__PORT", str(free_port()))
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        assert main(["run", "--listen", f"127.0.0.1:{port}"]) == 2
    err = capsys.readouterr().err
    assert "cannot listen" in err
    assert "--listen" in err  # the way out, named
    assert "Traceback" not in err
