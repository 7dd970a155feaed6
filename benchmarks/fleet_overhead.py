"""What one `sentinel fleet` process costs per target: CPU share and probe lag at N targets.

    .venv/bin/python benchmarks/fleet_overhead.py --targets 100 500 --interval 30 --seconds 90

Starts three simulators, then for each N a fleet whose N targets (readiness only, or with
--canaries) point at them round-robin, each under its own name; waits one interval for the
phases to spread, then measures the fleet's CPU time (utime+stime from /proc) over --seconds and
reads sentinel_fleet_probe_lag_max_seconds. Prints: targets, CPU % of one core, targets per 1 %
of a core, max lag. The simulators run in their own processes: their CPU is not counted.
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

from sentinel_sim.testing import start_sim


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def metric(url: str, name: str) -> float | None:
    for fam in text_string_to_metric_families(httpx.get(url, timeout=5, trust_env=False).text):
        for s in fam.samples:
            if s.name == name:
                return float(s.value)
    return None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", type=int, nargs="+", default=[100, 500])
    ap.add_argument("--interval", type=float, default=30.0)
    ap.add_argument("--seconds", type=float, default=90.0)
    ap.add_argument("--canaries", action="store_true")
    args = ap.parse_args()
    sims = [start_sim("--speed", "100", "--lifetime", "3600", name=f"sim{i}") for i in range(3)]
    try:
        print(f"{'targets':>8} {'cpu %':>7} {'targets/1%':>11} {'max lag s':>10}")
        for n in args.targets:
            with tempfile.TemporaryDirectory() as tmp:
                port = free_port()
                lines = [
                    f"[fleet]\ninterval = {args.interval}\nmax_concurrency = 1024\n",
                    f"[fleet.canary]\nenabled = {str(args.canaries).lower()}\n",
                    f"[exporter]\nport = {port}\n",
                ]
                for i in range(n):
                    url = sims[i % 3].base_url
                    lines.append(f'[[fleet.targets]]\nname = "t{i}"\nurl = "{url}"\n')
                cfg = Path(tmp) / "fleet.toml"
                cfg.write_text("".join(lines))
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "sentinel",
                        "fleet",
                        "--config",
                        str(cfg),
                        "--log-level",
                        "warning",
                    ],
                    start_new_session=True,
                )
                try:
                    time.sleep(args.interval + 2)  # every target has had its first round
                    c0, t0 = cpu_seconds(proc.pid), time.monotonic()
                    time.sleep(args.seconds)
                    c1, t1 = cpu_seconds(proc.pid), time.monotonic()
                    lag = metric(f"http://127.0.0.1:{port}/metrics", "sentinel_fleet_probe_lag_max_seconds")
                    share = 100 * (c1 - c0) / (t1 - t0)
                    per = n / share if share > 0 else float("inf")
                    print(f"{n:>8} {share:>7.2f} {per:>11.0f} {lag or 0:>10.3f}", flush=True)
                finally:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=30)
    finally:
        for s in sims:
            s.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
