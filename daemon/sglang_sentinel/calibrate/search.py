"""The adaptive search: geometric escalation, then bisection, under a request and time budget.

Against a step runner (the load engine in production, a synthetic server in unit tests):

1. **Escalate**: concurrency ``start, start*g, start*g², …`` (``g = growth_factor``) until a step is
   saturated (see ``judge``), the error ratio breaks the SLO, the client is the bottleneck, the
   latency SLO is broken with ``stop_at_slo``, ``max_concurrency`` is reached, or the budget ends.
2. **Refine**: bisect (geometric midpoint) the widest open bracket — the knee (last step below
   ``knee_fraction`` of the ceiling, first step at or above it) and the SLO boundary (last step
   meeting the SLO, first step violating it) — until each bracket's ratio is within
   ``resolution`` or the budget ends.

Incremental mode (seeded with a previous result) skips the escalation from the bottom: it
re-probes the concurrency at which the previous run saturated, escalates from there only if the
server no longer saturates, re-probes the previous knee, then refines as above — all within
``incremental_budget_ratio`` of the last full sweep's requests.

Why steps are sized in requests per concurrency slot rather than seconds: request counts are what
the acceptance budget and the operator's GPU bill are counted in, and a closed loop of
``c`` slots reaches its steady state after the opening burst regardless of the server's speed.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Protocol

from sglang_sentinel.calibrate.judge import client_limited, judge_saturation, judge_slo, trusted
from sglang_sentinel.calibrate.model import (
    CalibrationResult,
    Figure,
    Phase,
    Step,
    StepMeasurement,
    StepPlan,
    StopReason,
    Workload,
)
from sglang_sentinel.calibrate.settings import CalibrationSettings

__all__ = ["PlanCallback", "Progress", "StepCallback", "StepRunner", "run_search", "step_requests"]


class StepRunner(Protocol):
    """Runs one step: ``plan.num_requests`` requests with ``plan.concurrency`` in flight."""

    async def run_step(self, plan: StepPlan) -> StepMeasurement: ...


@dataclass(frozen=True, slots=True)
class Progress:
    requests_spent: int
    requests_budget: int
    elapsed: float
    max_duration: float


StepCallback = Callable[[Step, Progress], None]
PlanCallback = Callable[[StepPlan, Progress], None]


def step_requests(concurrency: int, settings: CalibrationSettings) -> int:
    return max(settings.step_min_requests, math.ceil(concurrency * settings.step_requests_per_slot))


# Re-probe this far above the running-request cap the server showed when it queued.
_QUEUE_MARGIN = 1.15


class _OutOfTime(Exception):
    pass


class _Cancelled(Exception):
    pass


class _Search:
    def __init__(
        self,
        runner: StepRunner,
        settings: CalibrationSettings,
        budget: int,
        on_step: StepCallback | None,
        on_plan: PlanCallback | None,
        clock: Callable[[], float],
        cancel: asyncio.Event,
    ) -> None:
        self.cancel = cancel
        self.runner = runner
        self.settings = settings
        self.budget = budget
        self.on_step = on_step
        self.on_plan = on_plan
        self.clock = clock
        self.t0 = clock()
        self.steps: list[Step] = []
        self.spent = 0
        self.warnings: list[str] = []

    # --- budget ---
    def progress(self) -> Progress:
        return Progress(self.spent, self.budget, self.clock() - self.t0, self.settings.max_duration)

    def time_left(self) -> float:
        return self.settings.max_duration - (self.clock() - self.t0)

    def affordable(self, concurrency: int) -> bool:
        return self.spent + step_requests(concurrency, self.settings) <= self.budget

    def next_up(self, c: int) -> int:
        return min(self.settings.max_concurrency, max(c + 1, round(c * self.settings.growth_factor)))

    # --- one step ---
    async def probe(self, concurrency: int, phase: Phase) -> Step:
        if self.cancel.is_set():
            raise _Cancelled
        remaining = self.time_left()
        if remaining <= 0:
            raise _OutOfTime
        plan = StepPlan(
            concurrency=concurrency, num_requests=step_requests(concurrency, self.settings), phase=phase
        )
        if self.on_plan is not None:
            self.on_plan(plan, self.progress())
        task = asyncio.ensure_future(self.runner.run_step(plan))
        stopper = asyncio.ensure_future(self.cancel.wait())
        try:
            done, _ = await asyncio.wait(
                {task, stopper}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            stopper.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if task not in done:
            # Cut off mid-step: its requests were spent, its figures are lost.
            self.spent += plan.num_requests
            raise _Cancelled if self.cancel.is_set() else _OutOfTime
        m = task.result()
        self.spent += max(m.sent, 0)
        slo_ok, violations = judge_slo(m, self.settings.slo)
        ok = trusted(m, self.settings)
        saturated, server_side, reasons = (
            judge_saturation(m, self.steps, self.settings) if ok else (False, False, ())
        )
        step = Step(
            index=len(self.steps),
            phase=phase,
            measurement=m,
            slo_ok=slo_ok,
            slo_violations=violations,
            saturated=saturated,
            saturation_reasons=reasons,
            server_saturated=server_side,
            trusted=ok,
        )
        self.steps.append(step)
        if self.on_step is not None:
            self.on_step(step, self.progress())
        return step

    # --- phases ---
    async def escalate(self, c: int, *, phase: Phase = "escalate") -> StopReason:
        s = self.settings
        # A plateau seen only by the client is confirmed by one more step: a single noisy step
        # must not end the climb. The server's own gauges need no confirmation.
        pending_plateau = False
        while True:
            if not self.affordable(c):
                return "budget-requests"
            try:
                step = await self.probe(c, phase)
            except _OutOfTime:
                return "budget-time"
            m = step.measurement
            if client_limited(m, s):
                self.warnings.append(
                    f"the load generator was the bottleneck at concurrency {c} "
                    f"({'; '.join(m.client_notes) or 'schedule or event-loop lag'}): "
                    "figures above it would measure the client, not the server"
                )
                return "client-bound"
            if m.error_ratio > s.slo.max_error_ratio or not step.trusted:
                return "errors"
            if step.saturated and (step.server_saturated or pending_plateau):
                return "saturated"
            pending_plateau = step.saturated
            if not step.slo_ok and s.stop_at_slo:
                return "slo"
            if c >= s.max_concurrency:
                return "saturated" if pending_plateau else "max-concurrency"
            c = self.next_up(c)
            phase = "escalate"

    def brackets(self) -> list[tuple[Phase, int, int]]:
        s = self.settings
        ok = [st for st in self.steps if st.trusted]
        out: list[tuple[Phase, int, int]] = []
        knee = _knee_bracket(ok, s.knee_fraction)
        if knee is not None and knee[0] is not None:
            out.append(("refine-knee", knee[0].concurrency, knee[1].concurrency))
        slo = _slo_bracket(ok)
        if slo is not None and slo[0] is not None:
            out.append(("refine-slo", slo[0].concurrency, slo[1].concurrency))
        return [b for b in out if b[2] / b[1] > s.resolution and b[2] - b[1] > 1]

    async def refine(self) -> None:
        while True:
            open_ = self.brackets()
            if not open_:
                return
            phase, lo, hi = max(open_, key=lambda b: b[2] / b[1])
            mid = min(hi - 1, max(lo + 1, round(math.sqrt(lo * hi))))
            what = "knee" if phase == "refine-knee" else "SLO boundary"
            if not self.affordable(mid):
                self.warnings.append(f"{what} left between concurrency {lo} and {hi}: request budget spent")
                return
            try:
                step = await self.probe(mid, phase)
            except _OutOfTime:
                self.warnings.append(f"{what} left between concurrency {lo} and {hi}: time budget spent")
                return
            if not step.trusted:
                self.warnings.append(f"refinement stopped: step at concurrency {mid} is not trustworthy")
                return


def _knee_bracket(ok: Sequence[Step], fraction: float) -> tuple[Step | None, Step] | None:
    """(last step below the knee or None, first step at or above ``fraction`` of the ceiling)."""
    if not ok:
        return None
    ceiling = max(st.measurement.throughput for st in ok)
    by_c = sorted(ok, key=lambda st: st.concurrency)
    hi = next(st for st in by_c if st.measurement.throughput >= fraction * ceiling)
    below = [st for st in by_c if st.concurrency < hi.concurrency]
    return (below[-1] if below else None), hi


def _slo_bracket(ok: Sequence[Step]) -> tuple[Step | None, Step] | None:
    """(highest passing step below the first violation or None, the lowest violating step)."""
    failing = [st for st in ok if not st.slo_ok]
    if not failing:
        return None
    hi = min(failing, key=lambda st: st.concurrency)
    passing = [st for st in ok if st.slo_ok and st.concurrency < hi.concurrency]
    return (max(passing, key=lambda st: st.concurrency) if passing else None), hi


def _workload_key(w: Workload) -> tuple[str, str, int, int, float]:
    return (w.base_url, w.backend, w.input_len, w.output_len, w.range_ratio)


def _saturation_concurrency(prev: CalibrationResult) -> int | None:
    """Where the previous run established its ceiling: its lowest saturated step, else its best."""
    sat = [st for st in prev.steps if st.trusted and st.saturated]
    if sat:
        first = min(sat, key=lambda st: st.concurrency)
        srv = first.measurement.server
        if srv is not None and srv.running_max and srv.queue_mean and srv.queue_mean >= 0.5:
            # The server queued: it runs at most running_max at once, so a little above that
            # already saturates it; no need to pay for the whole old step again.
            return min(first.concurrency, max(1, math.ceil(srv.running_max * _QUEUE_MARGIN)))
        return first.concurrency
    idx = prev.saturation_output_throughput.steps
    if idx:
        return prev.steps[idx[0]].concurrency
    return None


def _summarize(
    steps: Sequence[Step],
    settings: CalibrationSettings,
    stop: StopReason,
) -> dict[str, Figure]:
    ok = [st for st in steps if st.trusted]
    none = Figure(value=None, note="no trustworthy step")
    if not ok:
        return {
            "saturation_output_throughput": none,
            "saturation_total_throughput": none,
            "knee_concurrency": none,
            "max_concurrency_within_slo": none,
            "max_rate_within_slo": none,
            "goodput": none,
        }
    best = max(ok, key=lambda st: st.measurement.throughput)
    saturated = [st.index for st in ok if st.saturated]
    support = tuple(sorted({best.index, *saturated}))
    if stop == "saturated" or saturated:
        reasons = next((st.saturation_reasons for st in ok if st.saturated), ())
        sat_note = f"ceiling at concurrency {best.concurrency}: " + "; ".join(reasons)
    else:
        top = max(st.concurrency for st in ok)
        sat_note = (
            f"a lower bound: the server did not saturate up to concurrency {top} (search stopped: {stop})"
        )
    out = {
        "saturation_output_throughput": Figure(
            value=best.measurement.throughput, steps=support, note=sat_note
        ),
        "saturation_total_throughput": Figure(
            value=best.measurement.throughput_total, steps=support, note=sat_note
        ),
    }
    knee = _knee_bracket(ok, settings.knee_fraction)
    assert knee is not None
    lo, hi = knee
    if lo is None:
        knee_note = (
            f"the lowest probed concurrency already reached {settings.knee_fraction:.0%} of the ceiling"
        )
        out["knee_concurrency"] = Figure(value=hi.concurrency, steps=(hi.index,), note=knee_note)
    else:
        out["knee_concurrency"] = Figure(
            value=hi.concurrency,
            steps=(lo.index, hi.index),
            note=f"first concurrency reaching {settings.knee_fraction:.0%} of the ceiling "
            f"(concurrency {lo.concurrency} did not)",
        )
    slo = _slo_bracket(ok)
    within: Step | None
    if slo is None:
        within = max(ok, key=lambda st: st.concurrency)
        slo_note = "no probed step violated the SLO: the limit is at least this"
        slo_steps: tuple[int, ...] = (within.index,)
    else:
        within, fail = slo
        slo_note = (
            f"concurrency {fail.concurrency} violated the SLO ({'; '.join(fail.slo_violations)})"
            if within is not None
            else f"even concurrency {fail.concurrency} violated the SLO"
        )
        slo_steps = (within.index, fail.index) if within is not None else (fail.index,)
    if within is None:
        out["max_concurrency_within_slo"] = Figure(value=None, steps=slo_steps, note=slo_note)
        out["max_rate_within_slo"] = Figure(value=None, steps=slo_steps, note=slo_note)
        out["goodput"] = Figure(value=None, steps=slo_steps, note=slo_note)
        return out
    wm = within.measurement
    out["max_concurrency_within_slo"] = Figure(value=within.concurrency, steps=slo_steps, note=slo_note)
    out["max_rate_within_slo"] = Figure(
        value=wm.request_throughput, steps=(within.index,), note="request rate sustained at that concurrency"
    )
    if wm.slo_met is not None and wm.duration > 0:
        out["goodput"] = Figure(
            value=wm.slo_met / wm.duration,
            steps=(within.index,),
            note="requests/s meeting every SLO limit at the highest concurrency within the SLO",
        )
    else:
        out["goodput"] = Figure(value=None, steps=(within.index,), note="no per-request latencies")
    return out


async def run_search(
    runner: StepRunner,
    settings: CalibrationSettings,
    workload: Workload,
    *,
    previous: CalibrationResult | None = None,
    on_step: StepCallback | None = None,
    on_plan: PlanCallback | None = None,
    clock: Callable[[], float] = time.monotonic,
    cancel: asyncio.Event | None = None,
) -> CalibrationResult:
    """Run a full search, or an incremental one when ``previous`` is given.

    Setting ``cancel`` cuts the step in progress short and returns what was measured so far
    (``stop_reason`` "cancelled"): an interrupted calibration still yields its steps.
    """
    started = datetime.now(UTC)
    why_full = None
    if previous is not None:
        if _workload_key(previous.workload) != _workload_key(workload):
            why_full = "the previous result measured another server or workload: ran a full sweep instead"
        elif previous.incremental_depth + 1 > settings.full_sweep_every:
            why_full = (
                f"{previous.incremental_depth} incremental runs since the last full sweep: ran a full one"
            )
        elif _saturation_concurrency(previous) is None:
            why_full = "the previous result has no usable ceiling: ran a full sweep instead"
    seed_c = _saturation_concurrency(previous) if previous is not None and why_full is None else None
    incremental = seed_c is not None
    if incremental:
        assert previous is not None
        budget = min(
            settings.max_requests,
            math.ceil(previous.full_sweep_requests * settings.incremental_budget_ratio),
        )
    else:
        budget = settings.max_requests
    search = _Search(runner, settings, budget, on_step, on_plan, clock, cancel or asyncio.Event())
    if why_full is not None:
        search.warnings.append(why_full)
    stop: StopReason
    try:
        if incremental:
            assert previous is not None
            assert seed_c is not None
            stop = await _incremental(search, previous, min(seed_c, settings.max_concurrency))
        else:
            stop = await search.escalate(settings.start_concurrency)
            await search.refine()
    except _Cancelled:
        stop = "cancelled"
        search.warnings.append("cancelled: the figures come from the steps completed before it")
    figures = _summarize(search.steps, settings, stop)
    if incremental:
        assert previous is not None
        _carry_over(figures, search.steps, previous, settings)
    if stop in ("budget-requests", "budget-time") and not search.steps:
        search.warnings.append("the budget did not allow a single step")
    spent = search.spent
    return CalibrationResult(
        mode="incremental" if incremental else "full",
        started_at=started,
        finished_at=datetime.now(UTC),
        workload=workload,
        slo=settings.slo.model_dump(),
        steps=tuple(search.steps),
        stop_reason=stop,
        requests_spent=spent,
        full_sweep_requests=previous.full_sweep_requests if incremental and previous else spent,
        seeded_from=previous.started_at if incremental and previous else None,
        incremental_depth=previous.incremental_depth + 1 if incremental and previous else 0,
        warnings=tuple(search.warnings),
        saturation_output_throughput=figures["saturation_output_throughput"],
        saturation_total_throughput=figures["saturation_total_throughput"],
        knee_concurrency=figures["knee_concurrency"],
        max_concurrency_within_slo=figures["max_concurrency_within_slo"],
        max_rate_within_slo=figures["max_rate_within_slo"],
        goodput=figures["goodput"],
    )


def _interpolate(steps: Sequence[Step], c: int) -> float | None:
    """Throughput the given steps imply at concurrency ``c``: exact where probed, otherwise a
    straight line on log-log axes between the nearest probed concurrencies on either side."""
    by_c: dict[int, float] = {}
    for st in steps:  # later steps win: they are the refinement of earlier ones
        by_c[st.concurrency] = st.measurement.throughput
    if c in by_c:
        return by_c[c]
    below = [x for x in by_c if x < c]
    above = [x for x in by_c if x > c]
    if not below or not above:
        return None
    lo, hi = max(below), min(above)
    if by_c[lo] <= 0 or by_c[hi] <= 0:
        return None
    t = (math.log(c) - math.log(lo)) / (math.log(hi) - math.log(lo))
    return math.exp(math.log(by_c[lo]) + t * (math.log(by_c[hi]) - math.log(by_c[lo])))


def _carry_over(
    figures: dict[str, Figure], steps: Sequence[Step], prev: CalibrationResult, settings: CalibrationSettings
) -> None:
    """Fill in what a frugal re-probe did not measure again, from the previous result.

    The ceiling: when this run stayed below the concurrency of the previous ceiling and saw no
    saturation, the previous ceiling is scaled by how throughput changed at a concurrency both
    runs measured (the knee): a capacity change moves the whole curve, and the knee is where it
    is cheapest to read. Knee and SLO figures not bracketed again are carried over. Every such
    figure says so in its note.
    """
    ok = [st for st in steps if st.trusted]
    when = prev.started_at.isoformat(timespec="seconds")
    prev_ok = [st for st in prev.steps if st.trusted]
    best_idx = prev.saturation_output_throughput.steps
    prev_best = next((prev.steps[i] for i in best_idx if prev.steps[i].trusted), None)
    prev_sat = prev.saturation_output_throughput.value
    prev_tot = prev.saturation_total_throughput.value
    if (
        ok
        and prev_best is not None
        and prev_sat is not None
        and not any(st.saturated for st in ok)
        and max(st.concurrency for st in ok) < prev_best.concurrency
    ):
        now = max(ok, key=lambda st: st.concurrency)
        then = _interpolate(prev_ok, now.concurrency)
        measured = max(st.measurement.throughput for st in ok)
        if then is not None and then > 0:
            ratio = now.measurement.throughput / then
            note = (
                f"estimated: the ceiling of {when} ({prev_sat:.1f} tok/s at concurrency "
                f"{prev_best.concurrency}) scaled by {ratio:.3f}, the change measured at concurrency "
                f"{now.concurrency} ({then:.1f} -> {now.measurement.throughput:.1f} tok/s)"
            )
            if prev_sat * ratio > measured:
                figures["saturation_output_throughput"] = Figure(
                    value=prev_sat * ratio, steps=(now.index,), note=note
                )
                if prev_tot is not None:
                    figures["saturation_total_throughput"] = Figure(
                        value=prev_tot * ratio, steps=(now.index,), note=note
                    )
    knee = _knee_bracket(ok, settings.knee_fraction)
    prev_knee = prev.knee_concurrency.value
    if knee is not None and knee[0] is None and prev_knee is not None and knee[1].concurrency >= prev_knee:
        figures["knee_concurrency"] = Figure(
            value=prev_knee,
            note=f"carried over from the calibration of {when} (not re-bracketed within the budget)",
        )
    prev_limit = prev.max_concurrency_within_slo.value
    if (
        _slo_bracket(ok) is None
        and prev_limit is not None
        and len(prev.max_concurrency_within_slo.steps) == 2
    ):
        highest = max((st.concurrency for st in ok), default=0)
        if highest <= prev_limit:
            note = f"carried over from the calibration of {when} (no step of this run reached the limit)"
            for key in ("max_concurrency_within_slo", "max_rate_within_slo", "goodput"):
                old: Figure = getattr(prev, key)
                figures[key] = Figure(value=old.value, note=note)


async def _incremental(search: _Search, prev: CalibrationResult, c_sat: int) -> StopReason:
    """Re-probe as close to the previous ceiling as the budget allows, then the knee, then refine.

    Below the old ceiling the ceiling is estimated by scaling (see ``_carry_over``); at or above
    it, or wherever the server saturates, it is measured directly.
    """
    s = search.settings
    stop: StopReason = prev.stop_reason if prev.stop_reason != "saturated" else "max-concurrency"
    c1 = next((c for c in range(c_sat, 0, -1) if search.affordable(c)), None)
    if c1 is None:
        search.warnings.append(f"incremental budget ({search.budget} requests) cannot afford a single step")
        return "budget-requests"
    knee = prev.knee_concurrency.value
    for c in dict.fromkeys((c1, int(knee) if knee is not None else c1)):
        if c > c1 or (search.steps and not search.affordable(c)):
            break
        try:
            step = await search.probe(c, "reprobe")
        except _OutOfTime:
            return "budget-time"
        m = step.measurement
        if client_limited(m, s):
            return "client-bound"
        if m.error_ratio > s.slo.max_error_ratio or not step.trusted:
            return "errors"
        if step.saturated:
            stop = "saturated"
        elif c == c_sat and prev.stop_reason == "saturated" and c_sat < s.max_concurrency:
            # The server used to saturate here and no longer does: capacity grew, climb from here.
            stop = await search.escalate(search.next_up(c_sat))
            break
    await search.refine()
    return stop
