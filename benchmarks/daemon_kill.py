"""How long a managed server outlives a SIGKILLed sentinel, and how soon the next sentinel serves.

    .venv/bin/python benchmarks/daemon_kill.py [--rounds 3]

Each round: ``sentinel run`` with ``sentinel sim`` as its child; once ready, SIGKILL the daemon
alone (the server leads its own session, so nothing else reaches it); time until the server
process is gone (PR_SET_PDEATHSIG, supervise/pdeath.py); then start a second daemon on the same
config and port and time it to ``ready`` (before the fix the orphan kept the port and the second
daemon ended in ``failed``).
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

import httpx


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def start(cfg: Path, log: Path) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    with log.open("ab") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "sglang_sentinel", "run", "--config", str(cfg)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )


def wait_ready(url: str, timeout: float = 60) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        try:
            if httpx.get(url + "/status.json", timeout=2).json()["server"]["state"] == "ready":
                return time.monotonic() - t0
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(0.02)
    raise SystemExit("not ready")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    print(f"{'round':>5} {'server gone after SIGKILL ms':>29} {'next daemon ready s':>20}")
    for n in range(args.rounds):
        tmp = Path(tempfile.mkdtemp(prefix="sentinel-kill-"))
        exporter = free_port()
        cfg = tmp / "sentinel.toml"
        cfg.write_text(
            f'state_dir = "{tmp / "state"}"\n[server]\nprofile = "s"\nport = {free_port()}\n'
            f'startup_poll_interval = 0.05\n[server.profiles.s]\nkind = "sim"\nsim_speed = 50\n'
            f"[exporter]\nport = {exporter}\n"
            '[schedule]\ncalibrate_when_missing = false\nrecalibrate_cron = ""\n'
            "[schedule.profiles.reference]\ninterval_seconds = 3600\nrun_on_ready = false\n"
        )
        url = f"http://127.0.0.1:{exporter}"
        first = start(cfg, tmp / "daemon.log")
        wait_ready(url)
        pid = int(json.loads((tmp / "state" / "server.pid").read_text())["pid"])
        t0 = time.monotonic()
        os.kill(first.pid, signal.SIGKILL)
        while alive(pid) and time.monotonic() - t0 < 30:
            time.sleep(0.001)
        gone = time.monotonic() - t0
        first.wait(10)
        second = start(cfg, tmp / "daemon.log")
        try:
            ready = wait_ready(url)
        finally:
            second.send_signal(signal.SIGTERM)
            second.wait(30)
        print(f"{n + 1:>5} {gone * 1000:>29.1f} {ready:>20.2f}")


if __name__ == "__main__":
    main()
