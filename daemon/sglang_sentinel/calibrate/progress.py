"""Progress of a sweep: one line per finished step, and a live bar on a TTY.

Step lines go to stdout on any stream (they are the sweep's running log); the bar is drawn on
stderr only when stderr is a terminal, redrawn in place, and erased before each step line.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from typing import TextIO

from sglang_sentinel.calibrate.model import Step, StepPlan
from sglang_sentinel.calibrate.runner import LoadStepRunner
from sglang_sentinel.calibrate.search import Progress

__all__ = ["SweepProgress", "format_step"]

_BAR = 24


def format_step(step: Step) -> str:
    m = step.measurement
    kind = "steady" if m.steady_output_throughput is not None else "run"
    parts = [
        f"step {step.index:>2} {step.phase:<11} c={m.concurrency:<4} n={m.sent:<4}",
        f"{m.throughput:8.1f} out tok/s ({kind}) {m.throughput_total:8.1f} total",
    ]
    if m.ttft is not None:
        parts.append(f"TTFT p50/p99 {m.ttft.p50 * 1e3:.0f}/{m.ttft.p99 * 1e3:.0f} ms")
    if m.tpot is not None:
        parts.append(f"TPOT p50/p99 {m.tpot.p50 * 1e3:.0f}/{m.tpot.p99 * 1e3:.0f} ms")
    srv = m.server
    if srv is not None and srv.samples:
        parts.append(f"queue {srv.queue_mean or 0:.1f} KV {srv.token_usage_max or 0:.2f}")
    if m.failed:
        parts.append(f"failed {m.failed}")
    verdict = []
    if not step.trusted:
        verdict.append("UNTRUSTED" + (" (client-bound)" if m.client_bound else ""))
    if step.saturated:
        verdict.append("SATURATED: " + "; ".join(step.saturation_reasons))
    if not step.slo_ok:
        verdict.append("SLO violated: " + "; ".join(step.slo_violations))
    return " | ".join(parts) + (" -> " + " / ".join(verdict) if verdict else "")


class SweepProgress:
    def __init__(
        self, runner: LoadStepRunner | None = None, out: TextIO | None = None, err: TextIO | None = None
    ) -> None:
        self.runner = runner
        self.out = out if out is not None else sys.stdout
        self.err = err if err is not None else sys.stderr
        self.tty = self.err.isatty()
        self._plan: StepPlan | None = None
        self._progress: Progress | None = None
        self._task: asyncio.Task[None] | None = None

    def on_plan(self, plan: StepPlan, progress: Progress) -> None:
        self._plan = plan
        self._progress = progress

    def on_step(self, step: Step, progress: Progress) -> None:
        self._plan = None
        self._clear()
        print(
            f"{format_step(step)}   [{progress.requests_spent}/{progress.requests_budget} requests]",
            file=self.out,
            flush=True,
        )

    def _clear(self) -> None:
        if self.tty:
            self.err.write("\r\x1b[2K")
            self.err.flush()

    def _draw(self) -> None:
        plan, prog, runner = self._plan, self._progress, self.runner
        if plan is None or prog is None:
            return
        counters = runner.counters if runner is not None else None
        done = counters.completed + counters.failed if counters is not None else 0
        frac = min(1.0, done / plan.num_requests)
        bar = "#" * int(frac * _BAR) + "-" * (_BAR - int(frac * _BAR))
        line = f"[{bar}] {plan.phase} c={plan.concurrency} {done}/{plan.num_requests}"
        if counters is not None:
            line += (
                f" in flight {counters.in_flight} failed {counters.failed}"
                f" out tokens {counters.output_tokens}"
            )
        line += f"  (sweep: {prog.requests_spent}/{prog.requests_budget} requests)"
        self.err.write("\r\x1b[2K" + line)
        self.err.flush()

    async def _loop(self) -> None:
        while True:
            self._draw()
            await asyncio.sleep(0.25)

    async def __aenter__(self) -> SweepProgress:
        if self.tty:
            self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._clear()
