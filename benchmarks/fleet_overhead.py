"""What one `sentinel fleet` process costs per target: CPU share and probe lag at N targets.

    .venv/bin/python benchmarks/fleet_overhead.py --targets 100 500 --interval 30 --seconds 90

Starts three simulators, then for each N a fleet whose N targets (readiness only, or with
--canaries) point at them round-robin, each under its own name; waits one interval for the
phases to spread, then measures the fleet's CPU time (utime+stime from /proc) over --seconds and
reads sentinel_fleet_probe_lag_max_seconds. Prints: targets, CPU % of one core, targets per 1 %
of a core, max lag. The simulators run in their own processes: their CPU is not counted.

Then the *change lag*: --victims more targets (not counted in N) point at a fourth simulator,
which is SIGKILLed after the CPU window; the change lag of each is the time from the kill until
its ``/probe?target=`` shows ``sentinel_probe_success{probe="readiness"} 0`` (polled every
0.1 s). Each target has its own phase, so the victims sample the spread; median and max are
printed. Bound: one interval × (1 + jitter) plus the probe's own time.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel_sim.testing import SimProcess, start_sim


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


def readiness(fleet: str, name: str) -> float | None:
    url = f"{fleet}/probe?target={name}"
    for fam in text_string_to_metric_families(httpx.get(url, timeout=5, trust_env=False).text):
        for s in fam.samples:
            if s.name == "sentinel_probe_success" and s.labels.get("probe") == "readiness":
                return float(s.value)
    return None


def change_lags(fleet: str, victim: SimProcess, n: int, interval: float) -> list[float]:
    """Seconds from the victim's SIGKILL until each victim target's /probe says not ready."""
    names = [f"v{i}" for i in range(n)]
    if not all(readiness(fleet, name) == 1 for name in names):
        return []  # not all seen ready yet: nothing to time
    victim.kill()
    t0 = time.monotonic()
    pending = set(names)
    lags: list[float] = []
    while pending and time.monotonic() - t0 < 3 * interval + 30:
        for name in sorted(pending):
            if readiness(fleet, name) == 0:
                lags.append(time.monotonic() - t0)
                pending.discard(name)
        time.sleep(0.1)
    return lags


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--targets", type=int, nargs="+", default=[100, 500])
    ap.add_argument("--interval", type=float, default=30.0)
    ap.add_argument("--seconds", type=float, default=90.0)
    ap.add_argument("--canaries", action="store_true")
    ap.add_argument(
        "--victims", type=int, default=5, help="targets on the simulator killed for the change lag"
    )
    args = ap.parse_args()
    sims = [start_sim("--speed", "100", "--lifetime", "3600", name=f"sim{i}") for i in range(3)]
    try:
        head = f"{'targets':>8} {'cpu %':>7} {'targets/1%':>11} {'max lag s':>10}"
        print(head + f" {'change lag median s':>20} {'change lag max s':>17}")
        for n in args.targets:
            victim = start_sim("--speed", "100", "--lifetime", "3600", name="victim")
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
                for i in range(args.victims):
                    lines.append(f'[[fleet.targets]]\nname = "v{i}"\nurl = "{victim.base_url}"\n')
                cfg = Path(tmp) / "fleet.toml"
                cfg.write_text("".join(lines))
                proc = subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "sglang_sentinel",
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
                    changes = change_lags(f"http://127.0.0.1:{port}", victim, args.victims, args.interval)
                    med = statistics.median(changes) if changes else float("nan")
                    top = max(changes) if changes else float("nan")
                    print(
                        f"{n:>8} {share:>7.2f} {per:>11.0f} {lag or 0:>10.3f} {med:>20.2f} {top:>17.2f}",
                        flush=True,
                    )
                finally:
                    os.killpg(proc.pid, signal.SIGTERM)
                    proc.wait(timeout=30)
                    victim.kill()
    finally:
        for s in sims:
            s.kill()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
