"""The figures the README and deploy/config.example.toml quote for a schedule profile: one run of
the profile exactly as the daemon runs it (its plan at full size, `spec_for`, the load engine)
against `sentinel sim` with the embedded default server profile.

    .venv/bin/python benchmarks/profile_figures.py                       # embedded default, reference
    .venv/bin/python benchmarks/profile_figures.py --config deploy/config.example.toml --profile burst32
    .venv/bin/python benchmarks/profile_figures.py --speed 4             # faster, figures in server time

At ``--speed 1`` (the default, what `sentinel run` starts) the figures are the simulated
deployment's in wall-clock time; at a higher speed the request rate is scaled up with it and the
figures are divided back into server time (the client then has less slack: use 1 for the docs).
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import math

from sglang_sentinel.config import load_settings
from sglang_sentinel.load import run_load
from sglang_sentinel.schedule.executor import spec_for
from sglang_sentinel.schedule.plan import plan_run
from sglang_sentinel_sim.testing import spawn_sim


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--config", default=None, help="a sentinel TOML (default: the embedded default)")
    parser.add_argument("--profile", default="reference")
    parser.add_argument("--speed", type=float, default=1.0)
    args = parser.parse_args()
    settings = load_settings(args.config, environ={})
    profile = settings.schedule.profiles[args.profile]
    plan = plan_run(args.profile, profile, 1.0)
    speed = args.speed
    with spawn_sim("--speed", str(speed), "--disable-access-log", timeout=120) as sim:
        spec = spec_for(plan, sim.base_url)
        if speed != 1.0 and math.isfinite(spec.request_rate):
            spec = dataclasses.replace(spec, request_rate=spec.request_rate * speed)
        result = asyncio.run(run_load(spec))
    m = result.metrics
    print(f"profile {args.profile}: {profile.model_dump()}")
    print(f"completed {m.completed}, failed {m.failed}, duration {m.duration * speed:.1f} s (server time)")
    print(f"output tok/s {m.output_throughput / speed:.1f}")
    print(f"total tok/s  {m.total_throughput / speed:.1f}")
    print(f"mean concurrency {m.concurrency:.1f}")
    return 0 if m.completed and not m.failed else 1


if __name__ == "__main__":
    raise SystemExit(main())
