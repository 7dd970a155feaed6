"""The README's first command, timed: how long until `sentinel run` (embedded default) shows each
thing the acceptance asks for on /metrics.

    .venv/bin/python benchmarks/daemon_startup.py            # the embedded default, real-time sim
    .venv/bin/python benchmarks/daemon_startup.py --limit 180

Runs `sentinel run` with nothing but the built-in defaults, except what must not collide with other
processes on the machine (exporter and server ports: free ones; the state directory: a temporary
one), polls /metrics every 0.5 s and prints one table: seconds from launch to the exporter answering,
the server ready, the first probe and canary results, the GPU collector's status, the first completed
reference run (with its figures), then the SIGTERM stop time. Exit status 1 if anything did not
appear within --limit seconds (the acceptance says two minutes).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def scrape(url: str) -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    out = {}
    for family in text_string_to_metric_families(httpx.get(url, timeout=5).text):
        for s in family.samples:
            out[(s.name, frozenset(s.labels.items()))] = s.value
    return out


def get(m: dict[tuple[str, frozenset[tuple[str, str]]], float], name: str, **labels: str) -> float | None:
    return m.get((name, frozenset(labels.items())))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--limit", type=float, default=120.0, help="seconds allowed (default 120)")
    args = parser.parse_args()
    port = free_port()
    state = Path(tempfile.mkdtemp(prefix="sentinel-startup-"))
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    env.update(
        SENTINEL_STATE_DIR=str(state), SENTINEL_SERVER__PORT=str(free_port()), SENTINEL_LOG__FORMAT="json"
    )
    log = (state / "daemon.log").open("wb")
    t0 = time.monotonic()
    proc = subprocess.Popen(
        [sys.executable, "-m", "sglang_sentinel", "run", "--listen", f"127.0.0.1:{port}"],
        stdout=log,
        stderr=subprocess.STDOUT,
        env=env,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}/metrics"
    seen: dict[str, float] = {}
    figures: dict[str, float | None] = {}
    wanted = ("exporter", "server ready", "health probe", "canary", "gpu collector status", "reference run")
    try:
        while time.monotonic() - t0 < args.limit and len(seen) < len(wanted):
            if proc.poll() is not None:
                break
            try:
                m = scrape(url)
            except httpx.HTTPError:
                time.sleep(0.5)
                continue
            now = time.monotonic() - t0
            checks = {
                "exporter": True,
                "server ready": get(m, "sentinel_server_state", state="ready") == 1,
                "health probe": get(m, "sentinel_probe_success", probe="health") is not None,
                "canary": get(m, "sentinel_probe_success", probe="canary_arithmetic") is not None,
                "gpu collector status": get(m, "sentinel_collector_success", collector="gpu") is not None,
                "reference run": (
                    get(m, "sentinel_load_runs_total", profile="reference", outcome="completed") or 0
                )
                >= 1,
            }
            for key, ok in checks.items():
                if ok and key not in seen:
                    seen[key] = now
            if "reference run" in seen and not figures:
                figures = {
                    "output tok/s": get(
                        m, "sentinel_load_output_throughput_tokens_per_second", profile="reference"
                    ),
                    "total tok/s": get(
                        m, "sentinel_load_total_throughput_tokens_per_second", profile="reference"
                    ),
                    "mean concurrency": get(m, "sentinel_load_concurrency_mean", profile="reference"),
                    "client-bound": get(m, "sentinel_load_client_bound", profile="reference"),
                    "gpu collector success": get(m, "sentinel_collector_success", collector="gpu"),
                }
            time.sleep(0.5)
    finally:
        stop_t = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        try:
            code = proc.wait(60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            code = -9
        stop_s = time.monotonic() - stop_t
        log.close()
    print(f"{'milestone':<28}{'seconds after launch':>22}")
    for key in wanted:
        value = f"{seen[key]:.1f}" if key in seen else "MISSING"
        print(f"{key:<28}{value:>22}")
    print(f"{'SIGTERM -> exit (code ' + str(code) + ')':<28}{stop_s:>22.1f}")
    for key, val in figures.items():
        print(f"{'  ' + key:<28}{'—' if val is None else f'{val:.1f}':>22}")
    print(f"(daemon log: {state / 'daemon.log'})")
    return 0 if len(seen) == len(wanted) and code == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
