"""Does the default simulator profile reproduce the deployment's figures?

Drives ``sentinel sim`` (a subprocess, so the client is not measured as the server) the way the
figures were measured (bench_serving's seed-1 random dataset, see sentinel.sim.fidelity), at a
high ``--speed``, converts back to server time, and prints: figure | target | virtual (the engine
in virtual time) | live (over HTTP) | live error.

    .venv/bin/python benchmarks/sim_fidelity.py [--speed 20] [--profile NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from sentinel.sim.fidelity import TARGETS, run_live, run_virtual
from sentinel.sim.profiles import DEFAULT_PROFILE, get_profile


def _wait_healthy(base_url: str, proc: subprocess.Popen[bytes], timeout: float = 120.0) -> None:
    """Poll /health until 200; the port refuses connections while "weights load"."""
    import httpx

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"sentinel sim exited with {proc.returncode}")
        try:
            if httpx.get(base_url + "/health", timeout=30).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise SystemExit("sentinel sim did not become ready")


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--speed", type=float, default=20.0)
    parser.add_argument("--profile", default=DEFAULT_PROFILE)
    parser.add_argument("--virtual-only", action="store_true")
    args = parser.parse_args()
    virtual = run_virtual(get_profile(args.profile))
    live: dict[str, float] = {}
    if not args.virtual_only:
        with tempfile.TemporaryDirectory() as tmp:
            ready = Path(tmp) / "ready.json"
            err_path = Path(tmp) / "stderr"
            with err_path.open("wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "sentinel", "sim", "--port", "0", "--ready-file", str(ready),
                     "--speed", str(args.speed), "--profile", args.profile, "--disable-access-log",
                     "--lifetime", "900"],
                    stdout=subprocess.DEVNULL, stderr=err,
                )  # fmt: skip
                try:
                    while not ready.exists():
                        if proc.poll() is not None:
                            raise SystemExit(f"sentinel sim exited: {err_path.read_text()[-2000:]}")
                        time.sleep(0.05)
                    info = json.loads(ready.read_text())
                    _wait_healthy(info["base_url"], proc)
                    live = asyncio.run(
                        run_live(
                            info["base_url"],
                            args.speed,
                            log_text=lambda: err_path.read_text(errors="replace"),
                        )
                    )
                finally:
                    proc.kill()
                    proc.wait()
    print(f"profile {args.profile}, speed {args.speed:g} (figures in server time)")
    print(f"{'figure':<24} {'target':>9} {'virtual':>9} {'live':>9} {'live err':>9}")
    for key, target in TARGETS.items():
        v = virtual[key]
        lv = live.get(key)
        lv_s = f"{lv:9.2f}" if lv is not None else f"{'-':>9}"
        err_s = f"{(lv / target - 1) * 100:+8.1f}%" if lv is not None else f"{'-':>9}"
        print(f"{key:<24} {target:9.2f} {v:9.2f} {lv_s} {err_s}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
