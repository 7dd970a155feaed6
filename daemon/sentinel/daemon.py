"""``sentinel run``'s process: the supervisor, scheduled load, calibration, collectors and exporter, wired.

Start order (each step's failure is a one-line error and a non-zero exit, never a traceback):
state directory, collectors and supervisor objects, exporter listening, then systemd READY=1,
collectors' background reads, supervision, the scheduler. Stop order (SIGTERM/SIGINT, exit 0):
STOPPING=1, cancel the load run in progress, stop the scheduler, stop the server (child mode;
the supervisor's own sequence: hooks, SIGTERM, drain, SIGKILL of the group), collectors, exporter.

SIGHUP re-reads the config. What can change live: ``[schedule]`` (jobs, budget, polite and breaker
thresholds), ``[calibration]`` (next sweep) and ``[log]``. What cannot (``[server]``,
``[exporter]``, ``[collectors]``, ``state_dir``) is kept and a warning names it: changing those
means restarting the server or re-binding a port, which an operator should do on purpose.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import os
import signal
import time
from collections.abc import Mapping
from datetime import UTC
from pathlib import Path
from typing import TYPE_CHECKING, Any

from aiohttp import web

import sentinel
from sentinel.config import ConfigError, Settings, load_settings
from sentinel.log import configure_logging, get_logger
from sentinel.netloc import url_host
from sentinel.schedule.executor import LoadEngineExecutor
from sentinel.schedule.metrics import ScheduleMetrics
from sentinel.schedule.polite import ServerLoadReader
from sentinel.schedule.scheduler import ExclusiveRun, LoadScheduler
from sentinel.schedule.state import StateDir, StateError
from sentinel.status_page import render_status_page
from sentinel.systemd import Notifier, run_watchdog, watchdog_interval
from sentinel.verdict import verdict

if TYPE_CHECKING:
    from sentinel.calibrate import CalibrationResult, Progress, Step, StepPlan
    from sentinel.collect import CollectorSet
    from sentinel.supervise import Supervisor

__all__ = ["Daemon", "DaemonError", "resolve_state_dir"]

_log = get_logger("sentinel.daemon")

# Clock-event reasons that mean the GPU is being held back by heat or a power fault (not idling,
# not an application clock setting): the circuit breaker stops synthetic load on any of them.
_THROTTLE_REASONS = ("hw_slowdown", "hw_thermal", "sw_thermal", "hw_power_brake")
# Calibration results that say something about capacity (a ceiling, an SLO limit, or at least
# "more than max_concurrency"); the others leave the capacity gauges as they were.
_CONCLUSIVE = frozenset({"saturated", "slo", "max-concurrency"})
# systemd's default TimeoutStartSec is 90 s; nothing before READY=1 waits on the server.
_STOP_GRACE_SECONDS = 5.0
# Older than a typical scrape interval: while Prometheus scrapes, the status loop never collects.
_COLLECT_STALE_SECONDS = 20.0


class DaemonError(Exception):
    """A start-up failure to report in one line; ``exit_code`` 2 for configuration problems."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def resolve_state_dir(settings: Settings, environ: Mapping[str, str]) -> Path:
    """The configured state_dir; when it was left at its default: systemd's $STATE_DIRECTORY, the
    default if writable, else the user's XDG state directory (so the README's first command works
    without root)."""
    if "state_dir" in settings.model_fields_set:
        return settings.state_dir
    if environ.get("STATE_DIRECTORY"):
        # systemd's StateDirectory= may list several, colon-separated: the first is ours.
        return Path(environ["STATE_DIRECTORY"].split(":")[0])
    default = settings.state_dir
    if os.access(default, os.W_OK) or (not default.exists() and os.access(default.parent, os.W_OK)):
        return default
    base = Path(environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "sentinel"


class _ServerView:
    def __init__(self, supervisor: Supervisor) -> None:
        self._sup = supervisor

    def ready_epoch(self) -> float | None:
        from sentinel.supervise import ServerState

        return self._sup.epoch if self._sup.state is ServerState.READY else None

    def launch_hash(self) -> str | None:
        return self._sup.config_hash

    def started_warm(self) -> bool:
        # Only a server sentinel did not start can be found already serving; the supervisor knows a
        # time-to-ready only when it saw the start (launched it, or saw the port refused first).
        return self._sup.settings.mode != "child" and self._sup.start_duration is None


class _GpuView:
    """The breaker's view of the GPUs: the latest background readings of the ``gpu`` collector."""

    def __init__(self, collectors: CollectorSet) -> None:
        self._collectors = collectors

    def _readings(self) -> list[Any]:
        source = self._collectors.get("gpu")
        poller = getattr(source, "poller", None)
        if poller is None:
            return []
        return [s.reading for s in poller.snapshot.devices if s.ok and s.reading is not None]

    def max_temperature_celsius(self) -> float | None:
        temps = [r.temperature_celsius for r in self._readings() if r.temperature_celsius is not None]
        return max(temps) if temps else None

    def throttled(self) -> bool | None:
        readings = self._readings()
        if not readings:
            return None
        return any(bool((r.clock_events or {}).get(reason)) for r in readings for reason in _THROTTLE_REASONS)


class Daemon:
    def __init__(
        self,
        settings: Settings,
        *,
        config_path: str | None = None,
        environ: Mapping[str, str] | None = None,
        notifier: Notifier | None = None,
    ) -> None:
        self.settings = settings
        self.config_path = config_path
        self.environ = dict(os.environ if environ is None else environ)
        self.notifier = notifier or Notifier.from_env(self.environ)
        self.state_dir = resolve_state_dir(settings, self.environ)
        self.state = StateDir(self.state_dir)
        self.metrics = ScheduleMetrics()
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._calibrating = False
        self._calibration_missing_checked = False
        self._status_text = ""
        self.supervisor: Supervisor | None = None
        self.collectors: CollectorSet | None = None
        self.scheduler: LoadScheduler | None = None
        self.exporter: Any = None
        self._reader: ServerLoadReader | None = None
        self.started_at = time.time()

    # -- URLs -----------------------------------------------------------------------------------

    @property
    def server_url(self) -> str:
        s = self.settings.server
        return f"http://{url_host(s.host)}:{s.port}"

    # -- life cycle -----------------------------------------------------------------------------

    async def run(self) -> int:
        """Run until SIGTERM/SIGINT; returns the exit code."""
        loop = asyncio.get_running_loop()
        # Installed before anything starts: a SIGTERM during start-up must still stop the server
        # child (its own process group) instead of killing this process and orphaning it.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, sig.name)
        loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
        try:
            await self._start()
            try:
                await self._stop.wait()
            finally:
                await self._shutdown()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
                loop.remove_signal_handler(sig)
        return 0

    def request_stop(self, why: str = "request") -> None:
        if not self._stop.is_set():
            _log.info("daemon_stopping", signal=why)
            self._stop.set()

    async def _start(self) -> None:
        from sentinel.collect import build_collector_set
        from sentinel.export import Exporter, ExporterConfigError
        from sentinel.supervise import ProfileError, Supervisor

        # APScheduler logs two INFO lines per job run: with the 1-second server watch that would be
        # ~170k journal lines a day. Its warnings and errors still come through; coalesced and missed
        # firings are logged (and counted) by the scheduler's own listener.
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
        try:
            self.state.ensure()
        except StateError as exc:
            raise DaemonError(f"{exc} (set state_dir or SENTINEL_STATE_DIR)", 2) from None
        s = self.settings
        try:
            collectors = build_collector_set(s)
        except (ValueError, KeyError) as exc:
            raise DaemonError(f"collectors: {exc}", 2) from None
        supervisor = Supervisor(s.server, state_dir=self.state_dir)
        collectors.add("supervisor", supervisor.collector())
        collectors.add("schedule", self.metrics)
        log_source = collectors.get("sglang_log")
        feed = getattr(log_source, "feed", None)
        if feed is not None:
            supervisor.add_line_listener(lambda line: feed(line.text))
        self.supervisor, self.collectors = supervisor, collectors
        self._reader = ServerLoadReader(
            self.server_url,
            s.schedule.polite.source,
            s.schedule.polite.request_timeout_seconds,
            api_key=s.server.api_key,
        )
        self.scheduler = LoadScheduler(
            s.schedule,
            server=_ServerView(supervisor),
            executor=LoadEngineExecutor(self.server_url, s.server.api_key),
            metrics=self.metrics,
            state=self.state,
            load_reader=self._reader,
            gpu=_GpuView(collectors),
        )
        scheduler = self.scheduler
        # Synthetic load stops before any deliberate stop or restart of the server.
        supervisor.add_before_stop_hook(lambda: scheduler.cancel_current("server_restart"))
        supervisor.subscribe_state(lambda change: self._update_status())
        self._restore_capacity()
        self.exporter = Exporter(
            collectors.registry(),
            s.exporter,
            index=self._index,
            health=self._health,
            routes=[
                web.get("/status.json", self._status_json),
                web.get("/verdict", self._verdict),
                web.get("/calibration/latest.json", self._calibration_json),
                web.get("/calibration/report", self._calibration_report),
            ],
        )
        try:
            await self.exporter.start()
        except ExporterConfigError as exc:
            self.exporter = None
            await self._shutdown()
            # A busy port may free up (exit 1, systemd retries); bad TLS/auth files will not (exit 2).
            raise DaemonError(str(exc), 2 if "cannot listen" not in str(exc) else 1) from None
        await collectors.start()
        try:
            await supervisor.start()
        except ProfileError as exc:
            await self._shutdown()
            raise DaemonError(f"server profile: {exc}", 2) from None
        except Exception as exc:  # e.g. the server binary cannot be run: one line, nothing left behind
            await self._shutdown()
            raise DaemonError(f"cannot start supervising the server: {exc}") from None
        scheduler.restore()
        await scheduler.start()
        if s.schedule.recalibrate_cron:
            scheduler.add_cron_job("calibration", self.calibrate, s.schedule.recalibrate_cron)
        self.notifier.ready(self._status_line())
        interval = watchdog_interval(self.environ)
        if interval is not None:
            self._tasks.append(asyncio.create_task(run_watchdog(self.notifier, interval, self._loop_healthy)))
        self._tasks.append(asyncio.create_task(self._status_loop()))
        _log.info(
            "daemon_started",
            exporter=self.exporter.url,
            server=self.server_url,
            mode=s.server.mode,
            state_dir=str(self.state_dir),
            watchdog_interval=interval,
        )

    async def _shutdown(self) -> None:
        self.notifier.stopping("stopping: cancelling load, stopping the server")
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        self._tasks.clear()
        if self.scheduler is not None:
            await self.scheduler.stop()
        if self.supervisor is not None:
            try:
                await self.supervisor.stop()
            except Exception as exc:  # the stop sequence must go on to the end
                _log.error("supervisor_stop_failed", error=repr(exc))
        if self.collectors is not None:
            await self.collectors.stop(_STOP_GRACE_SECONDS)
        if self._reader is not None:
            await self._reader.aclose()
        if self.exporter is not None:
            await self.exporter.stop()
        self.notifier.close()
        _log.info("daemon_stopped")

    def _loop_healthy(self) -> bool:
        # The scheduler's 1-second server watch proves APScheduler still runs jobs on this loop.
        if self.scheduler is None:
            return True
        return time.monotonic() - self.scheduler.last_tick < 30.0

    # -- SIGHUP ---------------------------------------------------------------------------------

    def _on_sighup(self) -> None:
        if self.scheduler is None:
            _log.warning("reload_ignored", reason="still starting")
            return
        try:
            self._reload()
        except Exception as exc:  # a reload must never take the daemon down
            _log.error("reload_failed", error=repr(exc))
            self.notifier.ready(self._status_line())

    def _reload(self) -> None:
        self.notifier.reloading()
        try:
            new = load_settings(self.config_path, environ=self.environ)
        except ConfigError as exc:
            _log.error("reload_rejected", error=str(exc))
            self.notifier.ready(self._status_line())
            return
        kept = [
            name
            for name in ("server", "exporter", "collectors", "state_dir")
            if getattr(new, name) != getattr(self.settings, name)
        ]
        if kept:
            _log.warning("reload_needs_restart", sections=kept)
        update = {"schedule": new.schedule, "calibration": new.calibration, "log": new.log}
        self.settings = self.settings.model_copy(update=update)
        configure_logging(new.log.level, new.log.format)
        if self.scheduler is not None:
            self.scheduler.reload(new.schedule)
            if new.schedule.recalibrate_cron:
                self.scheduler.add_cron_job("calibration", self.calibrate, new.schedule.recalibrate_cron)
        _log.info("config_reloaded", kept_until_restart=kept)
        self.notifier.ready(self._status_line())

    # -- calibration ----------------------------------------------------------------------------

    def _restore_capacity(self) -> None:
        try:
            from sentinel.calibrate import store_for

            results = store_for(self.state_dir, self.settings.calibration).results()
        except Exception as exc:  # an unreadable store must not stop the daemon
            _log.warning("calibration_store_unreadable", error=repr(exc))
            return
        conclusive = [r for r in results if r.stop_reason in _CONCLUSIVE]
        if conclusive:
            self._set_capacity(conclusive[-1])

    def _set_capacity(self, result: CalibrationResult) -> None:
        self.metrics.set_capacity(
            result.saturation_output_throughput.value,
            result.knee_concurrency.value,
            result.max_concurrency_within_slo.value,
            result.finished_at.replace(tzinfo=result.finished_at.tzinfo or UTC).timestamp(),
        )

    def maybe_calibrate_after_run(self) -> None:
        """Once per daemon life: calibrate soon after a reference run if no calibration exists yet."""
        if self._calibration_missing_checked or not self.settings.schedule.calibrate_when_missing:
            return
        self._calibration_missing_checked = True
        if not self.metrics.capacity() and self.scheduler is not None:
            self.scheduler.add_once("calibration:initial", self.calibrate, time.time() + 5.0)

    async def calibrate(self) -> str:
        """One (incremental when possible) calibration in the load slot, within the token budget."""
        from sentinel.calibrate import recalibrate, store_for

        assert self.scheduler is not None
        cal = self.settings.calibration
        per_request = cal.input_len + cal.output_len
        bound = cal.max_requests * per_request
        # Enough for a few steps; with less the sweep cannot say anything worth its cost.
        minimum = min(bound, 4 * cal.step_min_requests * per_request)
        # Reference runs come first: the sweep may use what the profiles will not need this hour.
        allowed = min(bound, self.scheduler.budget.remaining() - self.scheduler.hourly_profile_tokens())
        if allowed < minimum:
            allowed = bound  # reserve() refuses it: recorded as skipped(budget)
        store = store_for(self.state_dir, cal)

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

            self._calibrating = True
            try:
                result = await recalibrate(
                    cal,
                    store,
                    base_url=self.server_url,
                    api_key=self.settings.server.api_key or None,
                    on_step=on_step,
                    on_plan=on_plan,
                    cancel=run.cancel,
                )
            finally:
                self._calibrating = False
            if result.stop_reason in _CONCLUSIVE:
                self._set_capacity(result)
            else:
                # Client-bound, failing, cut short: no statement about capacity. The gauges keep the
                # last conclusive result; the result itself is in the store and the report.
                inconclusive = True
                _log.warning("calibration_inconclusive", stop_reason=str(result.stop_reason))
            await asyncio.to_thread(self._write_report, result)
            _log.info(
                "calibration_done",
                mode=result.mode,
                stop_reason=str(result.stop_reason),
                saturation_output_throughput=result.saturation_output_throughput.value,
                knee=result.knee_concurrency.value,
                requests=result.requests_spent,
                regressions=list(result.comparison.regressions) if result.comparison else [],
            )

        outcome = await self.scheduler.run_exclusive("calibration", allowed, work, cal.max_duration + 60.0)
        if outcome in ("completed", "failed", "cancelled", "aborted"):
            self.metrics.calibrations.labels("inconclusive" if inconclusive else outcome).inc()
        return outcome

    def _write_report(self, result: CalibrationResult) -> None:
        try:
            from sentinel.calibrate.report import write_report

            write_report(result, self.state_dir / "calibration" / "report")
        except Exception as exc:  # matplotlib is an optional extra; the JSON is always there
            _log.info(
                "calibration_report_not_written", reason=str(exc).splitlines()[0] if str(exc) else repr(exc)
            )

    # -- status ---------------------------------------------------------------------------------

    def _status_line(self) -> str:
        sup = self.supervisor
        state = sup.state.value if sup is not None else "starting"
        current = self.scheduler.snapshot()["current"] if self.scheduler is not None else None
        load = f"; load {current['profile']} running" if current else ""
        return f"server {state}{load}"

    def _update_status(self) -> None:
        text = self._status_line()
        if text != self._status_text:
            self._status_text = text
            self.notifier.status(text)

    async def _status_loop(self) -> None:
        while True:
            self._update_status()
            # The status page shows each collector's latest outcome; with no Prometheus scraping
            # (the embedded default) nothing else would ever collect, so collect here when stale.
            if self.collectors is not None and self.collectors.is_stale(_COLLECT_STALE_SECONDS):
                await asyncio.to_thread(self.collectors.refresh)
            if (
                self.scheduler is not None
                and self.scheduler.completed_runs
                and not self._calibration_missing_checked
            ):
                self.maybe_calibrate_after_run()
            await asyncio.sleep(2.0)

    def status(self) -> dict[str, Any]:
        """The snapshot behind ``/``, ``/status.json`` and ``sentinel status``."""
        sup = self.supervisor
        server: dict[str, Any] = {"mode": self.settings.server.mode, "url": self.server_url}
        probes: list[dict[str, Any]] = []
        if sup is not None:
            server.update(
                state=sup.state.value,
                since=sup.machine.since,
                ready_at=sup.epoch,
                start_duration_seconds=sup.start_duration,
                launch_hash=sup.config_hash,
                restarts=sum(sup.restarts.values()),
                last_crash=str(sup.last_crash.reason) if sup.last_crash is not None else None,
            )
            confirmed = sup.confirmed
            probes = [
                {
                    "name": name,
                    "success": r.ok,
                    "reason": r.reason,
                    "duration_seconds": r.duration,
                    "detail": r.detail or r.reason,
                    # Failed `failures` times in a row on this server: what /verdict acts on.
                    "confirmed": name in confirmed,
                    "consecutive_failures": confirmed.get(name, 0),
                }
                for name, r in sorted(sup.probes.items())
            ]
        collectors: list[dict[str, Any]] = []
        if self.collectors is not None:
            failing = self.collectors.failing
            collectors = [
                {"name": n, "success": self.collectors.outcome(n), "detail": failing.get(n, "")}
                for n in self.collectors.names
            ]
        capacity = self.metrics.capacity()
        report = self.state_dir / "calibration" / "report" / "index.html"
        return {
            "generated_at": time.time(),
            "version": sentinel.__version__,
            "daemon": {"pid": os.getpid(), "started_at": self.started_at, "state_dir": str(self.state_dir)},
            "server": server,
            "probes": probes,
            "schedule": self.scheduler.snapshot() if self.scheduler is not None else {},
            "calibrating": self._calibrating,
            "capacity": {
                "output_throughput": capacity.get("sentinel_capacity_output_throughput_tokens_per_second"),
                "knee_concurrency": capacity.get("sentinel_capacity_knee_concurrency"),
                "slo_concurrency": capacity.get("sentinel_capacity_slo_concurrency"),
                "finished_at": capacity.get("sentinel_capacity_last_calibration_timestamp_seconds"),
            }
            if capacity
            else {},
            "calibration_report_url": "/calibration/report" if report.is_file() else None,
            "collectors": collectors,
        }

    def _health(self) -> tuple[bool, str]:
        if not self._loop_healthy():
            return False, "scheduler stalled"
        return True, f"ok; {self._status_line()}"

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.Response(text=render_status_page(self.status()), content_type="text/html")

    async def _verdict(self, request: web.Request) -> web.StreamResponse:
        code, text = verdict(self.status(), require_ready="ready" in request.query)
        return web.Response(status=code, text=text + "\n")

    async def _status_json(self, request: web.Request) -> web.StreamResponse:
        return web.json_response(self.status(), dumps=_dumps)

    async def _calibration_json(self, request: web.Request) -> web.StreamResponse:
        from sentinel.calibrate import store_for

        latest = await asyncio.to_thread(
            lambda: store_for(self.state_dir, self.settings.calibration).latest()
        )
        if latest is None:
            return web.json_response({"error": "no calibration yet"}, status=404)
        return web.Response(text=latest.model_dump_json(indent=1), content_type="application/json")

    async def _calibration_report(self, request: web.Request) -> web.StreamResponse:
        path = self.state_dir / "calibration" / "report" / "index.html"
        if not path.is_file():
            return web.Response(status=404, text="no calibration report yet (see /calibration/latest.json)\n")
        return web.Response(text=path.read_text(encoding="utf-8"), content_type="text/html")


def _json_safe(value: Any) -> Any:
    # JSON has no NaN/Infinity; a figure that is not a number is "unknown" (null).
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def _dumps(value: Any) -> str:
    return json.dumps(_json_safe(value), default=str)
