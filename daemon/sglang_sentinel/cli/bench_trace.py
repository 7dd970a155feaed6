"""`sentinel bench --dataset-name mooncake`: bench_serving's trace-replay flags and their checks.

Same flags and meanings as bench_serving 0.5.23 (`--mooncake-slowdown-factor`,
`--mooncake-num-rounds`, `--mooncake-workload`, `--use-trace-timestamps`); what it does not do:
download the trace (`--dataset-path` is required), and replay on a backend other than `sglang`
(bench_serving's other backends fail on the trace's rows, so it is refused up front). The
replay itself is `sglang_sentinel.load.trace`.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING

from sglang_sentinel.cli.common import CliError, bounded

if TYPE_CHECKING:
    from sglang_sentinel.load.spec import Backend, MooncakeDataset

__all__ = ["add_trace_options", "check_trace_flags", "mooncake_dataset", "trace_warnings"]

# bench_serving's --mooncake-workload choices: which trace it downloads without --dataset-path.
_WORKLOADS = ("mooncake", "conversation", "synthetic", "toolagent")


def add_trace_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("trace replay (--dataset-name mooncake)")
    g.add_argument(
        "--use-trace-timestamps",
        action="store_true",
        help="mooncake: the trace's timestamps drive arrivals (always so; the rate prints as 'trace')",
    )
    g.add_argument(
        "--mooncake-slowdown-factor",
        type=bounded(float, ge=0),
        default=1.0,
        help="replay time scale: 2 is twice as slow (--request-rate is ignored)",
    )
    g.add_argument(
        "--mooncake-num-rounds",
        type=bounded(int, ge=1),
        default=1,
        help="rounds per session, sent together, each with the previous rounds as history",
    )
    g.add_argument(
        "--mooncake-workload",
        choices=_WORKLOADS,
        default="conversation",
        help="the trace bench_serving would download; sentinel bench needs --dataset-path",
    )


def mooncake_dataset(args: argparse.Namespace, backend: Backend) -> tuple[MooncakeDataset, int]:
    """The dataset and its request count (sessions x rounds); the whole file is checked here,
    so a bad line stops the command (exit 2, file:line) before anything is sent."""
    from sglang_sentinel.load.spec import Backend, MooncakeDataset
    from sglang_sentinel.load.trace import load_mooncake

    if args.dataset_path is None:
        raise CliError(
            "--dataset-name mooncake needs --dataset-path: bench_serving downloads the "
            f"{args.mooncake_workload!r} trace (--mooncake-workload); sentinel bench downloads nothing",
            2,
        )
    if backend is not Backend.SGLANG:
        raise CliError(
            "--dataset-name mooncake needs --backend sglang: bench_serving replays traces on the "
            "native route only (its other backends fail on the trace's rows)",
            2,
        )
    if args.arrival is not None:
        raise CliError("--arrival does not go with --dataset-name mooncake: the trace's timestamps are", 2)
    factor = args.mooncake_slowdown_factor
    if not (factor >= 0 and math.isfinite(factor)):
        raise CliError(f"--mooncake-slowdown-factor must be a number >= 0, got {factor:g}", 2)
    if args.mooncake_num_rounds < 1:
        raise CliError(f"--mooncake-num-rounds must be >= 1, got {args.mooncake_num_rounds}", 2)
    if not args.dataset_path.is_file():
        raise CliError(f"dataset file not found: {args.dataset_path}", 2)
    ds = MooncakeDataset(
        args.dataset_path,
        # bench_serving keeps the first --num-prompts lines (default 1000).
        max_sessions=args.num_prompts if args.num_prompts is not None else 1000,
        slowdown_factor=args.mooncake_slowdown_factor,
        num_rounds=args.mooncake_num_rounds,
    )
    return ds, len(load_mooncake(ds)) * ds.num_rounds


def trace_warnings(args: argparse.Namespace) -> list[str]:
    """What bench_serving ignores in trace mode and says so (it prints a line; so do we)."""
    if args.dataset_name == "mooncake" and math.isfinite(args.request_rate):
        return [
            "--request-rate is ignored with --dataset-name mooncake: the trace's timestamps are the arrivals"
        ]
    return []


def check_trace_flags(args: argparse.Namespace) -> None:
    """bench_serving documents --use-trace-timestamps as valid for mooncake only."""
    if args.use_trace_timestamps and args.dataset_name != "mooncake":
        raise CliError(
            "--use-trace-timestamps needs --dataset-name mooncake (the only dataset with timestamps)", 2
        )
