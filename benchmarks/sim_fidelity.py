"""Does the default simulator profile reproduce the deployment's figures?

Drives the simulator (a subprocess, so the client is not measured as the server) the way the
figures were measured (bench_serving's seed-1 random dataset, see support.sim_fidelity), at a
high ``--speed``, converts back to server time, and prints: figure | target | virtual (the engine
in virtual time) | live (over HTTP) | live error.

    .venv/bin/python benchmarks/sim_fidelity.py [--speed 20] [--profile NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from pathlib import Path

from sglang_sentinel_sim.profiles import DEFAULT_PROFILE, get_profile
from sglang_sentinel_sim.testing import spawn_sim

# The scenarios and figures are test support (tests/support/, not in the wheel).
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))
from support.sim_fidelity import TARGETS, run_live, run_virtual


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
        sim_args = ("--speed", str(args.speed), "--profile", args.profile, "--disable-access-log",
                    "--lifetime", "900")  # fmt: skip
        with spawn_sim(*sim_args, timeout=120) as sim:
            live = asyncio.run(run_live(sim.base_url, args.speed, log_text=sim.stderr_text))
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
