"""Adaptive calibration sweep vs a brute-force fixed sweep, against `sentinel sim`.

    .venv/bin/python benchmarks/sweep_vs_bruteforce.py [--speed 25] [--scale 0.85]

1. Brute force: concurrency 1, 2, 4, ... 128 at 64 prompts each (closed loop, the same step
   runner and the same figures as the sweep), on the default simulator profile.
2. `sentinel sweep`'s full adaptive search on the same server.
3. A second server whose capacity differs by ``--scale`` (default 0.85, i.e. 15% less): a
   brute force there gives the new truth, then an incremental re-calibration seeded with step 2's
   result, and a full sweep for reference.

The saturation figure compared is the one the sweep reports: the best step's output throughput,
steady-state where the step held its concurrency (see `sglang_sentinel.calibrate.model`). The table also
shows bench_serving's whole-run output throughput of the brute-force sweep for reference.
Acceptance: sweep within 5% of brute force using <= 40% of its requests; incremental within 5%
of the new brute force using <= 1/3 of a full sweep's requests.

Measured 2026-11-30 on the shared 2-core host, `--speed 6` (tok/s in server time):
brute force 379.2 (512 requests); sweep 380.9 (+0.5%, 183 requests = 36%); changed server
(--max-running-requests 44, -12.3%) brute force 332.7, incremental 339.8 (+2.1%, 61 requests =
33% of the full sweep), full sweep 337.4. More in docs/calibrate.md.
"""

from __future__ import annotations

import argparse
import asyncio
import subprocess
import sys
from typing import Any

from sglang_sentinel.calibrate import (
    CalibrationResult,
    CalibrationSettings,
    LoadStepRunner,
    StepPlan,
    calibrate,
)
from sglang_sentinel.calibrate.api import base_spec
from sglang_sentinel.calibrate.judge import trusted
from sglang_sentinel.calibrate.model import StepMeasurement
from sglang_sentinel_sim.testing import start_sim

BRUTE = (1, 2, 4, 8, 16, 32, 64, 128)
PROMPTS = 64


class Sim:
    """The simulator with metrics, restartable on the same port (a "server restart" the sweep sees)."""

    def __init__(self, args: list[str], lifetime: float, port: int = 0) -> None:
        sim_args = ["--enable-metrics", "--disable-access-log", "--lifetime", str(lifetime), *args]
        # A later --port wins (argparse): the restart binds where the first run did.
        self._sim = start_sim(*sim_args, "--port", str(port), timeout=30)
        self.base_url = self._sim.base_url
        self.port = self._sim.port

    def stop(self) -> None:
        self._sim.kill()


async def brute_force(url: str, cfg: CalibrationSettings) -> list[StepMeasurement]:
    runner = LoadStepRunner(base_spec(cfg, url), cfg)
    out = []
    for c in BRUTE:
        m = await runner.run_step(StepPlan(concurrency=c, num_requests=PROMPTS, phase="escalate"))
        out.append(m)
        print(
            f"  brute c={c:<4} steady {m.steady_output_throughput or 0:8.1f}  run {m.output_throughput:8.1f} "
            f"tok/s  trusted={trusted(m, cfg)}",
            file=sys.stderr,
        )
    return out


def _best(steps: list[StepMeasurement], cfg: CalibrationSettings) -> StepMeasurement:
    # The same trust rule as the sweep's own steps (sglang_sentinel.calibrate.judge.trusted).
    return max((s for s in steps if trusted(s, cfg)), key=lambda s: s.throughput)


async def sweep(
    url: str, cfg: CalibrationSettings, previous: CalibrationResult | None = None
) -> CalibrationResult:
    def show(step: Any, _p: Any) -> None:
        m = step.measurement
        print(
            f"  {step.phase:<11} c={m.concurrency:<4} n={m.sent:<4} {m.throughput:8.1f} tok/s",
            file=sys.stderr,
        )

    return await calibrate(cfg, base_url=url, previous=previous, on_step=show)


def _sim_args(speed: float, scale: float | None, running: int, help_text: str) -> tuple[list[str], str]:
    args = ["--speed", str(speed)]
    if scale is None:
        return args, "default profile"
    if "--capacity-scale" in help_text:
        return [*args, "--capacity-scale", str(scale)], f"--capacity-scale {scale:g}"
    # Without a performance scale, cap the running batch (as a smaller KV pool or SGLang's
    # --max-running-requests would): 44 of 64 slots costs the default profile ~15% of its ceiling.
    return [*args, "--max-running-requests", str(running)], f"--max-running-requests {running}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speed", type=float, default=25.0)
    ap.add_argument(
        "--scale", type=float, default=0.85, help="capacity factor of the changed server (--capacity-scale)"
    )
    ap.add_argument(
        "--running",
        type=int,
        default=44,
        help="without --capacity-scale in the simulator: --max-running-requests of the changed server",
    )
    ap.add_argument("--skip-incremental", action="store_true")
    a = ap.parse_args()
    help_text = subprocess.run(
        [sys.executable, "-m", "sglang_sentinel", "sim", "--help"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    cfg = CalibrationSettings(metrics_interval=max(0.1, 2.0 / a.speed))
    rows: list[tuple[str, str, str, str]] = []

    sim_args, _ = _sim_args(a.speed, None, a.running, help_text)
    sim = Sim(sim_args, lifetime=1800)
    first_port = sim.port
    try:
        print("brute force, default profile", file=sys.stderr)
        bf = asyncio.run(brute_force(sim.base_url, cfg))
        print("adaptive full sweep", file=sys.stderr)
        full = asyncio.run(sweep(sim.base_url, cfg))
    finally:
        sim.stop()
    bf_best = _best(bf, cfg)
    bf_requests = PROMPTS * len(BRUTE)
    bf_run = max(s.output_throughput for s in bf)
    sat = full.saturation_output_throughput.value or 0.0
    rows.append(
        (
            "brute force (1..128 x 64)",
            f"{bf_best.throughput / a.speed:.1f}",
            str(bf_requests),
            f"c={bf_best.concurrency}",
        )
    )
    rows.append(("  bench_serving whole-run max", f"{bf_run / a.speed:.1f}", "", ""))
    err = abs(sat - bf_best.throughput) / bf_best.throughput
    rows.append(
        (
            "adaptive full sweep",
            f"{sat / a.speed:.1f}",
            str(full.requests_spent),
            f"err {err:.1%}, {full.requests_spent / bf_requests:.0%} of brute force, "
            f"knee c={full.knee_concurrency.value}, stop={full.stop_reason}",
        )
    )

    if not a.skip_incremental:
        sim_args, changed = _sim_args(a.speed, a.scale, a.running, help_text)
        # The same port: to the calibration it is the same server, changed (a result from another
        # address would rightly not seed an incremental run).
        sim = Sim(sim_args, lifetime=1800, port=first_port)
        try:
            print(f"brute force, {changed}", file=sys.stderr)
            bf2 = asyncio.run(brute_force(sim.base_url, cfg))
            print("incremental re-calibration", file=sys.stderr)
            inc = asyncio.run(sweep(sim.base_url, cfg, previous=full))
            print("full sweep on the changed server", file=sys.stderr)
            full2 = asyncio.run(sweep(sim.base_url, cfg))
        finally:
            sim.stop()
        truth2 = _best(bf2, cfg)
        s_inc = inc.saturation_output_throughput.value or 0.0
        s_full2 = full2.saturation_output_throughput.value or 0.0
        change = truth2.throughput / bf_best.throughput - 1
        rows.append(
            (
                f"brute force, {changed}",
                f"{truth2.throughput / a.speed:.1f}",
                str(bf_requests),
                f"capacity change {change:+.1%}",
            )
        )
        rows.append(
            (
                "  incremental re-calibration",
                f"{s_inc / a.speed:.1f}",
                str(inc.requests_spent),
                f"err {abs(s_inc - truth2.throughput) / truth2.throughput:.1%}, "
                f"{inc.requests_spent / full.requests_spent:.0%} of the full sweep's requests",
            )
        )
        rows.append(
            (
                "  full sweep (reference)",
                f"{s_full2 / a.speed:.1f}",
                str(full2.requests_spent),
                f"err {abs(s_full2 - truth2.throughput) / truth2.throughput:.1%}",
            )
        )

    print()
    print(
        f"sentinel sim, --speed {a.speed:g}; saturation output throughput in the server's own time "
        "(measured tok/s / speed)"
    )
    w = max(len(r[0]) for r in rows)
    print(f"{'run':<{w}}  {'sat tok/s':>10}  {'requests':>8}  notes")
    for name, val, req, note in rows:
        print(f"{name:<{w}}  {val:>10}  {req:>8}  {note}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
