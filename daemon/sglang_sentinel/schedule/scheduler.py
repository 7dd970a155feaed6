"""Job wiring on APScheduler 3.x (``AsyncIOScheduler``) and the life of one scheduled load run.

Rules, and how they are kept:

- Load runs never overlap. Every load (each profile, and calibration) goes through one slot,
  ``_current``; it is claimed without an ``await`` between the check and the claim, so two firings
  on the one event loop cannot both get it. A firing that finds the slot taken is dropped and
  counted (``sentinel_load_skipped_total{reason="busy"}``), never queued: a backlog of stale
  reference runs would only pile load on a server that is already busy.
- A firing of a job that is still running is coalesced by APScheduler (``max_instances=1``) and
  counted from its event (``sentinel_schedule_coalesced_total{job,reason="running"}``); firings
  missed while the loop was blocked are collapsed into one (``coalesce=True``) or dropped past the
  grace time and counted (``reason="misfire"``).
- Probes and canaries are separate jobs that never touch the slot, so they never wait behind a run.
- No load before the server is ready plus ``warmup_seconds``; a run that starts within
  ``reference_exclusion_seconds`` of the server's ready time still runs but is kept out of the
  reference series. Every run records the server epoch (ready time) and launch-config hash.
- Before a run: polite check (foreign traffic → run, shrink or skip) and the token budget
  (shrink to fit or skip). During a run: every check interval, the circuit breaker and the polite
  check again, the server epoch (a restart aborts the run) and the run's time limit.

The records of runs and server epochs, and what is restored from them, are
:mod:`~sglang_sentinel.schedule.history`'s.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import time
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from apscheduler.events import (
    EVENT_JOB_ERROR,
    EVENT_JOB_MAX_INSTANCES,
    EVENT_JOB_MISSED,
    JobEvent,
)
from apscheduler.schedulers.asyncio import AsyncIOScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.date import DateTrigger
from apscheduler.triggers.interval import IntervalTrigger

from sglang_sentinel.load.records import LoadCounters
from sglang_sentinel.log import get_logger
from sglang_sentinel.schedule.budget import TokenBudget
from sglang_sentinel.schedule.history import RunHistory
from sglang_sentinel.schedule.ledger import LEDGER_FILE, BudgetLedger
from sglang_sentinel.schedule.metrics import ScheduleMetrics
from sglang_sentinel.schedule.monitor import GapView, GpuHealthView, LoadReader, RunMonitor, ServerView
from sglang_sentinel.schedule.plan import RunExecutor, RunPlan, RunReport, plan_run
from sglang_sentinel.schedule.polite import decide
from sglang_sentinel.schedule.runrecord import RunContext, account_run, iso, report_from_counters
from sglang_sentinel.schedule.settings import LoadProfileSettings, ScheduleSettings
from sglang_sentinel.statedir import StateDir

__all__ = ["ExclusiveRun", "LoadScheduler"]

_log = get_logger(__name__)

# How long an interrupted run may take to hand back its partial result before it is torn down.
_CANCEL_GRACE_SECONDS = 10.0


@dataclass
class ExclusiveRun:
    """Handed to exclusive work (calibration): live counters, the budget charge so far, a stop flag."""

    counters: LoadCounters
    cancel: asyncio.Event
    # Upper bound of the tokens spent so far; what the budget is charged when the work ends.
    charged: int = 0


@dataclass
class _Current:
    profile: str
    kind: str
    started_at: float
    counters: LoadCounters
    task: asyncio.Task[Any] | None = None
    cancel_reason: str | None = None


class LoadScheduler:
    def __init__(
        self,
        settings: ScheduleSettings,
        *,
        server: ServerView,
        executor: RunExecutor,
        metrics: ScheduleMetrics,
        state: StateDir,
        load_reader: LoadReader | None,
        gpu: Callable[[], GpuHealthView] | None = None,
        clock: Callable[[], float] = time.time,
        target_url: str | None = None,
        served_model: str = "",
        gaps: GapView | None = None,
    ) -> None:
        """``gpu``: the GPUs' health now, for the breaker (None: no GPU figures). ``target_url``: the
        server this scheduler loads; written into every run record, and records of another server
        (a state directory reused for another target) are ignored at restore. ``served_model``
        goes into the records too (what the server was serving, for whoever reads them)."""
        self.settings = settings
        self.server = server
        # A run during which the daemon was away (SIGSTOP, VM freeze) is no reference.
        self._gaps = gaps
        self.executor = executor
        self.metrics = metrics
        self.state = state
        self.monitor = RunMonitor(settings, server=server, metrics=metrics, load_reader=load_reader, gpu=gpu)
        self._clock = clock
        # The ledger makes reservations durable before the tokens are spent (ledger.py).
        self.budget = TokenBudget(
            settings.budget.tokens_per_hour, clock=clock, ledger=BudgetLedger(state.path / LEDGER_FILE)
        )
        # Computed at scrape time: the remaining budget grows back as old runs leave the hour.
        metrics.budget_remaining.set_function(self.budget.remaining)
        metrics.budget_limit.set_function(lambda: self.budget.tokens_per_hour)
        self._scheduler: AsyncIOScheduler | None = None
        self._current: _Current | None = None
        self._last_epoch: float | None = None
        self._history = RunHistory(state, target_url=target_url, served_model=served_model)
        self._stopping = False
        self.last_tick = time.monotonic()
        # Completed runs of this daemon life (any profile); the daemon's calibrate-when-missing waits for one.
        self.completed_runs = 0

    # -- life cycle -----------------------------------------------------------------------------

    def restore(self) -> None:
        """Reload the run and restart history: budget spending and the status page survive a restart."""
        s = self.settings
        last = self._history.restore(
            self.budget,
            runs_limit=s.history_runs,
            restarts_limit=s.history_restarts,
            metrics=self.metrics,
            profiles=s.profiles,
        )
        if last is not None:
            # The same server life seen again (the daemon restarted, the server did not): no new epoch.
            self._last_epoch = last

    async def start(self) -> None:
        """Create the scheduler and its jobs. Must be called from the running event loop."""
        self.metrics.declare_profiles(self.settings.profiles)
        self._scheduler = AsyncIOScheduler(
            timezone=datetime.now().astimezone().tzinfo,
            job_defaults={
                "coalesce": True,
                "max_instances": 1,
                "misfire_grace_time": max(1, round(self.settings.misfire_grace_seconds)),
            },
        )
        self._scheduler.add_listener(
            self._on_event, EVENT_JOB_ERROR | EVENT_JOB_MISSED | EVENT_JOB_MAX_INSTANCES
        )
        self._add_load_jobs()
        self.add_interval_job("server_watch", self._watch_server, 1.0)
        self._scheduler.start()
        await self._watch_server()

    async def stop(self) -> None:
        """Cancel the run in progress (recorded as cancelled) and shut the scheduler down."""
        self._stopping = True
        if self._scheduler is not None and self._scheduler.running:
            self._scheduler.shutdown(wait=False)
        await self.cancel_current("shutdown")

    async def cancel_current(self, reason: str) -> None:
        current = self._current
        if current is None or current.task is None:
            return
        current.cancel_reason = reason
        current.task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await current.task

    def reload(self, settings: ScheduleSettings) -> None:
        """Apply a new [schedule] section (SIGHUP): jobs, thresholds and the budget limit change live.

        The run in progress keeps the settings it started with; history and spending are kept.
        Only what changed moves: a profile whose timing (cron, interval, jitter) is the same keeps
        its next run, and a run due after a (re)start of the server (``ready:``) stays due; a
        reload never drops a due run nor pushes it to reload time + interval.
        """
        old = self.settings.profiles
        self.settings = settings
        self.monitor.settings = settings
        self.budget.set_limit(settings.budget.tokens_per_hour)
        self.metrics.declare_profiles(settings.profiles)
        if self._scheduler is None:
            return
        for job in self._scheduler.get_jobs():
            kind, _, name = job.id.partition(":")
            new = settings.profiles.get(name)
            if kind == "load":
                moved = new is None or name not in old or _timing(old[name]) != _timing(new)
            else:
                moved = kind == "ready" and (new is None or not new.run_on_ready)
            if moved:
                job.remove()
        self._add_load_jobs(keep_existing=True)

    # -- jobs -----------------------------------------------------------------------------------

    def _add_load_jobs(self, *, keep_existing: bool = False) -> None:
        assert self._scheduler is not None
        for name, profile in self.settings.profiles.items():
            if keep_existing and self._scheduler.get_job(f"load:{name}") is not None:
                continue
            trigger: CronTrigger | IntervalTrigger
            jitter = profile.jitter_seconds or None
            if profile.cron is not None:
                trigger = CronTrigger.from_crontab(profile.cron, timezone=self._scheduler.timezone)
                trigger.jitter = jitter
            else:
                assert profile.interval_seconds is not None
                trigger = IntervalTrigger(seconds=profile.interval_seconds, jitter=jitter)
            self._scheduler.add_job(
                self.fire, trigger, args=[name], id=f"load:{name}", name=f"load:{name}", replace_existing=True
            )

    def add_interval_job(
        self, name: str, func: Callable[[], Awaitable[Any]], seconds: float, *, first_in: float | None = None
    ) -> None:
        """A periodic job that never touches the load slot (probes, canaries, GPU refresh)."""
        assert self._scheduler is not None
        next_run = datetime.now(UTC) if first_in is None else _dt(time.time() + first_in)
        self._scheduler.add_job(
            func,
            IntervalTrigger(seconds=seconds),
            id=name,
            name=name,
            replace_existing=True,
            next_run_time=next_run,
        )

    def add_cron_job(self, name: str, func: Callable[[], Awaitable[Any]], cron: str) -> None:
        assert self._scheduler is not None
        trigger = CronTrigger.from_crontab(cron, timezone=self._scheduler.timezone)
        self._scheduler.add_job(func, trigger, id=name, name=name, replace_existing=True)

    def add_once(self, name: str, func: Callable[[], Awaitable[Any]], at: float) -> None:
        assert self._scheduler is not None
        self._scheduler.add_job(
            func, DateTrigger(run_date=_dt(at)), id=name, name=name, replace_existing=True
        )

    def _on_event(self, event: JobEvent) -> None:
        job_id = str(event.job_id)
        if event.code == EVENT_JOB_ERROR:
            self.metrics.job_errors.labels(job_id).inc()
            exc = getattr(event, "exception", None)
            _log.error("job_failed", job=job_id, error=repr(exc))
            return
        reason = "misfire" if event.code == EVENT_JOB_MISSED else "running"
        self.metrics.coalesced.labels(job_id, reason).inc()
        if job_id.startswith(("load:", "ready:")):
            profile = job_id.split(":", 1)[1]
            self.metrics.skipped.labels(profile, "busy" if reason == "running" else "misfire").inc()
        _log.info("job_coalesced", job=job_id, reason=reason)

    def next_runs(self) -> dict[str, float]:
        if self._scheduler is None:
            return {}
        out = {}
        for job in self._scheduler.get_jobs():
            if job.next_run_time is not None:
                out[job.id] = job.next_run_time.timestamp()
        return out

    # -- server epochs --------------------------------------------------------------------------

    async def _watch_server(self) -> None:
        self.last_tick = time.monotonic()
        epoch = self.server.ready_epoch()
        if epoch is None or epoch == self._last_epoch:
            return
        self._last_epoch = epoch
        warm = self.server.started_warm()
        self._history.add_epoch(
            epoch,
            launch_hash=self.server.launch_hash(),
            seen_at=self._clock(),
            warm=warm,
            keep=self.settings.history_restarts,
        )
        if warm:
            return  # a warm server needs no fresh reference point: the schedule carries on
        delay = max(self.settings.warmup_seconds, self.settings.reference_exclusion_seconds)
        for name, profile in self.settings.profiles.items():
            if profile.run_on_ready and self._scheduler is not None:
                self.add_once(f"ready:{name}", functools.partial(self.fire, name), epoch + delay + 0.05)

    # -- one run --------------------------------------------------------------------------------

    @property
    def busy(self) -> bool:
        return self._current is not None

    def _skip(self, profile: str, reason: str, **extra: Any) -> str:
        self.metrics.skipped.labels(profile, reason).inc()
        _log.info("load_skipped", profile=profile, reason=reason, **extra)
        record = {"kind": "skip", "profile": profile, "reason": reason, "at": self._clock(), **extra}
        self._history.add_run(record, self.settings.history_runs)
        return f"skipped:{reason}"

    async def fire(self, profile: str) -> str:
        """One firing of a profile's schedule. Returns what happened (for logs and tests)."""
        profile_settings = self.settings.profiles.get(profile)
        if profile_settings is None or self._stopping:
            return "gone"
        if self._current is not None:
            return self._skip(profile, "busy", running=self._current.profile)
        # Claimed with no await since the check above: nothing else on the loop can slip in.
        current = _Current(profile, "load", self._clock(), LoadCounters())
        self._current = current
        try:
            return await self._run_profile(profile, profile_settings, current)
        finally:
            self._current = None
            self.metrics.running.labels(profile).set(0)

    async def _run_profile(self, profile: str, settings: LoadProfileSettings, current: _Current) -> str:
        now = self._clock()
        epoch = self.server.ready_epoch()
        if epoch is None:
            return self._skip(profile, "server_not_ready")
        warm = self.server.started_warm()
        if not warm and now < epoch + self.settings.warmup_seconds:
            return self._skip(profile, "warmup", ready_at=epoch)
        load = await self.monitor.read_load() if self.settings.polite.enabled else None
        polite: dict[str, Any] = {}
        own = 0
        if load is not None:
            # Against the own count the figure may date from: a sampled gauge can still show the
            # tail of our previous run (SGLang refreshes it every 30 s when idle).
            assessed = self.monitor.assess(load)
            own, polite = assessed.own, assessed.fields()
            polite.pop("foreign")
        decision = decide(load, own, self.settings.polite)
        if decision.action == "skip":
            return self._skip(profile, decision.reason, foreign=decision.foreign, **polite)
        plan = plan_run(profile, settings, decision.scale)
        if decision.action == "shrink":
            self.metrics.shrunk.labels(profile, "foreign_traffic").inc()
            _log.info(
                "load_shrunk",
                profile=profile,
                reason="foreign_traffic",
                scale=round(decision.scale, 3),
                foreign=decision.foreign,
                **polite,
            )
        remaining = self.budget.remaining()
        if plan.max_tokens > remaining:
            per_request = settings.input_len + settings.output_len
            fitting = remaining // per_request - 1  # minus the warm-up request
            if fitting < min(self.settings.budget.min_prompts, settings.num_prompts):
                return self._skip(profile, "budget", needed=plan.max_tokens, remaining=remaining)
            plan = plan_run(profile, settings, min(plan.scale, fitting / settings.num_prompts))
            if plan.max_tokens > remaining:  # rounding guard: never exceed
                plan = RunPlan(
                    profile, settings, plan.scale, int(fitting), plan.request_rate, plan.max_concurrency
                )
            self.metrics.shrunk.labels(profile, "budget").inc()
        reservation = self.budget.reserve(plan.max_tokens)
        if reservation is None:
            return self._skip(profile, "budget", needed=plan.max_tokens, remaining=self.budget.remaining())
        in_window = not warm and now < epoch + self.settings.reference_exclusion_seconds
        reference = not in_window and plan.full_size
        launch_hash = self.server.launch_hash()
        _log.info(
            "load_run_start",
            profile=profile,
            prompts=plan.num_prompts,
            rate=plan.request_rate,
            scale=round(plan.scale, 3),
            foreign=decision.foreign,
            reference=reference,
        )
        self.metrics.running.labels(profile).set(1)
        started = self._clock()
        started_mono = time.monotonic()
        report, outcome, abort_reason = await self._execute(plan, current, epoch)
        finished = self._clock()
        gap = self._gaps is not None and self._gaps.gap_since(started_mono)
        # An interrupted run known only from its counters may have spent up to its reservation.
        exact = report is not None and report.exact_tokens
        spent = plan.max_tokens
        if exact and report is not None:
            # Every request the server spent tokens on, failed and cancelled ones too; the
            # successful requests' counts only where the executor does not know them per request.
            if report.spent_tokens is not None:
                spent = report.spent_tokens
            else:
                spent = report.input_tokens + report.output_tokens + report.warmup_tokens
        self.budget.settle(reservation, spent)
        ctx = RunContext(
            started,
            finished,
            epoch,
            launch_hash,
            reference,
            decision.foreign,
            min(spent, plan.max_tokens),
            untrusted="time_gap" if gap else None,
        )
        record = account_run(self.metrics, plan, report, outcome, abort_reason, ctx)
        if outcome == "completed":
            self.completed_runs += 1
        self._history.add_run(record, self.settings.history_runs)
        return outcome if abort_reason is None else f"{outcome}:{abort_reason}"

    def revoke_reference(self, since: float, reason: str) -> int:
        """A canary confirmed garbage: runs that finished since ``since`` (wall clock, the last
        passing canary) leave the reference series (schedule/revoke.py)."""
        return self._history.revoke_reference(self.metrics, since, reason)

    async def _execute(
        self, plan: RunPlan, current: _Current, epoch: float
    ) -> tuple[RunReport | None, str, str | None]:
        cancel = asyncio.Event()
        run_task: asyncio.Task[RunReport] = asyncio.ensure_future(
            self.executor(plan, current.counters, cancel)
        )
        current.task = asyncio.current_task()
        monitor = asyncio.ensure_future(
            self.monitor.watch(current.counters, epoch, plan.settings.timeout_seconds)
        )
        abort_reason: str | None = None
        try:
            done, _ = await asyncio.wait({run_task, monitor}, return_when=asyncio.FIRST_COMPLETED)
            if run_task not in done:
                abort_reason = monitor.result()
        except asyncio.CancelledError:
            # stop() or cancel_current(): the reason was left on `current`. The cancellation is
            # handled here (the run is stopped and recorded), so it is not left pending on the task.
            _uncancel()
            abort_reason = current.cancel_reason or "shutdown"
        monitor.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await monitor
        report: RunReport | None = None
        if abort_reason is not None and not run_task.done():
            # The engine stops sending, aborts what is in flight and returns the partial result.
            cancel.set()
            with contextlib.suppress(TimeoutError, asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(run_task), _CANCEL_GRACE_SECONDS)
            if not run_task.done():
                run_task.cancel()
        try:
            report = await run_task
        except asyncio.CancelledError:
            report = None
        except Exception as exc:  # the engine failed as a whole (not one request): count, never crash
            _log.error("load_run_failed", profile=plan.profile, error=repr(exc))
            if abort_reason is None:
                return report_from_counters(current.counters, f"engine error: {exc!r}"[:300]), "failed", None
        if abort_reason is not None:
            outcome = "cancelled" if abort_reason == "shutdown" else "aborted"
            return report or report_from_counters(current.counters), outcome, abort_reason
        assert report is not None
        if report.requests.get("success", 0) == 0:
            return report, "failed", None
        return report, "completed", None

    # -- exclusive non-profile work (calibration) -----------------------------------------------

    async def run_exclusive(
        self,
        kind: str,
        max_tokens: int,
        work: Callable[[ExclusiveRun], Coroutine[Any, Any, None]],
        limit_seconds: float,
    ) -> str:
        """Run other load (calibration) in the load slot and under the budget.

        ``work`` keeps ``run.charged`` at an upper bound of the tokens spent so far and stops soon
        after ``run.cancel`` is set. It is skipped (and counted under ``kind`` as the profile label)
        when the slot is taken, the server is not ready or warming up, or the budget is short.
        """
        if self._current is not None:
            return self._skip(kind, "busy", running=self._current.profile)
        current = _Current(kind, kind, self._clock(), LoadCounters())
        self._current = current
        try:
            epoch = self.server.ready_epoch()
            if epoch is None:
                return self._skip(kind, "server_not_ready")
            warm = self.server.started_warm()
            if not warm and self._clock() < epoch + self.settings.warmup_seconds:
                return self._skip(kind, "warmup")
            # A sweep measures capacity: a cold server just after a restart would understate it.
            if not warm and self._clock() < epoch + self.settings.reference_exclusion_seconds:
                return self._skip(kind, "restart_window")
            load = await self.monitor.read_load() if self.settings.polite.enabled else None
            decision = decide(load, 0, self.settings.polite)
            # A sweep cannot be scaled down (it looks for the ceiling): any foreign traffic skips it.
            if decision.action != "run":
                return self._skip(kind, decision.reason or "foreign_traffic", foreign=decision.foreign)
            reservation = self.budget.reserve(max_tokens)
            if reservation is None:
                return self._skip(kind, "budget", needed=max_tokens, remaining=self.budget.remaining())
            started = self._clock()
            run = ExclusiveRun(current.counters, asyncio.Event())
            task = asyncio.ensure_future(work(run))
            current.task = asyncio.current_task()
            monitor = asyncio.ensure_future(
                self.monitor.watch(current.counters, epoch, limit_seconds, watch_kv=False)
            )
            outcome = "completed"
            abort_reason: str | None = None
            try:
                done, _ = await asyncio.wait({task, monitor}, return_when=asyncio.FIRST_COMPLETED)
                if task not in done:
                    abort_reason = monitor.result()
                    outcome = "aborted"
                    _log.warning("exclusive_run_aborted", kind=kind, reason=abort_reason)
                    await self._stop_work(task, run)
                else:
                    task.result()
            except asyncio.CancelledError:
                _uncancel()
                outcome = "cancelled"
                abort_reason = current.cancel_reason or "shutdown"
                await self._stop_work(task, run)
            except Exception as exc:
                _log.error("exclusive_run_failed", kind=kind, error=repr(exc))
                outcome = "failed"
            finally:
                monitor.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await monitor
                self.budget.settle(reservation, run.charged)
            if abort_reason is not None:
                self.metrics.aborts.labels(kind, abort_reason).inc()
            record = {
                "kind": kind,
                "profile": kind,
                "outcome": outcome,
                "abort_reason": abort_reason,
                "started_at": started,
                "finished_at": self._clock(),
                "started_at_iso": iso(started),
                "server_epoch": epoch,
                "launch_hash": self.server.launch_hash(),
                "budget_tokens": min(run.charged, max_tokens),
            }
            self._history.add_run(record, self.settings.history_runs)
            return outcome
        finally:
            self._current = None

    @staticmethod
    async def _stop_work(task: asyncio.Future[None], run: ExclusiveRun) -> None:
        """Ask exclusive work to stop (it returns its partial result), then tear it down if it lingers."""
        run.cancel.set()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError, Exception):
            await asyncio.wait_for(asyncio.shield(task), _CANCEL_GRACE_SECONDS)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await task

    def hourly_profile_tokens(self) -> int:
        """Upper bound of the tokens the scheduled profiles will spend in an hour (cron: one run)."""
        total = 0
        for name, profile in self.settings.profiles.items():
            runs = 1.0
            if profile.cron is None and profile.interval_seconds is not None:
                runs = max(1.0, 3600.0 / profile.interval_seconds)
            total += int(runs * plan_run(name, profile, 1.0).max_tokens)
        return total

    # -- views ----------------------------------------------------------------------------------

    def snapshot(self) -> dict[str, Any]:
        current = self._current
        return {
            "current": None
            if current is None
            else {
                "profile": current.profile,
                "kind": current.kind,
                "started_at": current.started_at,
                "in_flight": current.counters.in_flight,
                "completed": current.counters.completed,
                "failed": current.counters.failed,
            },
            "recent": list(self._history.recent),
            "restarts": list(self._history.restarts),
            "budget": {
                "tokens_per_hour": self.budget.tokens_per_hour,
                "spent": self.budget.spent(),
                "remaining": self.budget.remaining(),
            },
            "next_runs": self.next_runs(),
            "profiles": {name: p.model_dump() for name, p in self.settings.profiles.items()},
        }


def _uncancel() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def _dt(ts: float) -> datetime:
    return datetime.fromtimestamp(ts, UTC)


def _timing(profile: LoadProfileSettings) -> tuple[str | None, float | None, float]:
    """What a profile's job trigger is made of: the same timing keeps the job (and its next run)."""
    return profile.cron, profile.interval_seconds if profile.cron is None else None, profile.jitter_seconds
