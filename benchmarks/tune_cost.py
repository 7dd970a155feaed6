"""`sentinel tune` vs calibrating every configuration fully, on the simulator: trial-seconds.

    .venv/bin/python benchmarks/tune_cost.py [--speed 10] [--startup-time 60] [--length 128]

The same configurations (``--moe-runner-backend`` auto/triton/flashinfer_cutedsl/flashinfer_trtllm
x ``--cuda-graph-max-bs`` 4/8/16, which the simulator's performance model reacts to; the first is
the baseline; flashinfer_trtllm answers garbage on the simulated SM120) are measured twice on the
same host:

1. ``sentinel tune`` as shipped (the CLI, as a user runs it): correctness gate, the first
   configuration's full calibration, a one-step probe for every other one (repeated in its life
   when close), the full calibration only for a new best;
2. the brute force: every configuration started, gated and calibrated fully (the same lab, the
   same full calibration the tune gives its finalists), best mean throughput wins.

Trial-seconds are server-seconds: each server life from launch to stop (what a 744B model pays
in restarts and load), summed. The table also shows the server lives, the tokens sent and the
winner each picked. Both run against the simulator as a managed child (one server at a time).

Measured 2026-12-01 on the 2-core host (load average 0.4-1.5), defaults (13 configurations,
--speed 20, --startup-time 300, 256/256 tokens, [calibration] defaults, no reference profile on
either side): race 322.9 trial-s (13 lives, 874,946 tokens) vs full calibration of every
configuration 338.1 trial-s (13 lives, 505,748 tokens): 96 %. A life's fixed cost (start 15.6 s
of ~26 s) dominates here; the race replaces the full calibration (12-14 s) by a one-step probe
(3.3 s) for all but the records (docs/tune.md, "Cost").
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from sglang_sentinel.config import load_settings
from sglang_sentinel.log import configure_logging
from sglang_sentinel.supervise.prelaunch import render_launch_command
from sglang_sentinel.tune.driver import new_doc
from sglang_sentinel.tune.space import expand, space_values
from sglang_sentinel.tune.trial import ServerLab


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _config(directory: Path, args: argparse.Namespace, backends: list[str]) -> Path:
    cfg = directory / "tune.toml"
    cfg.write_text(
        f"""
state_dir = "{directory}/state"
[server]
port = {_port()}
startup_poll_interval = 0.1
stop_timeout = 10
[server.profiles.sim]
extra_args = ["--speed", "{args.speed:g}", "--startup-time", "{args.startup_time:g}",
              "--sglang-version", "0.5.9"]
[calibration]
input_len = {args.length}
output_len = {args.length}
{f"max_requests = {args.max_requests}" if args.max_requests else ""}
metrics_interval = {1.0 / args.speed:g}
[schedule.profiles.reference]
num_prompts = 16
input_len = {args.length}
output_len = {args.length}
[tune]
search = "{args.search}"
# The brute force runs no reference profile: neither does the tune here, so both pay the same
# per life but for what the search itself saves.
reference_profile = ""
[tune.space]
"--moe-runner-backend" = [{", ".join(f'"{b}"' for b in backends)}]
"--cuda-graph-max-bs" = [4, 8, 16]
"""
    )
    return cfg


def run_tune(cfg: Path) -> tuple[dict[str, Any], float]:
    t0 = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "sglang_sentinel", "tune", "--config", str(cfg), "--json", "--new"],
        capture_output=True,
        text=True,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")},
    )
    if proc.returncode != 0:
        sys.exit(f"sentinel tune failed ({proc.returncode}): {proc.stderr[-2000:]}")
    return json.loads(proc.stdout), time.monotonic() - t0


async def run_brute(cfg: Path) -> tuple[list[dict[str, Any]], float, int]:
    settings = load_settings(cfg)
    tune = settings.tune
    base = await render_launch_command(settings.server)
    lab = ServerLab(
        settings.server,
        base,
        tune,
        settings.calibration,
        directory=Path(tempfile.mkdtemp(dir=settings.state_dir)),
        reference=None,
    )
    configs = expand(tune)
    doc = new_doc(
        "brute",
        tune,
        space=space_values(tune),
        configs=configs,
        argvs=[lab.argv_for(c) for c in configs],
        base_argv=list(base.argv),
        sglang_version=None,
        fp="",
    )
    spent, tokens = 0.0, 0
    for trial in doc["trials"]:
        result = await lab.life(trial, gate=True, kinds=["full"], checkpoint=lambda: None)
        spent += result.trial_s
        tokens += result.tokens
        trial["status"] = "measured" if result.outcome == "ok" else result.outcome
    return doc["trials"], spent, tokens


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--speed", type=float, default=20.0, help="simulator speed (every duration / S)")
    ap.add_argument("--backends", default="auto,triton,flashinfer_cutedsl,flashinfer_trtllm")
    ap.add_argument(
        "--startup-time", type=float, default=300.0, help="server seconds from launch to ready (sim)"
    )
    ap.add_argument("--length", type=int, default=256, help="input and output tokens per request")
    ap.add_argument(
        "--max-requests", type=int, default=0, help="[calibration] max_requests (0: the default, 2000)"
    )
    ap.add_argument("--search", choices=("race", "halving"), default="race", help="[tune] search")
    args = ap.parse_args()
    configure_logging("warning", "console")
    backends = args.backends.split(",")
    with tempfile.TemporaryDirectory() as tmp:
        cfg = _config(Path(tmp), args, backends)
        doc, tune_wall = run_tune(cfg)
        t0 = time.monotonic()
        trials, brute_s, brute_tokens = asyncio.run(run_brute(cfg))
        brute_wall = time.monotonic() - t0
    measured = [t for t in trials if t["status"] == "measured" and t["rounds"]]
    best = max(measured, key=lambda t: t["rounds"][-1]["throughput_tok_s"])
    by_id = {t["id"]: t for t in doc["trials"]}
    tune_lives = sum(t["starts"] for t in doc["trials"])
    tune_s = doc["budget"]["spent_time_s"]
    winner = by_id[doc["winner"]]["label"] if doc["winner"] else "none"
    print(
        f"{len(trials)} configurations, simulator --speed {args.speed:g} --startup-time "
        f"{args.startup_time:g}, {args.length}/{args.length} tokens, max_requests {args.max_requests}, "
        f"search {args.search}"
    )
    print(f"{'':<22}{'trial-s':>10}{'wall s':>9}{'lives':>7}{'tokens':>10}  winner")
    tune_tokens = doc["budget"]["spent_tokens"]
    row = "{:<22}{:>10.1f}{:>9.1f}{:>7}{:>10}  {}"
    print(row.format("sentinel tune", tune_s, tune_wall, tune_lives, tune_tokens, winner))
    print(row.format("full calibration, all", brute_s, brute_wall, len(trials), brute_tokens, best["label"]))
    share = f"{tune_s / brute_s:.0%} of the trial-seconds, {tune_tokens / brute_tokens:.0%} of the tokens"
    print(f"tune / full: {share}")
    print(f"tune's verdict: {doc['winner_reason']}")


if __name__ == "__main__":
    main()
