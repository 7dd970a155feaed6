"""The API key never leaves through any channel: the daemon on the simulator with a random key.

Channels checked: every process's argv (/proc/PID/cmdline) and environment, the daemon's log, every
file in the state directory, /metrics, /status.json, the status page, the calibration JSON, and
the JSON of ``sentinel check --json`` and ``sentinel config``. The key must still *work* (the
simulator refuses requests without it), or the test would prove nothing.
"""

from __future__ import annotations

import secrets
import stat
import subprocess
import sys
from pathlib import Path

import httpx
import pytest

from support.daemon_proc import DaemonProcess, clean_env, descendants, free_port
from support.loopback import HTTP

pytestmark = pytest.mark.slow


@pytest.mark.parametrize("via", ["config", "env"])
def test_the_api_key_leaks_through_no_channel(tmp_path: Path, daemons: list[DaemonProcess], via: str) -> None:
    """``via``: the key inline in the config, or in ``SENTINEL_SERVER__API_KEY`` (then the daemon's
    own environment holds it, which is how it was given; no child's may)."""
    key = "sk-" + secrets.token_hex(16)
    key_line = f'api_key = "{key}"' if via == "config" else ""
    env = {"SENTINEL_SERVER__API_KEY": key} if via == "env" else {}
    state = tmp_path / "state"
    server_port, exporter_port = free_port(), free_port()
    cfg = tmp_path / "sentinel.toml"
    cfg.write_text(
        f"""
state_dir = "{state}"
[log]
format = "json"
level = "debug"
[server]
profile = "fastsim"
port = {server_port}
{key_line}
stop_timeout = 5
startup_poll_interval = 0.2
[server.checks.health]
interval = 0.5
[server.profiles.fastsim]
kind = "sim"
sim_speed = 50
[exporter]
port = {exporter_port}
[schedule]
warmup_seconds = 0.3
calibrate_when_missing = false
recalibrate_cron = ""
[schedule.profiles.reference]
num_prompts = 6
request_rate = 24
input_len = 32
output_len = 16
interval_seconds = 0.7
run_on_ready = false
"""
    )
    log_path = tmp_path / "daemon.log"
    cli_outputs = []
    for argv in (["check", "--json"], ["config"]):
        out = subprocess.run(
            [sys.executable, "-m", "sglang_sentinel", *argv, "--config", str(cfg)],
            capture_output=True, text=True, timeout=120, env=clean_env(**env),
        )  # fmt: skip
        assert out.stdout.lstrip().startswith("{"), out.stderr
        cli_outputs.append(out.stdout + out.stderr)
    assert '"api_key": "<set>"' in cli_outputs[1]

    url = f"http://127.0.0.1:{exporter_port}"
    d = DaemonProcess(cfg, exporter_port, log_path, env=env, tolerate=(httpx.HTTPError,), poll=0.3)
    daemons.append(d)

    def completed_run() -> bool:
        metrics = d.metrics_text()
        return 'sentinel_load_runs_total{outcome="completed",profile="reference"} 1' in metrics or (
            'outcome="completed",profile="reference"} 2' in metrics
        )

    d.wait("a completed reference run", completed_run, 60)

    # The key is in force: the simulator (the child) refuses a request without it.
    api = f"http://127.0.0.1:{server_port}/v1/models"
    assert HTTP.get(api, timeout=5).status_code == 401
    assert HTTP.get(api, headers={"Authorization": f"Bearer {key}"}, timeout=5).status_code == 200

    channels: dict[str, str] = {"cli": "\n".join(cli_outputs)}
    for pid in (d.proc.pid, *descendants(d.proc.pid)):
        try:
            channels[f"cmdline {pid}"] = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
            if via == "config" or pid != d.proc.pid:
                channels[f"environ {pid}"] = (
                    Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace")
                )
        except OSError:
            continue  # a short-lived helper that is gone already
    assert any("sim" in v for k, v in channels.items() if k.startswith("cmdline"))
    for path in ("/metrics", "/status.json", "/", "/calibration/latest.json", "/calibration/report"):
        channels[path] = HTTP.get(url + path, timeout=10).text
    # Stop first so every buffered line (server.log, the daemon's log) is on disk.
    assert d.stop() == 0
    channels["daemon log"] = log_path.read_text(errors="replace")
    secrets_file = None
    for file in state.rglob("*"):
        if file.is_file():
            if file.name == "server-secrets.yaml":
                secrets_file = file  # the one place the key is meant to be: 0600, for the child
                continue
            channels[str(file)] = file.read_text(errors="replace")

    leaks = [name for name, text in channels.items() if key in text]
    assert leaks == []
    # The start-up line (server_args=... api_key='...') was copied, masked.
    server_log = (state / "server.log").read_text()
    assert "api_key='[redacted]'" in server_log
    # Owner-only: the state directory, server.log and the key file.
    assert stat.S_IMODE(state.stat().st_mode) == 0o700
    assert stat.S_IMODE((state / "server.log").stat().st_mode) == 0o600
    assert secrets_file is not None
    assert stat.S_IMODE(secrets_file.stat().st_mode) == 0o600
    assert key in secrets_file.read_text()
