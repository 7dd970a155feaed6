"""``sentinel run``'s process: the supervisor, scheduled load, calibration, collectors and exporter, wired.

Start order (each step's failure is a one-line error and a non-zero exit, never a traceback):
config (loaded by the CLI), files (exporter TLS/users; an api_key_file was read with the config),
launch profile (rendered; a simulator profile's arguments checked), state directory (created,
locked: one daemon per directory, pid written), collectors and supervisor objects, exporter
listening, then systemd READY=1, collectors' background reads, supervision (the child), the
scheduler. Everything ``sentinel config`` checks is checked here before the exporter binds.
A SIGTERM at any point of this exits 0 (cleanly stopping whatever had started).

Stop order (SIGTERM/SIGINT, exit 0): STOPPING=1, cancel the load run in progress, stop the
scheduler, stop the server (child mode; the supervisor's own sequence: hooks, SIGTERM, drain,
SIGKILL of the group), collectors, exporter.

SIGHUP re-reads the config. What can change live: ``[schedule]`` (jobs, budget, polite and breaker
thresholds), ``[calibration]`` (next sweep) and ``[log]``. What cannot (``[server]``,
``[exporter]``, ``[collectors]``, ``state_dir``) is kept and a warning names it: changing those
means restarting the server or re-binding a port, which an operator should do on purpose.

Manual reset (a server in the failed state after a crash loop): ``sentinel reset`` (``POST
/reset`` on the exporter: basic auth when that is configured, else loopback clients only; see
export/server.py) or SIGUSR1. Both clear the crash-loop window and start the server again.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from aiohttp import web

import sglang_sentinel
from sglang_sentinel.collect.gpu.energy import LoadMeter
from sglang_sentinel.config import ConfigError, Settings, load_settings, resolve_state_dir
from sglang_sentinel.log import configure_logging, get_logger
from sglang_sentinel.netloc import url_host
from sglang_sentinel.procstats import process_stats
from sglang_sentinel.router.detect import TargetInfo
from sglang_sentinel.schedule.calibration import CalibrationJob
from sglang_sentinel.schedule.executor import LoadEngineExecutor
from sglang_sentinel.schedule.metrics import ScheduleMetrics
from sglang_sentinel.schedule.polite import ServerLoadReader
from sglang_sentinel.schedule.scheduler import LoadScheduler
from sglang_sentinel.statedir import StateDir, StateError, StateLocked
from sglang_sentinel.status_page import render_status_page
from sglang_sentinel.statusdoc import RESET_COMMAND, probe_rows, server_section, status_json
from sglang_sentinel.systemd import Notifier, run_watchdog, watchdog_interval
from sglang_sentinel.verdict import verdict

if TYPE_CHECKING:
    from sglang_sentinel.calibrate import Target
    from sglang_sentinel.collect import CollectorSet
    from sglang_sentinel.group.coordinator import GroupCoordinator
    from sglang_sentinel.supervise import Supervisor
    from sglang_sentinel.supervise.server_version import ServerVersionReader
    from sglang_sentinel.supervise.state import StateChange

__all__ = ["RESET_COMMAND", "Daemon", "DaemonError", "resolve_state_dir"]

_log = get_logger(__name__)

# systemd's default TimeoutStartSec is 90 s; nothing before READY=1 waits on the server.
_STOP_GRACE_SECONDS = 5.0
# Older than a typical scrape interval: while Prometheus scrapes, the status loop never collects.
_COLLECT_STALE_SECONDS = 20.0


class _Stopped(Exception):
    """SIGTERM/SIGINT arrived during start-up: skip the remaining steps, stop what started."""


class DaemonError(Exception):
    """A start-up failure to report in one line; ``exit_code`` 2 for configuration problems."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


class _ServerView:
    """The scheduler's view of the server: the supervisor's published snapshot."""

    def __init__(self, supervisor: Supervisor) -> None:
        self._sup = supervisor

    def ready_epoch(self) -> float | None:
        return self._sup.snapshot().ready_epoch

    def launch_hash(self) -> str | None:
        return self._sup.snapshot().config_hash

    def started_warm(self) -> bool:
        return self._sup.snapshot().started_warm


class Daemon:
    def __init__(
        self,
        settings: Settings,
        *,
        config_path: str | None = None,
        environ: Mapping[str, str] | None = None,
        notifier: Notifier | None = None,
        overrides: Callable[[Settings], Settings] | None = None,
    ) -> None:
        """``overrides``: what the command line changed on top of the file (``--listen``,
        ``--server-port``); applied to a reloaded file too, so a reload compares like with like and
        never reports a section the operator did not change (the image's ``--listen``)."""
        self.settings = settings
        self.config_path = config_path
        self._overrides = overrides
        self.environ = dict(os.environ if environ is None else environ)
        self.notifier = notifier or Notifier.from_env(self.environ)
        self.state_dir = resolve_state_dir(settings, self.environ)
        self.state = StateDir(self.state_dir)
        self.metrics = ScheduleMetrics()
        self.calibration = CalibrationJob(
            settings.calibration,
            state_dir=self.state_dir,
            server_url=self.calibration_url,
            api_key=settings.server.api_key,
            metrics=self.metrics,
            calibrate_when_missing=settings.schedule.calibrate_when_missing,
        )
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[Any]] = []
        self._status_text = ""
        self.supervisor: Supervisor | None = None
        self.group: GroupCoordinator | None = None
        self._version_reader: ServerVersionReader | None = None
        self.collectors: CollectorSet | None = None
        self.scheduler: LoadScheduler | None = None
        self.energy: LoadMeter | None = None
        self.exporter: Any = None
        self._reader: ServerLoadReader | None = None
        self.started_at = time.time()
        # The settings as the configuration declared them, when sentinel resolved kind = "auto".
        self._declared_settings: Settings | None = None
        # kind = "auto" found neither a server nor a router in time: read as a server (shown).
        self._kind_undecided = False

    # -- URLs -----------------------------------------------------------------------------------

    def _served_model(self) -> str:
        """What the server serves, as far as sentinel decides it (child mode's profile)."""
        from sglang_sentinel.supervise.launch import ProfileError, resolve_profile

        if self.settings.server.mode != "child":
            return ""
        try:
            return resolve_profile(self.settings.server)[1].served_model_name
        except ProfileError:
            return ""  # validate() has refused such a config already

    def _target(self, supervisor: Supervisor) -> Target:
        from sglang_sentinel.calibrate import Target

        command = supervisor.command
        model = command.profile.served_model_name if command is not None else ""
        return Target(url=self.calibration_url, served_model=model, launch_hash=supervisor.config_hash)

    @property
    def server_url(self) -> str:
        s = self.settings.server
        return f"http://{url_host(s.host)}:{s.port}"

    @property
    def calibration_url(self) -> str:
        """Where scheduled sweeps go: [calibration] worker_url (a worker behind a router), else the target."""
        return self.settings.calibration.worker_url or self.server_url

    # -- life cycle -----------------------------------------------------------------------------

    async def run(self, stop_requested: Callable[[], bool] | None = None) -> int:
        """Run until SIGTERM/SIGINT; returns the exit code. ``stop_requested``: whether a stop was
        asked for before this loop took the signals over (the CLI's early handler records it)."""
        loop = asyncio.get_running_loop()
        # Installed before anything starts: a SIGTERM during start-up must still stop the server
        # child (its own process group) instead of killing this process and orphaning it.
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.request_stop, sig.name)
        loop.add_signal_handler(signal.SIGHUP, self._on_sighup)
        loop.add_signal_handler(signal.SIGUSR1, self.reset, "SIGUSR1")
        if stop_requested is not None and stop_requested():
            self.request_stop("SIGTERM")
        try:
            # Stopped during start-up: what had started is stopped below, exit 0.
            with contextlib.suppress(_Stopped):
                await self._start()
            try:
                await self._stop.wait()
            finally:
                await self._shutdown()
        finally:
            for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1):
                loop.remove_signal_handler(sig)
            self.state.unlock()
        return 0

    def reset(self, why: str = "request", *, configured: bool = False) -> bool:
        """Manual reset: clear the crash-loop window and start the server (it if failed).
        ``configured``: also end a fallback (the configured launch again, restarted now).

        False when there is nothing to reset yet (still starting, or not the daemon's server)."""
        if self.supervisor is None:
            _log.warning("reset_ignored", reason="still starting", source=why)
            return False
        state = self.supervisor.snapshot().state.value
        _log.info("manual_reset", source=why, server_state=state, configured=configured)
        self.supervisor.reset(configured=configured)
        return True

    def _checkpoint(self) -> None:
        if self._stop.is_set():
            raise _Stopped

    def request_stop(self, why: str = "request") -> None:
        if not self._stop.is_set():
            _log.info("daemon_stopping", signal=why)
            self._stop.set()

    async def _start(self) -> None:
        from sglang_sentinel.collect import build_collector_set
        from sglang_sentinel.collect.gpu.collector import GpuCollector
        from sglang_sentinel.collect.sglang_log import SGLangLogCollector
        from sglang_sentinel.collect.sglang_metrics import SGLangMetricsCollector
        from sglang_sentinel.export import Exporter, ExporterConfigError
        from sglang_sentinel.supervise import ProfileError, Supervisor
        from sglang_sentinel.supervise.server_version import attach_version_reader

        # APScheduler logs two INFO lines per job run: with the 1-second server watch that would be
        # ~170k journal lines a day. Its warnings and errors still come through; coalesced and missed
        # firings are logged (and counted) by the scheduler's own listener.
        logging.getLogger("apscheduler").setLevel(logging.WARNING)
        from sglang_sentinel.validate import validate

        try:
            # In a thread: a simulator profile's argument check is a subprocess, and SIGTERM
            # must still be handled while it runs.
            await asyncio.to_thread(validate, self.settings)
        except ConfigError as exc:
            raise DaemonError(str(exc), 2) from None
        self._checkpoint()
        try:
            self.state.ensure()
            self.state.lock()
        except StateLocked as exc:
            raise DaemonError(f"{exc}; stop it first, or give this one its own state_dir", 2) from None
        except StateError as exc:
            raise DaemonError(f"{exc} (set state_dir or SENTINEL_STATE_DIR)", 2) from None
        declared = self.settings.server.kind
        evidence = await self._resolve_target_kind() if declared == "auto" else ""
        s = self.settings
        try:
            collectors = build_collector_set(s.with_gpu_expectation())
        except (ValueError, KeyError) as exc:
            raise DaemonError(f"collectors: {exc}", 2) from None
        from sglang_sentinel.group import build_group, member_of

        supervisor = Supervisor(s.server, state_dir=self.state_dir, member=member_of(s.group))
        try:
            self.group = group = build_group(s.group, supervisor)
        except ValueError as exc:  # the token file changed since the config was loaded
            raise DaemonError(f"group: {exc}", 2) from None
        collectors.add("supervisor", supervisor.collector())
        if group is not None:
            collectors.add("group", group.collector())
        collectors.add(
            "target", TargetInfo(s.server.kind, declared, evidence, undecided=self._kind_undecided)
        )
        collectors.add("schedule", self.metrics)
        log_source = collectors.get("sglang_log")
        if isinstance(log_source, SGLangLogCollector):
            feed = log_source.feed
            supervisor.add_line_listener(lambda line: feed(line.text))
        gpu_source = collectors.get("gpu")
        if isinstance(gpu_source, GpuCollector):
            poller = gpu_source.poller

            def host_facts() -> tuple[str | None, str | None]:
                snap = poller.snapshot
                model = snap.devices[0].identity.name if snap.devices else None
                return model, snap.driver_version or None

            supervisor.set_host_facts(host_facts)
        # The running server's SGLang version, read on each transition to ready, for the sglang collector.
        metrics_source = collectors.get("sglang")
        version_sink = (
            metrics_source.set_sglang_version if isinstance(metrics_source, SGLangMetricsCollector) else None
        )
        self._version_reader = attach_version_reader(supervisor, version_sink, self.server_url)
        self.supervisor, self.collectors = supervisor, collectors
        self._reader = ServerLoadReader(
            self.server_url,
            s.schedule.polite.source,
            s.schedule.polite.request_timeout_seconds,
            api_key=s.server.api_key,
            # A router: foreign traffic over all its workers (/get_loads, /engine_metrics).
            kind="router" if s.server.kind == "router" else "server",
        )
        gpu_meter = (
            gpu_source.poller.energy_meter(s.energy.gpus) if isinstance(gpu_source, GpuCollector) else None
        )
        self.energy = energy = LoadMeter.configured(gpu_meter, s.energy, s.cost)
        if energy is not None:
            self.metrics.energy_metered = True
            self.metrics.energy_alert_ratio.set(s.energy.alert_ratio)
        self.calibration.energy = energy
        self.scheduler = LoadScheduler(
            s.schedule,
            server=_ServerView(supervisor),
            executor=LoadEngineExecutor(self.server_url, s.server.api_key, energy),
            metrics=self.metrics,
            state=self.state,
            load_reader=self._reader,
            gpu=gpu_source.health if isinstance(gpu_source, GpuCollector) else None,
            target_url=self.server_url,
            served_model=self._served_model(),
            gaps=supervisor.gaps,
        )
        scheduler = self.scheduler
        # Synthetic load stops before any deliberate stop or restart of the server.
        supervisor.add_before_stop_hook(lambda: scheduler.cancel_current("server_restart"))
        supervisor.on_canary_garbage(scheduler.revoke_reference)
        supervisor.subscribe_state(self._on_state_change)
        # Before the exporter listens: the restored last-run series (ReferenceRunsStale's timestamp)
        # are in the very first scrape, not one scrape later when a scrape lands in between
        # (tests/prom/test_restart_gpu_alerts_live.py). Reading the history needs no server.
        scheduler.restore()
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
                *(group.api.routes() if group is not None else ()),
            ],
            reset=self._reset,
            own_auth_prefixes=("/group/",),  # bearer token (group/peerapi.py), not the scrapers' basic auth
        )
        self._checkpoint()
        try:
            await self.exporter.start()
        except ExporterConfigError as exc:
            self.exporter = None
            await self._shutdown()
            # Exit 2 for a busy port too: another exporter (often a second sentinel) holds it, and
            # systemd retrying every few seconds would not change that; --listen or [exporter] port.
            hint = " (another process listens there: set [exporter] port or --listen)"
            raise DaemonError(str(exc) + (hint if "cannot listen" in str(exc) else ""), 2) from None
        self._checkpoint()
        await collectors.start()
        self._checkpoint()
        try:
            await supervisor.start()
        except ProfileError as exc:
            await self._shutdown()
            raise DaemonError(f"server profile: {exc}", 2) from None
        except Exception as exc:  # e.g. the server binary cannot be run: one line, nothing left behind
            await self._shutdown()
            raise DaemonError(f"cannot start supervising the server: {exc}") from None
        if group is not None:
            await group.start()
        # After supervisor.start(): the launch command (and so the launch hash) is rendered now.
        self.calibration.set_target(self._target(supervisor))
        self.calibration.restore()
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

    async def _resolve_target_kind(self) -> str:
        """``[server] kind = "auto"``: probe the target's routes; undecided -> "server" (today's reading)."""
        from sglang_sentinel.router.detect import resolve_kind

        s = self.settings.server
        found = await resolve_kind(
            self.server_url,
            stop=self._stop,
            within_s=s.router.detect_timeout_seconds,
            interval_s=s.startup_poll_interval,
            timeout_s=s.router.timeout_seconds,
            api_key=s.api_key,
        )
        self._checkpoint()
        assert found is not None  # None only when stopped, and _checkpoint raised then
        self._declared_settings = self.settings
        self._kind_undecided = found.kind is None
        self.settings = self.settings.with_target_kind(found.kind or "server")
        return found.evidence

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
        if self.group is not None:
            await self.group.stop()
        if self.supervisor is not None:
            try:
                await self.supervisor.stop()
            except Exception as exc:  # the stop sequence must go on to the end
                _log.error("supervisor_stop_failed", error=repr(exc))
        if self._version_reader is not None:
            await self._version_reader.close()
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
            if self._overrides is not None:
                new = self._overrides(new)
        except ConfigError as exc:
            _log.error("reload_rejected", error=str(exc))
            self.notifier.ready(self._status_line())
            return
        # [server] kind = "auto" was resolved at start: compare with what the file said.
        before = self._declared_settings or self.settings
        kept = [
            name
            for name in ("server", "exporter", "collectors", "state_dir")
            if getattr(new, name) != getattr(before, name)
        ]
        if kept:
            _log.warning("reload_needs_restart", sections=kept)
        update = {"schedule": new.schedule, "calibration": new.calibration, "log": new.log}
        self.settings = self.settings.model_copy(update=update)
        self.calibration.reload(new.calibration, calibrate_when_missing=new.schedule.calibrate_when_missing)
        configure_logging(new.log.level, new.log.format)
        if self.scheduler is not None:
            self.scheduler.reload(new.schedule)
            if new.schedule.recalibrate_cron:
                self.scheduler.add_cron_job("calibration", self.calibrate, new.schedule.recalibrate_cron)
        _log.info("config_reloaded", kept_until_restart=kept)
        self.notifier.ready(self._status_line())

    # -- calibration ----------------------------------------------------------------------------

    async def calibrate(self) -> str:
        """The calibration job's one sweep (a cron job, and the initial one after a reference run)."""
        assert self.scheduler is not None
        return await self.calibration.run(self.scheduler)

    # -- status ---------------------------------------------------------------------------------

    def _status_line(self) -> str:
        sup = self.supervisor
        state = sup.snapshot().state.value if sup is not None else "starting"
        current = self.scheduler.snapshot()["current"] if self.scheduler is not None else None
        load = f"; load {current['profile']} running" if current else ""
        hint = f" (crash loop; `{RESET_COMMAND}` to retry)" if state == "failed" else ""
        return f"server {state}{hint}{load}{self._kind_note()}"

    def _kind_note(self) -> str:
        if not self._kind_undecided:
            return ""
        return "; target kind undecided (read as a server): set [server] kind = router or server"

    def _on_state_change(self, change: StateChange) -> None:
        if change.new.value == "failed":
            # The one place an operator looks first (journal): what to run, exactly.
            _log.error(
                "server_failed",
                reason=change.reason,
                action=f"fix the cause, then run `{RESET_COMMAND}` (or kill -USR1 {os.getpid()})",
            )
        self._update_status()

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
                and not self.calibration.missing_checked
            ):
                self.calibration.maybe_after_run(self.scheduler, self.calibrate)
            await asyncio.sleep(2.0)

    def status(self) -> dict[str, Any]:
        """The snapshot behind ``/``, ``/status.json`` and ``sentinel status``."""
        now = time.time()
        snap = self.supervisor.snapshot() if self.supervisor is not None else None
        server: dict[str, Any] = {
            "mode": self.settings.server.mode,
            "url": self.server_url,
            "kind": self.settings.server.kind,
            "kind_undecided": self._kind_undecided,
        }
        probes: list[dict[str, Any]] = []
        if snap is not None:
            server.update(server_section(snap, self.settings.server, self.server_url, now))
            probes = probe_rows(snap, now)
        collectors: list[dict[str, Any]] = []
        if self.collectors is not None:
            # success: True/False/None (None also while not applicable: no verdict, not a failure).
            why = {**self.collectors.failing, **self.collectors.not_applicable}
            collectors = [
                {
                    "name": n,
                    "success": self.collectors.outcome(n),
                    "state": self.collectors.state(n),
                    "detail": why.get(n, ""),
                }
                for n in self.collectors.names
            ]
        capacity = self.calibration.capacity
        report = self.calibration.report_dir / "index.html"
        if self._version_reader is not None and self._version_reader.latest is not None:
            # Which release row the readers use; a release newer than every one read says so here.
            from sglang_sentinel.sglang.versions import resolve

            reported, source = self._version_reader.latest
            res = resolve(reported)
            server["sglang"] = {
                "reported": reported,
                "source": source,
                "behaves_as": str(res.behaves_as),
                "known": res.known,
                "note": res.note,
            }
        return {
            "generated_at": now,
            "version": sglang_sentinel.__version__,
            "daemon": {
                "pid": os.getpid(),
                "started_at": self.started_at,
                "state_dir": str(self.state_dir),
                "process": process_stats(),
            },
            "server": server,
            "probes": probes,
            "schedule": self.scheduler.snapshot() if self.scheduler is not None else {},
            "calibrating": self.calibration.calibrating,
            "capacity": capacity.as_status() if capacity is not None else {},
            "energy": self.energy.status() if self.energy is not None else {"metered": False},
            "calibration_report_url": "/calibration/report" if report.is_file() else None,
            "collectors": collectors,
            **({"group": self.group.snapshot().as_status()} if self.group is not None else {}),
        }

    def _health(self) -> tuple[bool, str]:
        if not self._loop_healthy():
            return False, "scheduler stalled"
        return True, f"ok; {self._status_line()}"

    async def _fresh_collectors(self) -> None:
        """Collect first when the latest collection predates the server's last state change: the
        collectors' status must not show "ok" for a server that crashed after the last scrape."""
        if self.collectors is None or self.supervisor is None:
            return
        since_change = max(0.0, time.time() - self.supervisor.snapshot().since)
        if self.collectors.is_stale(min(_COLLECT_STALE_SECONDS, since_change)):
            await asyncio.to_thread(self.collectors.refresh)

    async def _index(self, request: web.Request) -> web.StreamResponse:
        await self._fresh_collectors()
        return web.Response(text=render_status_page(self.status()), content_type="text/html")

    async def _verdict(self, request: web.Request) -> web.StreamResponse:
        code, text = verdict(self.status(), require_ready="ready" in request.query)
        return web.Response(status=code, text=text + "\n")

    async def _status_json(self, request: web.Request) -> web.StreamResponse:
        await self._fresh_collectors()
        return web.json_response(self.status(), dumps=status_json)

    async def _reset(self, request: web.Request) -> web.StreamResponse:
        # Who may call it (POST, authenticated or loopback) is the exporter's business (server.py).
        before = self.supervisor.snapshot().state.value if self.supervisor is not None else "starting"
        configured = request.query.get("configured", "") in ("1", "true", "yes")
        if not self.reset("http", configured=configured):
            return web.json_response({"reset": False, "server_state": before}, status=503)
        return web.json_response({"reset": True, "server_state": before})

    async def _calibration_json(self, request: web.Request) -> web.StreamResponse:
        from sglang_sentinel.calibrate import store_for

        latest = await asyncio.to_thread(
            lambda: store_for(self.state_dir, self.settings.calibration, self.calibration.target).latest(
                conclusive=True
            )
        )
        if latest is None:
            return web.json_response({"error": "no conclusive calibration yet"}, status=404)
        return web.Response(text=latest.model_dump_json(indent=1), content_type="application/json")

    async def _calibration_report(self, request: web.Request) -> web.StreamResponse:
        path = self.calibration.report_dir / "index.html"
        if not path.is_file():
            return web.Response(status=404, text="no calibration report yet (see /calibration/latest.json)\n")
        return web.Response(text=path.read_text(encoding="utf-8"), content_type="text/html")
