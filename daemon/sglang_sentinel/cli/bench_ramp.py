"""Ramps: several `--request-rate` or `--max-concurrency` values, one run per value.

bench_serving 0.5.23 takes one value of each; a ramp there is a shell loop over separate runs,
one result block and one `--output-file` line each. `sentinel bench --request-rate 1 2 4 8`
does that loop itself, and the same for `--max-concurrency 1 4 16`: each step is a whole run
with every other flag unchanged (its own `--num-prompts` or `--duration`, so `--duration 30`
is 30 s per step), printed as its own block (a `Ramp step` line above it) and appended as its own
JSON line (with ``ramp_step``), and a summary table of the steps closes the output. The warm-up
runs before the first step only: the server is warm for the rest. Step k draws its prompts with
seed ``--seed + k - 1`` (fresh prompts, no prefix-cache hits on an earlier step's; a mooncake
trace's prompts are the trace's; an agentic trace's step k starts ``(k - 1) x --num-prompts``
conversations further, as bench_serving's --dataset-offset does for sweeps). A failed step
(nothing completed) ends the ramp. One value is a plain run.
"""

from __future__ import annotations

import argparse
import copy
import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from sglang_sentinel.cli.common import CliError

if TYPE_CHECKING:
    from sglang_sentinel.load.result import RunResult

__all__ = ["StepValues", "format_ramp_summary", "ramp_steps"]


class StepValues(argparse.Action):
    """One value or several: `dest` gets the first (what a single run reads), `<dest>_steps` all."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        items = list(values) if isinstance(values, list | tuple) else [values]
        setattr(namespace, self.dest, items[0])
        setattr(namespace, self.dest + "_steps", items)


def ramp_steps(args: argparse.Namespace) -> list[tuple[str, argparse.Namespace]]:
    """One (label, namespace) per step; empty when the run is not a ramp. Exit 2 for a bad ramp."""
    rates: list[float] = getattr(args, "request_rate_steps", None) or []
    concs: list[int] = getattr(args, "max_concurrency_steps", None) or []
    if len(rates) > 1 and len(concs) > 1:
        raise CliError("ramp one of --request-rate and --max-concurrency at a time, not both", 2)
    if len(rates) > 1 and args.dataset_name == "mooncake":
        raise CliError(
            "a --request-rate ramp does not go with --dataset-name mooncake (the trace sets it)", 2
        )
    if len(rates) <= 1 and len(concs) <= 1:
        return []
    flag, values = ("--request-rate", rates) if len(rates) > 1 else ("--max-concurrency", concs)
    steps: list[tuple[str, argparse.Namespace]] = []
    for k, value in enumerate(values):
        ns = copy.copy(args)
        if flag == "--request-rate":
            ns.request_rate = value
        else:
            ns.max_concurrency = value
        if k > 0:
            ns.warmup_requests = 0
            # Other prompts per step (same lengths): with the same seed each step would resend
            # the previous one's prompts and read the prefix cache's hits as speed.
            ns.seed = args.seed + k
            if args.dataset_name == "agentic-trace":
                # What bench_serving's --dataset-offset is for: each sweep step on fresh
                # conversations (the next --num-prompts of the trace, wrapping around).
                ns.dataset_offset = args.dataset_offset + k * (args.num_prompts or 1000)
        ns.ramp_step = k + 1
        # One CSV/HTML per step (report.csv -> report-step2.csv): each is one run's requests and
        # plots; a shared file would hold only the last step's.
        for attr in ("output_csv", "output_html"):
            path = getattr(args, attr, None)
            if path is not None:
                setattr(ns, attr, path.with_name(f"{path.stem}-step{k + 1}{path.suffix}"))
        steps.append((f"{flag} {value:g}", ns))
    return steps


def format_ramp_summary(steps: list[tuple[str, RunResult]]) -> str:
    """One row per step run: the load it was, and the figures that move along a ramp."""
    header = (
        "step",
        "load",
        "completed",
        "req/s",
        "out tok/s",
        "TTFT mean",
        "TTFT p99",
        "TPOT mean",
        "ITL p99",
        "E2E mean",
        "client-bound",
    )
    rows: list[tuple[str, ...]] = [header]
    for k, (label, result) in enumerate(steps, 1):
        m = result.metrics

        def ms(x: float) -> str:
            return f"{x * 1e3:.2f}" if math.isfinite(x) else "n/a"

        rows.append(
            (
                str(k),
                label,
                str(m.completed),
                f"{m.request_throughput:.2f}",
                f"{m.output_throughput:.2f}",
                ms(m.ttft.mean),
                ms(m.ttft.p99),
                ms(m.tpot.mean),
                ms(m.itl.p99),
                ms(m.e2e.mean),
                "YES" if m.client_bound else "no",
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(header))]
    lines = ["", "{s:{c}^{n}}".format(s=" Ramp Summary (latencies in ms) ", n=50, c="=")]
    lines += ["  ".join(cell.ljust(w) for cell, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    lines.append("=" * 50)
    return "\n".join(lines)
