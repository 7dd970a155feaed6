"""The calibration job: when to calibrate, within what share of the budget, and what it found.

The job owns the current :class:`Capacity` (an immutable value, replaced whole), sets the capacity
gauges from it and writes the HTML report; the daemon only wires it (a cron job, the run-once
trigger after the first reference run, the status document). A sweep runs in the scheduler's load
slot (:meth:`LoadScheduler.run_exclusive`), charged to the hourly token budget step by step.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_sentinel.calibrate.model import CONCLUSIVE_STOPS
from sglang_sentinel.log import get_logger

if TYPE_CHECKING:
    from sglang_sentinel.calibrate import CalibrationResult, Progress, Step, StepPlan, Target
    from sglang_sentinel.calibrate.settings import CalibrationSettings
    from sglang_sentinel.collect.gpu.energy import LoadMeter
    from sglang_sentinel.schedule.metrics import ScheduleMetrics
    from sglang_sentinel.schedule.scheduler import ExclusiveRun, LoadScheduler

__all__ = ["CONCLUSIVE", "CalibrationJob", "Capacity"]

_log = get_logger(__name__)

# Calibration results that say something about capacity (a ceiling, an SLO limit, or at least
# "more than max_concurrency"); the others leave the capacity as it was.
CONCLUSIVE = CONCLUSIVE_STOPS
# Past the sweep's own limit: time to stop its steps and write the result.
_SLOT_MARGIN_SECONDS = 60.0
# After the first reference run, before the initial calibration (the run's own report first).
_INITIAL_DELAY_SECONDS = 5.0
# Skips of the initial calibration that pass by themselves, and how soon it is tried again.
_RETRY_INITIAL_ON = frozenset({"busy", "server_not_ready", "warmup", "restart_window", "foreign_traffic"})
_INITIAL_RETRY_SECONDS = 15.0


@dataclass(frozen=True, slots=True)
class Capacity:
    """The last conclusive calibration's figures; a figure nothing supported is None (absent).

    ``bound`` "lower": the sweep reached its max concurrency (``max_concurrency``) without
    saturating, so the throughput is "at least". ``slo_concurrency`` only with a latency SLO.
    """

    output_throughput: float | None
    knee_concurrency: float | None
    slo_concurrency: float | None
    finished_at: float  # wall clock
    bound: str = "measured"  # "measured" | "lower"
    max_concurrency: int | None = None  # the highest concurrency a step ran at
    # GPU energy (metered sweeps only): tokens per joule at the knee, and the efficient operating
    # point (the concurrency with the fewest joules per output token) with its tokens per joule.
    knee_tokens_per_joule: float | None = None
    efficient_concurrency: float | None = None
    efficient_tokens_per_joule: float | None = None

    @classmethod
    def from_result(cls, result: CalibrationResult) -> Capacity:
        finished = result.finished_at.replace(tzinfo=result.finished_at.tzinfo or UTC)
        efficient = result.efficient_step
        energy = efficient.measurement.energy if efficient is not None else None
        return cls(
            result.saturation_output_throughput.value,
            result.knee_concurrency.value,
            result.max_concurrency_within_slo.value if result.slo_configured else None,
            finished.timestamp(),
            "lower" if result.lower_bound else "measured",
            result.highest_concurrency,
            result.knee_tokens_per_joule,
            float(efficient.concurrency) if efficient is not None else None,
            energy.output_tokens_per_joule if energy is not None else None,
        )

    def as_status(self) -> dict[str, float | str | None]:
        return {
            "output_throughput": self.output_throughput,
            "knee_concurrency": self.knee_concurrency,
            "slo_concurrency": self.slo_concurrency,
            "finished_at": self.finished_at,
            "bound": self.bound,
            "max_concurrency": self.max_concurrency,
            "knee_tokens_per_joule": self.knee_tokens_per_joule,
            "efficient_concurrency": self.efficient_concurrency,
            "efficient_tokens_per_joule": self.efficient_tokens_per_joule,
        }

    def describe(self) -> str:
        """The throughput as an operator should read it ("≥ X tok/s (lower bound ...)")."""
        if self.output_throughput is None:
            return "unknown"
        figure = f"{self.output_throughput:,.1f} tok/s"
        if self.bound == "lower":
            return f"≥ {figure} (lower bound: did not saturate up to concurrency {self.max_concurrency})"
        return figure


class CalibrationJob:
    """One daemon's calibrations. Event loop only; :attr:`capacity` is safe to read anywhere."""

    def __init__(
        self,
        settings: CalibrationSettings,
        *,
        state_dir: Path,
        server_url: str,
        api_key: str,
        metrics: ScheduleMetrics,
        calibrate_when_missing: bool = True,
    ) -> None:
        self.settings = settings
        self.calibrate_when_missing = calibrate_when_missing
        self._state_dir = state_dir
        self._server_url = server_url
        self._api_key = api_key
        self._metrics = metrics
        self._capacity: Capacity | None = None
        self._target: Target | None = None
        self._missing_checked = False
        self.calibrating = False
        # The server's GPUs' energy meter, set by the daemon once the gpu collector exists.
        self.energy: LoadMeter | None = None

    @property
    def capacity(self) -> Capacity | None:
        return self._capacity

    @property
    def target(self) -> Target | None:
        return self._target

    @property
    def report_dir(self) -> Path:
        return self._state_dir / "calibration" / "report"

    def reload(self, settings: CalibrationSettings, *, calibrate_when_missing: bool) -> None:
        """SIGHUP: the next sweep uses the new settings (one in progress keeps its own)."""
        self.settings = settings
        self.calibrate_when_missing = calibrate_when_missing

    def set_target(self, target: Target) -> None:
        """The server this daemon calibrates (known once the launch command is rendered): results
        are stored with it, and only results of it are loaded, seeded from and compared with."""
        self._target = target

    def restore(self) -> None:
        """The capacity of the store's latest conclusive result (at start: gauges survive restarts).

        Results of another target (another URL, served model or launch config: a state directory
        reused, a sweep saved there) are not this server's capacity: ignored, and counted in a log
        line saying why."""
        try:
            from sglang_sentinel.calibrate import store_for

            store = store_for(self._state_dir, self.settings, self._target)
            results = store.results()
            ignored = store.foreign()
        except Exception as exc:  # an unreadable store must not stop the daemon
            _log.warning("calibration_store_unreadable", error=repr(exc))
            return
        if ignored:
            _log.warning(
                "calibration_results_ignored",
                loaded=len(results),
                ignored=sum(ignored.values()),
                reasons=ignored,
                target=self._target.describe() if self._target is not None else None,
            )
        conclusive = [r for r in results if r.stop_reason in CONCLUSIVE]
        if conclusive:
            self._set_capacity(Capacity.from_result(conclusive[-1]))

    def _set_capacity(self, capacity: Capacity) -> None:
        self._capacity = capacity
        self._metrics.set_capacity(
            capacity.output_throughput,
            capacity.knee_concurrency,
            capacity.slo_concurrency,
            capacity.finished_at,
            capacity.bound,
            knee_tokens_per_joule=capacity.knee_tokens_per_joule,
            efficient_concurrency=capacity.efficient_concurrency,
        )

    @property
    def missing_checked(self) -> bool:
        return self._missing_checked

    def maybe_after_run(self, scheduler: LoadScheduler, run: Callable[[], Awaitable[Any]]) -> None:
        """Once per daemon life: calibrate soon after a reference run if no calibration exists yet.

        ``run``: the job to schedule (the daemon's ``calibrate``, which logs and counts it)."""
        if self._missing_checked or not self.calibrate_when_missing:
            return
        self._missing_checked = True
        if self._capacity is None:

            async def initial() -> Any:
                outcome = await run()
                # A reference run holding the slot (or a server between lives) is no reason to wait
                # for the nightly cron with no capacity at all: try again shortly. A budget skip is
                # not retried here (the budget frees only with time; the cron comes back to it).
                if isinstance(outcome, str) and outcome.removeprefix("skipped:") in _RETRY_INITIAL_ON:
                    _log.info("calibration_initial_retry", outcome=outcome, in_seconds=_INITIAL_RETRY_SECONDS)
                    scheduler.add_once("calibration:initial", initial, time.time() + _INITIAL_RETRY_SECONDS)
                return outcome

            scheduler.add_once("calibration:initial", initial, time.time() + _INITIAL_DELAY_SECONDS)

    async def run(self, scheduler: LoadScheduler) -> str:
        """One (incremental when possible) calibration in the load slot, within the token budget."""
        from sglang_sentinel.calibrate import recalibrate, store_for

        cal = self.settings
        per_request = cal.input_len + cal.output_len
        bound = cal.max_requests * per_request
        # Enough for a few steps; with less the sweep cannot say anything worth its cost.
        minimum = min(bound, 4 * cal.step_min_requests * per_request)
        # Reference runs come first: the sweep may use what the profiles will not need this hour.
        allowed = min(bound, scheduler.budget.remaining() - scheduler.hourly_profile_tokens())
        if allowed < minimum:
            allowed = bound  # reserve() refuses it: recorded as skipped(budget)
        store = store_for(self._state_dir, cal, self._target)

        inconclusive = False

        async def work(run: ExclusiveRun) -> None:
            nonlocal inconclusive

            def on_plan(plan: StepPlan, progress: Progress) -> None:
                # Our own requests in flight during the step, for the polite check beside the sweep.
                run.counters.in_flight = plan.concurrency
                step_bound = plan.num_requests * per_request
                # Stop before a step that could take the sweep past its share of the budget.
                if run.charged + step_bound > allowed:
                    _log.info("calibration_budget_reached", charged=run.charged, allowed=allowed)
                    run.cancel.set()
                else:
                    run.charged += step_bound  # charged up front: a step cut short spent at most this

            def on_step(step: Step, progress: Progress) -> None:
                run.counters.in_flight = 0
                run.counters.completed += step.measurement.completed
                run.counters.failed += step.measurement.failed

            # Said before the sweep, not only after it: a sweep runs for minutes and the
            # operator watching the journal should see why the server is suddenly busy. The
            # mode is recalibrate()'s own choice (incremental from a stored conclusive result).
            previous = await asyncio.to_thread(store.latest, conclusive=True)
            _log.info(
                "calibration_started",
                mode="incremental" if previous is not None else "full",
                budget_tokens=allowed,
                max_requests=cal.max_requests,
                max_duration_s=cal.max_duration,
            )
            self.calibrating = True
            try:
                result = await recalibrate(
                    cal,
                    store,
                    base_url=self._server_url,
                    api_key=self._api_key or None,
                    on_step=on_step,
                    on_plan=on_plan,
                    cancel=run.cancel,
                    energy=self.energy,
                )
            finally:
                self.calibrating = False
            if result.stop_reason in CONCLUSIVE:
                self._set_capacity(Capacity.from_result(result))
            else:
                # Client-bound, failing, cut short: no statement about capacity. The gauges keep the
                # last conclusive result; the result itself is in the store and the report.
                inconclusive = True
                # Cut short ("cancelled") by a stop or an abort: routine at shutdown, and an abort
                # has said why already (exclusive_run_aborted); the sweep's own verdicts warn.
                level = _log.info if str(result.stop_reason) == "cancelled" else _log.warning
                level("calibration_inconclusive", stop_reason=str(result.stop_reason))
            if result.stop_reason in CONCLUSIVE:
                # Only a conclusive sweep becomes "the latest" report; an inconclusive one goes
                # beside it (its JSON is in the store) so the page never shows a cancelled sweep.
                await asyncio.to_thread(self._write_report, result, self.report_dir)
            else:
                await asyncio.to_thread(self._write_report, result, self.report_dir / "inconclusive")
            _log.info(
                "calibration_done",
                mode=result.mode,
                stop_reason=str(result.stop_reason),
                saturation_output_throughput=result.saturation_output_throughput.value,
                knee=result.knee_concurrency.value,
                requests=result.requests_spent,
                regressions=list(result.comparison.regressions) if result.comparison else [],
            )

        outcome = await scheduler.run_exclusive(
            "calibration", allowed, work, cal.max_duration + _SLOT_MARGIN_SECONDS
        )
        if outcome in ("completed", "failed", "cancelled", "aborted"):
            self._metrics.calibrations.labels("inconclusive" if inconclusive else outcome).inc()
        return outcome

    def _write_report(self, result: CalibrationResult, directory: Path) -> None:
        try:
            from sglang_sentinel.calibrate.report import write_report

            write_report(result, directory)
        except Exception as exc:  # matplotlib is an optional extra; the JSON is always there
            _log.info(
                "calibration_report_not_written", reason=str(exc).splitlines()[0] if str(exc) else repr(exc)
            )
