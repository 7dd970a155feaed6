"""The daemon's life cycle through the real CLI on the simulator: one daemon per state directory,
only its own stored results, start-up order and early SIGTERM, a routine start and stop that says
nothing at warning, the operator's reset."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

import pytest

from support.daemon_proc import DaemonProcess, clean_env, free_port
from support.loopback import HTTP

pytestmark = pytest.mark.slow


def write_config(
    tmp_path: Path,
    state: Path,
    *,
    name: str = "sentinel.toml",
    profile: str = "fastsim",
    server: str = "",
    restart: str = "",
    exporter: str = "",
    extra: str = "",
) -> tuple[Path, int, int]:
    exporter_port, server_port = free_port(), free_port()
    cfg = tmp_path / name
    cfg.write_text(
        f"""
state_dir = "{state}"

[log]
format = "json"

[server]
profile = "{profile}"
port = {server_port}
stop_timeout = 5
startup_poll_interval = 0.2

[server.checks.health]
interval = 0.5

[server.checks.canary]
enabled = false

[server.restart]
backoff_initial = 0.2
backoff_max = 0.5
{restart}

[server.profiles.fastsim]
kind = "sim"
sim_speed = 50

[exporter]
port = {exporter_port}
{exporter}

[collectors]
enabled = ["sglang"]

[schedule]
calibrate_when_missing = false
recalibrate_cron = ""

[schedule.profiles.reference]
interval_seconds = 3600
run_on_ready = false

{server}
{extra}
"""
    )
    return cfg, exporter_port, server_port


def _ready(d: DaemonProcess, auth: tuple[str, str] | None = None) -> bool:
    return bool(d.status(auth)["server"]["state"] == "ready")


def test_a_second_daemon_on_the_same_state_dir_exits_2_naming_the_first(
    tmp_path: Path, daemons: list[DaemonProcess]
) -> None:
    state = tmp_path / "state"
    cfg, port, _ = write_config(tmp_path, state)
    first = DaemonProcess(cfg, port, tmp_path / "first.log")
    daemons.append(first)
    first.wait("ready", lambda: _ready(first))
    assert (state / "sentinel.pid").read_text().strip() == str(first.proc.pid)
    assert first.status()["daemon"]["pid"] == first.proc.pid

    # Same state_dir, its own ports: only the directory is shared.
    other, _, _ = write_config(tmp_path, state, name="other.toml")
    second = subprocess.run(
        [sys.executable, "-m", "sglang_sentinel", "run", "--config", str(other)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    assert second.returncode == 2, second.stderr
    assert f"pid {first.proc.pid}" in second.stderr
    assert str(state) in second.stderr
    assert "Traceback" not in second.stderr
    # The first one is untouched, pidfile included.
    assert _ready(first)
    assert (state / "sentinel.pid").read_text().strip() == str(first.proc.pid)
    assert first.stop() == 0
    assert not (state / "sentinel.pid").exists()


def _result(url: str, served_model: str, launch_hash: str | None, throughput: float) -> str:
    from sglang_sentinel.calibrate.model import CalibrationResult, Figure, Target, Workload

    nothing = Figure(value=None)
    now = datetime.now(UTC)
    result = CalibrationResult(
        mode="full",
        started_at=now,
        finished_at=now,
        workload=Workload(base_url=url, backend="sglang", input_len=64, output_len=64, range_ratio=0),
        slo={},
        steps=(),
        stop_reason="saturated",
        saturation_output_throughput=Figure(value=throughput),
        saturation_total_throughput=Figure(value=throughput * 2),
        knee_concurrency=Figure(value=4.0),
        max_concurrency_within_slo=nothing,
        max_rate_within_slo=nothing,
        goodput=nothing,
        requests_spent=10,
        full_sweep_requests=10,
        target=None
        if launch_hash is None
        else Target(url=url, served_model=served_model, launch_hash=launch_hash),
    )
    return result.model_dump_json()


def test_the_daemon_loads_only_its_own_calibrations_and_says_why(
    tmp_path: Path, daemons: list[DaemonProcess]
) -> None:
    from sglang_sentinel.config import load_settings
    from sglang_sentinel.supervise.launch import render_command

    state = tmp_path / "state"
    cfg, port, server_port = write_config(tmp_path, state)
    url = f"http://127.0.0.1:{server_port}"
    own_hash = render_command(load_settings(cfg, environ={}).server).config_hash
    store = state / "calibration"
    store.mkdir(parents=True)
    # Oldest first by name: the foreign ones are newer, so "latest wins" would pick them.
    (store / "calibration-20260101T000000.000000Z.json").write_text(_result(url, "sim", own_hash, 777.0))
    (store / "calibration-20260102T000000.000000Z.json").write_text(
        _result(url, "sim", "0123456789abcdef", 1.0)
    )
    (store / "calibration-20260103T000000.000000Z.json").write_text(
        _result("http://10.0.0.9:30000", "sim", own_hash, 2.0)
    )
    (store / "calibration-20260104T000000.000000Z.json").write_text(_result(url, "sim", None, 3.0))
    d = DaemonProcess(cfg, port, tmp_path / "d.log")
    daemons.append(d)
    d.wait("capacity", lambda: d.status()["capacity"]["output_throughput"] is not None)
    assert d.status()["capacity"]["output_throughput"] == 777.0
    (ignored,) = d.events("calibration_results_ignored")
    assert ignored["loaded"] == 1
    assert ignored["ignored"] == 3
    assert ignored["reasons"] == {"another launch_hash": 1, "another url": 1, "no target recorded": 1}
    latest = HTTP.get(d.url + "/calibration/latest.json", timeout=5).json()
    assert latest["saturation_output_throughput"]["value"] == 777.0
    assert d.stop() == 0


def test_foreign_run_records_are_ignored_with_counts(tmp_path: Path, daemons: list[DaemonProcess]) -> None:
    state = tmp_path / "state"
    cfg, port, server_port = write_config(tmp_path, state)
    state.mkdir()
    now = time.time()
    records = [
        {"kind": "run", "profile": "reference", "outcome": "completed", "started_at": now - 60,
         "finished_at": now - 50, "budget_tokens": 1000, "server_url": "http://10.0.0.9:30000"},
        {"kind": "run", "profile": "reference", "outcome": "completed", "started_at": now - 40,
         "finished_at": now - 30, "budget_tokens": 2000, "server_url": f"http://127.0.0.1:{server_port}"},
    ]  # fmt: skip
    (state / "runs.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    d = DaemonProcess(cfg, port, tmp_path / "d.log")
    daemons.append(d)
    d.wait("ready", lambda: _ready(d))
    (ignored,) = d.events("state_records_ignored")
    assert (ignored["file"], ignored["kept"], ignored["ignored"]) == ("runs.jsonl", 1, 1)
    recent = d.status()["schedule"]["recent"]
    assert [r["budget_tokens"] for r in recent if r.get("kind") == "run"] == [2000]
    assert d.stop() == 0


_USERS = "exporter.basic_auth_users_file"
_BAD_CONFIGS = {
    "unknown profile": ('[server]\nprofile = "nope"\n', "server.profile"),
    "canary regex": (
        '[[server.checks.canary.canaries]]\nname = "x"\nprompt = "p"\nexpect = "(("\n',
        "server.checks.canary.canaries.0.expect",
    ),
    "malformed url": ('[collectors.sglang]\nurl = "localhost:30000/metrics"\n', "collectors.sglang.url"),
    "backoff order": ("[server.restart]\nbackoff_initial = 500\nbackoff_max = 10\n", "backoff_initial"),
    "users file": ('[exporter]\nbasic_auth_users_file = "/nonexistent/users"\n', _USERS),
    "users file content": ("[exporter]\nbasic_auth_users_file = '{users}'\n", _USERS),
    "tls files": (
        '[exporter.tls]\ncert_file = "/nonexistent/c.pem"\nkey_file = "/nonexistent/k.pem"\n',
        "exporter.tls",
    ),
    "sim fault": (
        '[server]\nprofile = "faulty"\n[server.profiles.faulty]\nbase = "sim"\n'
        'extra_args = ["--fault", "meltdown"]\n',
        "unknown fault 'meltdown'",
    ),
    "sim fault parameter": (
        '[server]\nprofile = "faulty"\n[server.profiles.faulty]\nkind = "sim"\n'
        'sim_faults = ["crash:phase=lunch"]\n',
        "phase='lunch'",
    ),
    "api key file lines": ("[server]\napi_key_file = '{two_lines}'\n", "api_key_file"),
}


@pytest.mark.parametrize("case", sorted(_BAD_CONFIGS))
def test_config_and_run_reject_the_same_before_anything_starts(
    case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from sglang_sentinel.cli import main

    users = tmp_path / "users"
    users.write_text("alice-without-a-hash\n")
    two_lines = tmp_path / "key"
    two_lines.write_text("first\nsecond\n")
    body, field = _BAD_CONFIGS[case]
    state = tmp_path / "state"
    port = free_port()
    cfg = tmp_path / "bad.toml"
    cfg.write_text(
        f'state_dir = "{state}"\n'
        + body.format(users=users, two_lines=two_lines)
        + ("" if "[exporter]" in body else f"[exporter]\nport = {port}\n")
    )
    assert main(["config", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert field in err, err
    assert "Traceback" not in err

    # `run` rejects it too, before the state directory (and so before the exporter and the child).
    assert main(["run", "--config", str(cfg)]) == 2
    captured = capsys.readouterr()
    assert field in captured.err, captured.err
    assert "Traceback" not in captured.err + captured.out
    assert "exporter listening" not in captured.err + captured.out
    assert not state.exists()


def test_config_shows_the_state_dir_run_uses_and_prints_loadable_toml(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang_sentinel.cli import main

    key = tmp_path / "key"
    key.write_text("  sk-secret-from-a-file-123  \n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f"[server]\napi_key_file = '{key}'\nprofile = 'fast'\n"
        "[server.profiles.fast]\nkind = 'sim'\nsim_speed = 50\n"  # inherits the rest from "sim"
        "[schedule.budget]\ntokens_per_hour = 4242\n"
    )
    monkeypatch.setenv("STATE_DIRECTORY", str(tmp_path / "systemd-state"))
    assert main(["config", "--config", str(cfg)]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["state_dir"] == str(tmp_path / "systemd-state")
    assert doc["server"]["api_key"] == "<set>"
    assert doc["server"]["api_key_file"] == str(key)  # a path, not a secret
    assert doc["schedule"]["budget"]["tokens_per_hour"] == 4242  # "tokens" is not a secret

    assert main(["config", "--config", str(cfg), "--toml"]) == 0
    toml = capsys.readouterr().out
    assert "sk-secret" not in toml
    again = tmp_path / "again.toml"
    again.write_text(toml)
    monkeypatch.delenv("STATE_DIRECTORY")
    assert main(["config", "--config", str(again)]) == 0
    doc2 = json.loads(capsys.readouterr().out)
    assert doc2["schedule"] == doc["schedule"]
    assert doc2["server"]["profiles"] == doc["server"]["profiles"]
    assert doc2["server"]["api_key"] == "<set>"  # read again from the same api_key_file


def test_sentinel_api_key_env_is_accepted(tmp_path: Path) -> None:
    env = clean_env(SENTINEL_API_KEY="sk-from-env-12345", SENTINEL_STATE_DIR=str(tmp_path / "s"))
    done = subprocess.run(
        [sys.executable, "-m", "sglang_sentinel", "config"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "sk-from-env" not in done.stdout
    # A real typo is still refused.
    env["SENTINEL_SEVRER__PORT"] = "1"
    done = subprocess.run(
        [sys.executable, "-m", "sglang_sentinel", "config"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert done.returncode == 2
    assert "SENTINEL_SEVRER__PORT" in done.stderr


@pytest.mark.parametrize("delay", [0.3, 0.6, 0.9])
def test_sigterm_in_the_first_second_exits_0_cleanly(tmp_path: Path, delay: float) -> None:
    state = tmp_path / "state"
    cfg, _, _ = write_config(tmp_path, state)
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang_sentinel", "run", "--config", str(cfg)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        env=clean_env(),
        start_new_session=True,
    )
    try:
        time.sleep(delay)
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(10)
    text = out.decode(errors="replace")
    assert proc.returncode == 0, text
    assert "Traceback" not in text
    # Nothing left behind: the session has no other member (a started child was stopped).
    leftovers = [p for p in os.listdir("/proc") if p.isdigit() and _session(int(p)) == proc.pid]
    assert leftovers == []
    assert not (state / "sentinel.pid").exists()


def _session(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat.rsplit(")", 1)[1].split()[4])


def test_busy_server_port_flag_and_status_timeout_usage(capsys: pytest.CaptureFixture[str]) -> None:
    from sglang_sentinel.cli import main

    with pytest.raises(SystemExit) as exc:
        main(["status", "--timeout", "-1"])
    assert exc.value.code == 2
    assert "--timeout" in capsys.readouterr().err
    assert main(["run", "--server-port", "70000"]) == 2
    assert "--server-port" in capsys.readouterr().err


def _users_file(tmp_path: Path, user: str, password: str) -> Path:
    import bcrypt

    path = tmp_path / "users"
    path.write_text(f"{user}:{bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()}\n")
    return path


def test_reset_from_failed_through_sentinel_reset(tmp_path: Path, daemons: list[DaemonProcess]) -> None:
    state = tmp_path / "state"
    users = _users_file(tmp_path, "ops", "correct horse")
    password = tmp_path / "password"
    password.write_text("correct horse\n")
    cfg, port, _ = write_config(
        tmp_path,
        state,
        profile="crashy",
        # Crashes while loading, every time: one restart allowed, then the crash loop stops it.
        server='[server.profiles.crashy]\nkind = "sim"\nsim_speed = 50\nsim_faults = ["crash:phase=startup"]',
        restart="max_restarts = 1",
        exporter=f"basic_auth_users_file = '{users}'",
    )
    d = DaemonProcess(cfg, port, tmp_path / "d.log")
    daemons.append(d)
    auth = ("ops", "correct horse")
    d.wait("failed", lambda: d.status(auth)["server"]["state"] == "failed")
    (failed,) = d.events("server_failed")
    assert "sentinel reset" in failed["action"]
    crashes = _crashes(d, auth)

    # The endpoint: POST only, and never without the exporter's credentials.
    assert HTTP.post(d.url + "/reset", timeout=5).status_code == 401
    assert HTTP.get(d.url + "/reset", timeout=5, auth=auth).status_code == 405
    run = [sys.executable, "-m", "sglang_sentinel", "reset", "--url", d.url]
    refused = subprocess.run(run, capture_output=True, text=True, env=clean_env(), timeout=60)
    assert refused.returncode == 1
    assert "--user" in refused.stderr
    assert d.status(auth)["server"]["state"] == "failed"

    done = subprocess.run(
        [*run, "--user", "ops", "--password-file", str(password)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert "was failed" in done.stdout
    # Started again: it crashes again (the fault is still in its argv), so the crash count moves on.
    d.wait("a start after the reset", lambda: _crashes(d, auth) > crashes)
    d.wait("failed again", lambda: d.status(auth)["server"]["state"] == "failed")

    # SIGUSR1 is the same reset.
    crashes = _crashes(d, auth)
    d.proc.send_signal(signal.SIGUSR1)
    d.wait("a start after SIGUSR1", lambda: _crashes(d, auth) > crashes)
    assert [e["source"] for e in d.events("manual_reset")] == ["http", "SIGUSR1"]
    assert d.stop() == 0


def _crashes(d: DaemonProcess, auth: tuple[str, str]) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    text = HTTP.get(d.url + "/metrics", timeout=5, auth=auth).text
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == "sentinel_server_crashes_total"
    )


def _records(text: str) -> list[dict[str, object]]:
    """Every JSON log record of a daemon's output (a syslog ``<N>`` prefix allowed)."""
    out = []
    for line in text.splitlines():
        start = line.find("{")
        if start >= 0:
            with contextlib.suppress(ValueError):
                record = json.loads(line[start:])
                if isinstance(record, dict) and "level" in record:
                    out.append(record)
    return out


def test_a_routine_start_and_stop_logs_no_warning(tmp_path: Path, daemons: list[DaemonProcess]) -> None:
    """The embedded default (the simulator as a child), started and stopped with SIGTERM once ready,
    as systemd does: nothing in it is a problem, so nothing is said at warning or above (the README:
    a warning at stop means a real problem). On a host without an NVIDIA driver the GPU collector is
    not applicable (the simulator needs no GPU): NVML's absence is said at info."""
    state = tmp_path / "state"
    exporter, server = free_port(), free_port()
    cfg = tmp_path / "sentinel.toml"
    cfg.write_text(
        f'state_dir = "{state}"\n\n[log]\nformat = "json"\n\n[server]\nport = {server}\n\n'
        f"[exporter]\nport = {exporter}\n"
    )
    d = DaemonProcess(cfg, exporter, tmp_path / "d.log")
    daemons.append(d)
    d.wait_ready()
    assert d.stop(timeout=60) == 0, d.tail()
    records = _records(d.text())
    assert any(r.get("event") == "daemon_stopped" for r in records), d.tail()
    loud = [r for r in records if r["level"] not in ("debug", "info")]
    assert loud == [], loud
    for r in records:
        if r.get("event") == "nvml_unavailable":
            assert r["level"] == "info"


def test_a_sigterm_whose_exit_was_swallowed_still_stops_the_daemon(tmp_path: Path) -> None:
    """A SIGTERM handled inside a callback the interpreter guards (a weakref callback of the import
    system: "Exception ignored in: ...") loses its SystemExit; the request it recorded stops the
    daemon as soon as its loop takes the signals over, with status 0, instead of running on."""
    cfg, _, _ = write_config(tmp_path, tmp_path / "state")
    script = (
        "import sys\n"
        "from sglang_sentinel.cli import early_stop, main\n"
        "try:\n"
        "    early_stop.handle_sigterm(15, None)  # what a swallowed SIGTERM leaves behind\n"
        "except SystemExit:\n"
        "    pass\n"
        f"sys.exit(main(['run', '--config', {str(cfg)!r}]))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert '"signal": "SIGTERM"' in done.stderr or "signal=SIGTERM" in done.stderr, done.stderr
    assert "server_process_started" not in done.stderr  # stopped before the launch
    assert not (tmp_path / "state" / "sentinel.pid").exists()
