"""A compressed day (or more) of the daemon's life, with its footprint sampled throughout.

    .venv/bin/python benchmarks/soak.py [--wall 600] [--hours 24]

A real ``sentinel run`` daemon with ``sentinel sim`` as its child, every timer of the default
configuration divided by C = hours * 3600 / wall, and the simulator at ``--speed C``: probes
(health, health_generate, stall, canaries), scheduled reference runs, calibrations (cron every
few minutes, the cron's own granularity), server crashes (a sim ``crash`` fault every 6 simulated
hours: restarts), and config reloads (SIGHUP every 4 simulated hours). ``/status.json``'s
``daemon.process`` (RSS, open fds, threads, asyncio tasks) is sampled several times per simulated
hour; the table shows start / end / max of each per simulated hour, then the totals of what
happened.

What the compression does and does not cover, honestly: the *number* of probes, runs, restarts
and reloads matches the simulated span (the leak-prone paths run as often as in a day); what is
per-event (a task per probe, a connection per run, a subprocess per restart) is exercised in full.
What does not compress: anything that grows with wall time itself (the budget ledger's hourly
window, log rotation by size, TIME_WAIT sockets, cron jobs below one per minute). Runs are
smaller than the default profile (16 prompts at 64 req/s instead of 64 at 16/s) so that a run
fits its compressed interval on a small shared machine, and the budget is scaled by C.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx

FIELDS = ("rss_bytes", "fds", "threads", "asyncio_tasks")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def config(tmp: Path, c: float, server_port: int, control_port: int, exporter_port: int) -> str:
    def t(seconds: float, floor: float = 0.05) -> float:
        return round(max(seconds / c, floor), 3)

    return f"""
state_dir = "{tmp / "state"}"

[log]
format = "json"
level = "info"

[server]
profile = "soaksim"
port = {server_port}
stop_timeout = 5
startup_poll_interval = 0.2
start_timeout = 60

[server.profiles.soaksim]
kind = "sim"
sim_speed = {c:g}
extra_args = ["--control-port", "{control_port}"]

[server.restart]
backoff_initial = {t(5.0)}
backoff_max = {t(300.0)}
window = {t(3600.0, 1.0)}
max_restarts = 20
stable_after = {t(600.0)}

[server.checks.health]
interval = {t(10.0)}
timeout = {t(30.0, 2.0)}

[server.checks.health_generate]
interval = {t(30.0)}
timeout = {t(60.0, 2.0)}

[server.checks.stall]
interval = {t(15.0)}
timeout = {t(30.0, 2.0)}
stall_after = {t(60.0, 1.0)}

[server.checks.canary]
interval = {t(300.0)}
timeout = {t(120.0, 5.0)}
retry_interval = {t(30.0)}

[exporter]
port = {exporter_port}

[schedule]
warmup_seconds = {t(5.0)}
reference_exclusion_seconds = {t(15.0)}
calibrate_when_missing = false
recalibrate_cron = "*/4 * * * *"

[schedule.budget]
tokens_per_hour = {int(1_000_000 * c)}

[schedule.profiles.reference]
num_prompts = 16
request_rate = 64
input_len = 64
output_len = 64
interval_seconds = {t(900.0, 1.0)}
run_on_ready = false

[schedule.polite]
check_interval_seconds = {t(2.0)}

[schedule.breaker]
check_interval_seconds = {t(1.0)}

[calibration]
input_len = 64
output_len = 64
max_concurrency = 8
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--wall", type=float, default=600.0, help="real seconds to run (default 600)")
    ap.add_argument("--hours", type=float, default=24.0, help="simulated hours to cover (default 24)")
    ap.add_argument("--samples-per-hour", type=int, default=6)
    args = ap.parse_args()
    c = args.hours * 3600 / args.wall
    hour_wall = args.wall / args.hours
    tmp = Path(tempfile.mkdtemp(prefix="sentinel-soak-"))
    server_port, control_port, exporter_port = free_port(), free_port(), free_port()
    cfg = tmp / "sentinel.toml"
    cfg.write_text(config(tmp, c, server_port, control_port, exporter_port))
    log = tmp / "daemon.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sglang_sentinel", "run", "--config", str(cfg)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{exporter_port}"
    client = httpx.Client(timeout=10)

    def status() -> dict[str, Any]:
        data: dict[str, Any] = client.get(url + "/status.json").json()
        return data

    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                if status()["server"]["state"] == "ready":
                    break
            except (httpx.HTTPError, KeyError, ValueError):
                pass
            if proc.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"daemon not ready:\n{log.read_text()[-3000:]}")
            time.sleep(0.2)
        print(
            f"compression C = {c:g} (1 simulated hour = {hour_wall:.1f} s wall); state in {tmp}", flush=True
        )
        rows: list[dict[str, Any]] = []
        crashes = reloads = sample_errors = 0
        t0 = time.monotonic()
        next_crash, next_reload = 6 * hour_wall, 4 * hour_wall
        for hour in range(int(args.hours)):
            samples: list[dict[str, int]] = []
            for k in range(args.samples_per_hour):
                due = t0 + hour * hour_wall + k * hour_wall / args.samples_per_hour
                time.sleep(max(0.0, due - time.monotonic()))
                now = time.monotonic() - t0
                if now >= next_crash:
                    next_crash += 6 * hour_wall
                    try:
                        client.post(f"http://127.0.0.1:{control_port}/faults", json={"spec": "crash"})
                        crashes += 1
                    except httpx.HTTPError:
                        pass  # mid-restart: the control port is down; the next one comes
                if now >= next_reload:
                    next_reload += 4 * hour_wall
                    os.kill(proc.pid, signal.SIGHUP)
                    reloads += 1
                try:
                    samples.append(status()["daemon"]["process"])
                except (httpx.HTTPError, KeyError, ValueError):
                    sample_errors += 1
                if proc.poll() is not None:
                    raise SystemExit(f"daemon died:\n{log.read_text()[-3000:]}")
            if samples:
                rows.append({"hour": hour + 1, "samples": samples})
                print_row(rows[-1], header=len(rows) == 1)
        final = status()
        metrics = client.get(url + "/metrics").text
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
        client.close()
    totals(rows, final, metrics, log, crashes, reloads, sample_errors, proc.returncode)


def print_row(row: dict[str, Any], header: bool) -> None:
    if header:
        cols = "".join(f" | {f + ' start/end/max':>28}" for f in FIELDS)
        print(f"{'sim h':>5}{cols}")
    cells = []
    for f in FIELDS:
        vals = [s[f] for s in row["samples"] if s.get(f) is not None]
        if not vals:
            cells.append(f" | {'-':>28}")
            continue
        if f == "rss_bytes":
            start, end, peak = (f"{v / 2**20:.1f}M" for v in (vals[0], vals[-1], max(vals)))
        else:
            start, end, peak = (str(v) for v in (vals[0], vals[-1], max(vals)))
        cells.append(f" | {start + '/' + end + '/' + peak:>28}")
    print(f"{row['hour']:>5}{''.join(cells)}", flush=True)


def _sum(metrics: str, name: str, **labels: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    total = 0.0
    for family in text_string_to_metric_families(metrics):
        for s in family.samples:
            if s.name == name and all(s.labels.get(k) == v for k, v in labels.items()):
                total += s.value
    return total


def totals(
    rows: list[dict[str, Any]],
    final: dict[str, Any],
    metrics: str,
    log: Path,
    crashes: int,
    reloads: int,
    sample_errors: int,
    rc: int | None,
) -> None:
    events = [json.loads(line).get("event") for line in log.read_text().splitlines() if line.startswith("{")]
    first, last = rows[0]["samples"][0], rows[-1]["samples"][-1]
    print()
    print("first -> last sample: " + ", ".join(f"{f} {first.get(f)} -> {last.get(f)}" for f in FIELDS))
    print(
        f"server restarts (all reasons): {_sum(metrics, 'sentinel_server_restarts_total'):g}"
        f" (crash faults injected {crashes}); state at end: {final['server']['state']}"
    )
    for outcome in ("completed", "failed", "aborted", "cancelled"):
        print(f"load runs {outcome}: {_sum(metrics, 'sentinel_load_runs_total', outcome=outcome):g}")
    print(f"load runs skipped: {_sum(metrics, 'sentinel_load_skipped_total'):g}")
    for outcome in ("completed", "aborted", "failed", "cancelled", "inconclusive"):
        n = _sum(metrics, "sentinel_calibration_runs_total", outcome=outcome)
        if n:
            print(f"calibrations {outcome}: {n:g}")
    print(f"reloads: SIGHUP sent {reloads}, config_reloaded logged {events.count('config_reloaded')}")
    print(
        f"probe failures (all): {_sum(metrics, 'sentinel_probe_failures_total'):g}; "
        f"status samples failed: {sample_errors}; daemon exit status {rc}"
    )


if __name__ == "__main__":
    main()
