"""The supervisor: launch, watch, check, classify, restart — and stop cleanly.

One control task per supervisor. In child and systemd mode it runs "lives": preflight → launch →
wait for readiness (starting → warming → ready) → run the checks until the server exits or a
check policy asks for a restart → classify → back off → next life. More than
``restart.max_restarts`` restarts within ``restart.window`` ends in ``failed`` until
:meth:`Supervisor.reset`. In external mode it only observes and reports.

Seams: the check loops are :mod:`~sglang_sentinel.supervise.checks`, the on-disk restart history
:mod:`~sglang_sentinel.supervise.history`, what others read :mod:`~sglang_sentinel.supervise.snapshot`, what
to launch and the preflight before it :mod:`~sglang_sentinel.supervise.prelaunch`, external mode's
observation loop :mod:`~sglang_sentinel.supervise.external`, the wait for readiness after a launch
:mod:`~sglang_sentinel.supervise.readiness`; this module is the life cycle and the restart decisions.
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, replace
from pathlib import Path

import httpx

from sglang_sentinel.httpread import tls_context
from sglang_sentinel.log import get_logger
from sglang_sentinel.netloc import url_host
from sglang_sentinel.supervise.backoff import RestartPolicy
from sglang_sentinel.supervise.checks import Checks
from sglang_sentinel.supervise.classify import RESTART_REASONS, Crash, classify_exit, decisive_lines
from sglang_sentinel.supervise.external import observe_external
from sglang_sentinel.supervise.fallback import Fallback, HostFacts
from sglang_sentinel.supervise.gaps import GapWatch
from sglang_sentinel.supervise.garbage import GarbageListener, GarbageWatch
from sglang_sentinel.supervise.history import HISTORY_FILE, RestartHistory
from sglang_sentinel.supervise.launch import LaunchCommand, api_key_of, config_hash_of, unit_command
from sglang_sentinel.supervise.logbus import LineListener, LogBus, LogLine
from sglang_sentinel.supervise.member import GroupMember, follow
from sglang_sentinel.supervise.metrics import SupervisorCollector
from sglang_sentinel.supervise.portowner import describe_holders, port_holders
from sglang_sentinel.supervise.preflight import GpuReader, PreflightResult
from sglang_sentinel.supervise.prelaunch import preflight_before_launch, render_launch_command, runner_for
from sglang_sentinel.supervise.probes import ProbeResult
from sglang_sentinel.supervise.readiness import await_ready
from sglang_sentinel.supervise.runners import ChildRunner, ExitInfo, LaunchError, Runner, SystemdRunner
from sglang_sentinel.supervise.server_version import ServerVersionReader
from sglang_sentinel.supervise.settings import ServerSettings
from sglang_sentinel.supervise.snapshot import SupervisorSnapshot, frozen
from sglang_sentinel.supervise.state import ServerState, StateListener, StateMachine
from sglang_sentinel.supervise.tasks import cancel_and_wait, either
from sglang_sentinel.supervise.unitenv import UnitEnvError

__all__ = ["BeforeStopHook", "GarbageListener", "Supervisor"]

_log = get_logger(__name__)

BeforeStopHook = Callable[[], Awaitable[None]]
# Awaited before each launch (a multi-node group's coordinator: "the group starts now").
LaunchGate = Callable[[], Awaitable[None]]

# The log-line counters of the snapshot lag the lines by at most this (one snapshot per line
# would cost more than the line).
_LINE_COUNT_REFRESH = 1.0
# How long a restart verdict waits for a dead server's exit to be reported (systemd mode: a
# poll interval plus the journal settle time, with margin).
_EXIT_GRACE = 30.0
# How long a check's restart verdict waits for the exit of a server that still looked alive: a
# SIGKILLed process closes its sockets (the probe fails) before it becomes a zombie, and on a
# busy box the check can look in between; a crash found that way is a crash, not a check failure.
_DYING_GRACE = 0.5
# A port someone else holds is retried at this pace (at least), never counted as a crash.
_PORT_RETRY_MIN = 1.0
_PORT_RETRY_MAX = 30.0
# A refused start whose interval systemd did not say (StartLimitIntervalUSec unreadable): try again
# after this long; the floor keeps a cleared limit from turning into a tight loop.
_START_LIMIT_RETRY = 60.0
_START_LIMIT_MIN = 1.0


_LIVE = (ServerState.STARTING, ServerState.WARMING, ServerState.READY, ServerState.UNHEALTHY)


@dataclass(frozen=True, slots=True)
class _Outcome:
    """How one life of the server ended."""

    reason: str  # a RESTART_REASONS value
    detail: str
    crash: Crash | None = None
    # start_limit_hit: seconds until systemd accepts a start (0: cleared; None: not known).
    retry_after: float | None = None


class Supervisor:
    """Keeps one SGLang server up. Create, ``await start()``, ``await stop()``.

    Public surface for the daemon: :meth:`snapshot` (everything other components read, from
    any thread), :meth:`subscribe_state`, :meth:`add_line_listener`,
    :meth:`add_before_stop_hook`, :meth:`restart`, :meth:`reset`, :meth:`wait_for_state`, and
    :meth:`collector` for the ``sentinel_server_*`` / ``sentinel_probe_*`` series. The other
    attributes belong to the event loop.
    """

    def __init__(
        self,
        settings: ServerSettings,
        *,
        state_dir: Path | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
        gpu_reader: GpuReader | None = None,
        rng: random.Random | None = None,
        command: LaunchCommand | None = None,
        member: GroupMember | None = None,
    ) -> None:
        """``command`` replaces the rendered profile in child mode (embedding, tests); the
        other keyword arguments are the injectable boundaries (HTTP transport, NVML, randomness)."""
        self.settings = settings
        self._transport = transport
        self._gpu_reader = gpu_reader
        log_file = settings.log_file
        if log_file is None and state_dir is not None and settings.mode == "child":
            log_file = state_dir / "server.log"
        self.bus = LogBus(
            log_file,
            max_bytes=settings.log_max_bytes,
            backups=settings.log_backups,
            tail_lines=settings.log_tail_lines,
        )
        self.machine = StateMachine()
        self.policy = RestartPolicy(settings.restart, rng)
        self.command: LaunchCommand | None = command
        self.member = member
        self._gate: LaunchGate | None = None
        self._runner: Runner | None = None
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self._hooks: list[BeforeStopHook] = []
        # Canaries confirming garbage answers: the scheduler revokes the runs made meanwhile.
        self.garbage = GarbageWatch(settings.checks.canary.failures)
        self._reset_event = asyncio.Event()
        self._restart_request: asyncio.Future[str] | None = None
        self._pending_restart: str | None = None
        history = state_dir / HISTORY_FILE if state_dir is not None and settings.mode != "external" else None
        self._history = RestartHistory(history, self.policy)
        # Known-good records and the fallback decision: only where sentinel chooses the command line
        # (child: the argv it renders; systemd: the unit's flags, through its environment files).
        self.fallback = Fallback(settings.fallback, state_dir if settings.mode != "external" else None)
        self._unit_flags_problem = ""  # systemd: why the unit's launch flags cannot be read, said once
        self._fallback_due: str | None = None  # a FALLBACK_REASONS value once a fallback is due
        self.garbage.add_listener(self._on_garbage)
        self._version_reader: ServerVersionReader | None = None
        # Where the launch puts what must not be on the command line (the API key file).
        self._state_dir = state_dir
        # Time the event loop was away (SIGSTOP, a paused VM) is not evidence for any check.
        # The threshold stays well under the shortest stall window (a 60 s default: 5 s).
        self.gaps = GapWatch(threshold_s=min(5.0, max(0.5, settings.checks.stall.stall_after / 4)))
        self._gap_task: asyncio.Task[None] | None = None
        self.checks = Checks(
            settings.checks,
            self.machine,
            request_restart=self._request_restart,
            on_result=self._on_probe,
            publish=self._publish,
            gaps=self.gaps,
        )
        # --- the loop's figures; other components read them through snapshot() ---
        self.up = False
        self.restarts: Counter[str] = Counter(dict.fromkeys(RESTART_REASONS, 0))
        self.crashes: Counter[str] = Counter()
        self.start_duration: float | None = None
        self.ready_timestamp: float | None = None
        self.epoch: float | None = None
        self.last_crash: Crash | None = None
        # Wall clock of the next start while waiting out the backoff (RESTARTING), else None.
        self.next_retry_at: float | None = None
        self.preflight: list[PreflightResult] = []
        self.port_holders = ""
        self._launch_t0: float | None = None
        self._ready_t0: float | None = None
        self._snapshot = self._build_snapshot()
        self._lines_refresh: asyncio.TimerHandle | None = None
        # Subscribed first: every other state listener already sees the new state's snapshot.
        self.machine.subscribe(lambda change: self._publish())
        self.bus.add_listener(self._on_line)

    # ------------------------------------------------------------------ public API
    def snapshot(self) -> SupervisorSnapshot:
        """The latest published figures: immutable, safe to read from any thread."""
        return self._snapshot

    @property
    def state(self) -> ServerState:
        return self.machine.state

    @property
    def server_pid(self) -> int | None:
        return self._runner.pid if self._runner is not None else None

    @property
    def probes(self) -> dict[str, ProbeResult]:
        """The last conclusive result of each probe (event loop; others use :meth:`snapshot`)."""
        return self.checks.probes

    @property
    def config_hash(self) -> str:
        """Hash of what is launched (child mode: argv + env); changes when the launch config changes."""
        return config_hash_of(self.settings, self.command)

    def subscribe_state(self, listener: StateListener) -> Callable[[], None]:
        return self.machine.subscribe(listener)

    def add_line_listener(self, listener: LineListener) -> Callable[[], None]:
        """``listener(line)`` for every server log line from now on, on the loop (keep it fast)."""
        return self.bus.add_listener(listener)

    def set_launch_gate(self, gate: LaunchGate) -> None:
        """``await gate()`` before every launch (a group's rank waits for the group's start)."""
        self._gate = gate

    def add_before_stop_hook(self, hook: BeforeStopHook) -> None:
        """``hook()`` runs before every deliberate stop or restart (e.g. stop synthetic load)."""
        self._hooks.append(hook)

    def on_canary_garbage(self, listener: GarbageListener) -> None:
        """``listener(since, reason)`` once a canary has failed on its answer ``failures`` times in
        a row (the scheduler takes the runs since the last pass out of the reference series)."""
        self.garbage.add_listener(listener)

    def set_host_facts(self, host_facts: HostFacts) -> None:
        """``host_facts()`` -> (GPU model, driver version) for the known-good records (the daemon
        passes the GPU poller's; supervise sits below collect)."""
        self.fallback.host_facts = host_facts

    async def wait_for_state(self, *states: ServerState, timeout_s: float | None = None) -> ServerState:
        """Wait until the state is one of ``states``; raises TimeoutError after ``timeout_s``."""
        return await self.machine.wait_for(*states, timeout_s=timeout_s)

    def collector(self) -> SupervisorCollector:
        """A prometheus_client collector for this supervisor's series (register it once)."""
        return SupervisorCollector(self.snapshot)

    async def start(self) -> None:
        """Render the launch command and start supervising (returns at once; see wait_for_state)."""
        if self._task is not None:
            raise RuntimeError("supervisor already started")
        s = self.settings
        if s.mode == "child" and self.command is None:
            self.command = await render_launch_command(s)
        if s.mode == "child" and self.command is not None:
            # A fallback decided before a restart of sentinel is kept (fallback.py).
            self.command = self.fallback.begin(self.command)
        if self.member is not None and self.command is not None:
            self.command = self.member.apply(self.command)
        self._runner = runner_for(s, self.command, self.bus, self._state_dir)
        if isinstance(self._runner, SystemdRunner):
            # The unit's flags: a fallback decided before a restart of sentinel is kept (fallback.py);
            # each life reads them again and makes the unit's fallback file agree (_one_life).
            self.fallback.launch_known = self._unit_runs_what_is_decided
            self._read_unit_flags(self._runner)
        if s.mode != "external":
            self._publish()  # the launch hash and SGLang version are known now
        # The probes need the key the server was started with (a profile may carry its own).
        api_key = api_key_of(s, self.command.profile if self.command is not None else None)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._client = httpx.AsyncClient(
            base_url=f"http://{url_host(s.host)}:{s.port}",
            transport=self._transport,
            headers=headers,
            # Probes must not queue behind each other or behind a stuck connection.
            limits=httpx.Limits(max_connections=8, max_keepalive_connections=4),
            verify=tls_context(),
        )
        self._history.restore(self.config_hash)
        if s.mode != "external":
            # The version the server reports: a known-good record, and a fallback, are per version.
            self._version_reader = ServerVersionReader(
                f"http://{url_host(s.host)}:{s.port}",
                self._on_version,
                api_key=lambda: api_key,
                fallback=lambda: None,
                transport=self._transport,
            )
            self.machine.subscribe(self._version_reader.on_state)
        _log.info("supervisor_starting", mode=s.mode, profile=s.profile, config_hash=self.config_hash)
        if s.mode == "external":
            main = observe_external(
                s, self._client, checks=self.checks, machine=self.machine, figures=self, publish=self._publish
            )
        else:
            main = self._run_managed()
        self._gap_task = asyncio.create_task(self.gaps.run(), name="sentinel-gap-watch")
        self._task = asyncio.create_task(main, name="sentinel-supervisor")

    async def stop(self) -> None:
        """Stop supervising; in child mode (and systemd with stop_unit_on_exit) stop the server too."""
        task, self._task = self._task, None
        try:
            if task is not None:
                await cancel_and_wait(task)
            if self._version_reader is not None:
                await self._version_reader.close()
            gap_task, self._gap_task = self._gap_task, None
            if gap_task is not None:
                await cancel_and_wait(gap_task)
            runner = self._runner
            if runner is not None:
                if self.settings.mode == "child" or self.settings.stop_unit_on_exit:
                    if runner.pid is not None or self.settings.mode == "systemd":
                        await self._run_hooks()
                    exit_info = await runner.terminate(self.settings.stop_timeout)
                    if exit_info is not None:
                        # Our own stop: "killed by signal 9" here is SGLang ending its own tree
                        # after our SIGTERM (or our SIGKILL after stop_timeout), not a crash.
                        _log.info("server_stopped", requested_by="sentinel", exit=exit_info.description)
                await runner.close()
            if self._client is not None:
                await self._client.aclose()
                self._client = None
        finally:
            # Whatever failed above: state listeners must see STOPPED, server.log must be flushed.
            self.up = False
            self.epoch = None
            self.machine.set(ServerState.STOPPED, "supervisor stopped")
            self.bus.close()
            if self._lines_refresh is not None:
                self._lines_refresh.cancel()
                self._lines_refresh = None
            self._publish()

    def restart(self, reason: str = "manual") -> None:
        """Ask for a restart of a running server (stop hooks, SIGTERM, backoff skipped for manual)."""
        if reason not in RESTART_REASONS:
            raise ValueError(f"unknown restart reason {reason!r}")
        if self.settings.mode == "external":
            _log.warning("restart_ignored_external_mode", reason=reason)
            return
        if self.state is ServerState.FAILED:
            # An operator asking for a restart of a failed server means "try again now".
            self.reset()
            return
        self._request_restart(reason)

    def reset(self, *, configured: bool = False) -> None:
        """Manual reset: forget the restart history; leave the failed state and start again.
        ``configured``: also end a fallback and launch the configured command again (now, if a
        server is running)."""
        self.policy.reset()
        running = self.fallback.active
        if configured:
            cmd = self.fallback.back_to_configured()
            if cmd is not None:
                self._use_command(cmd)  # systemd: the unit's fallback file goes
        self._history.save(self.config_hash)
        _log.info("supervisor_reset", state=self.state.value, configured=configured)
        self._publish()
        if configured and running and self.state in _LIVE:
            self._request_restart("manual")  # the fallback's life ends; the configured one starts
        self._reset_event.set()

    # ------------------------------------------------------------------ internals
    def _build_snapshot(self) -> SupervisorSnapshot:
        cmd = self.command
        return SupervisorSnapshot(
            mode=self.settings.mode,
            profile=self.settings.profile,
            config_hash=self.config_hash,
            sglang_version=cmd.sglang_version if cmd is not None else None,
            state=self.machine.state,
            since=self.machine.since,
            up=self.up,
            epoch=self.epoch,
            ready_timestamp=self.ready_timestamp,
            start_duration=self.start_duration,
            last_crash=self.last_crash,
            restarts=frozen(self.restarts),
            crashes=frozen(self.crashes),
            transitions=frozen(self.machine.transitions),
            probes=frozen(self.checks.probes),
            confirmed=frozen(self.checks.confirmed),
            probe_failures=frozen(self.checks.failures),
            preflight=tuple(self.preflight),
            log_lines_total=self.bus.lines_total,
            next_retry_at=self.next_retry_at,
            port_holders=self.port_holders,
            stop_kills=self._runner.stop_kills if self._runner is not None else 0,
            fallback=self.fallback.view() if self._fallback_on else None,
        )

    def _publish(self) -> None:
        # One reference assignment: a reader has the old snapshot or the new one.
        self._snapshot = self._build_snapshot()

    def _on_line(self, line: LogLine) -> None:
        if self._lines_refresh is not None:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            self._publish()
            return
        self._lines_refresh = loop.call_later(_LINE_COUNT_REFRESH, self._refresh_line_counts)

    def _refresh_line_counts(self) -> None:
        self._lines_refresh = None
        self._publish()

    def _on_probe(self, result: ProbeResult) -> None:
        if result.probe == "health":
            self.up = result.ok
        elif result.probe.startswith("canary_"):
            now = time.time()
            self.fallback.observe_canary(result, self.checks.probes, now)
            self.garbage.observe(result, now, self.ready_timestamp)

    @property
    def _fallback_on(self) -> bool:
        """Whether the fallback machinery runs: child mode, or systemd mode with the unit's launch
        flags readable (records, decisions); never in external mode."""
        return self.fallback.configured is not None

    def _on_version(self, version: str | None) -> None:
        """The running server's version: a restored decision made for another SGLang ends here."""
        if self.fallback.set_version(version) and self.fallback.running is not None:
            self._use_command(self.fallback.running)
            self._request_restart("fallback")

    def _on_garbage(self, since: float, reason: str) -> None:
        if self._fallback_on and self.fallback.note_garbage(since, reason):
            self._fallback_due = "garbage"
            if self.fallback.available():
                self._request_restart("fallback")

    def _request_restart(self, reason: str) -> None:
        if self._restart_request is not None and not self._restart_request.done():
            self._restart_request.set_result(reason)
        elif reason == "manual":
            # Between lives (backoff, preflight): applies to the next one. A check's verdict is
            # about the server it probed and must not carry over to the next one.
            self._pending_restart = reason

    async def _run_hooks(self) -> None:
        for hook in list(self._hooks):
            try:
                async with asyncio.timeout(self.settings.before_stop_timeout):
                    await hook()
            except TimeoutError:
                _log.error(
                    "before_stop_hook_timeout", hook=repr(hook), timeout=self.settings.before_stop_timeout
                )
            except Exception:
                _log.exception("before_stop_hook_failed", hook=repr(hook))

    async def _run_managed(self) -> None:
        assert self._runner is not None
        while True:
            if self.state is ServerState.FAILED:
                await self._reset_event.wait()
                self._reset_event.clear()
                self.machine.set(ServerState.STOPPED, "manual reset")
                continue
            self._reset_event.clear()
            try:
                outcome = await self._one_life(self._runner)
            except Exception as exc:
                # Never a dead supervisor: log it, make sure nothing of this life survives, and
                # let the restart policy (and its crash-loop limit) decide what comes next.
                _log.exception("supervisor_error")
                if self.settings.mode == "child":  # never bounce a unit over our own bug
                    with contextlib.suppress(Exception):
                        await self._runner.terminate(self.settings.stop_timeout)
                detail = f"supervisor error: {type(exc).__name__}: {exc}"
                outcome = _Outcome("unknown", detail, Crash("unknown", None, detail, time.time()))
            if outcome.reason == "port_in_use":
                await self._wait_for_port()
                continue
            if outcome.reason == "start_limit_hit":
                await self._wait_for_start_limit(outcome)
                continue
            now = time.monotonic()
            self.up = False
            self.epoch = None
            if self._ready_t0 is not None and now - self._ready_t0 >= self.settings.restart.stable_after:
                self.policy.mark_stable()
            self._ready_t0 = None
            if outcome.crash is not None:
                self.crashes[outcome.reason] += 1
                self.last_crash = outcome.crash
                if outcome.reason == "nan_in_sampler" and self._fallback_on:
                    example = " | ".join(outcome.crash.lines) or outcome.detail
                    if self.fallback.note_failure("nan_in_sampler", example):
                        self._fallback_due = "nan_in_sampler"
            if self._switch_to_fallback():
                continue
            # An operator's restart is neither backed off nor counted towards the crash loop; nor is
            # a switch of configuration (a saved fallback that no longer applied: the configured one).
            no_backoff = ("manual", "external", "group", "fallback")
            delay = 0.0 if outcome.reason in no_backoff else self.policy.next_delay(now)
            self._history.save(self.config_hash)
            self._publish()
            if delay is None:
                _log.error(
                    "crash_loop_waiting_for_reset",
                    reason=outcome.reason,
                    detail=outcome.detail,
                    max_restarts=self.settings.restart.max_restarts,
                    window=self.settings.restart.window,
                )
                self.machine.set(ServerState.FAILED, f"crash loop ({outcome.reason})")
                continue
            self.restarts[outcome.reason] += 1
            self.next_retry_at = time.time() + delay
            self.machine.set(ServerState.RESTARTING, outcome.reason)
            self._publish()
            _log.warning(
                "server_restarting", reason=outcome.reason, detail=outcome.detail, delay=round(delay, 3)
            )
            # A reset during the backoff skips the rest of the wait.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._reset_event.wait()

    def _switch_to_fallback(self) -> bool:
        """A fallback is due: relaunch at once with it (a new config: a clean restart history)."""
        reason, self._fallback_due = self._fallback_due, None
        cmd = self.fallback.decide(reason) if reason is not None else None
        if cmd is None:
            return False
        if not self._use_command(cmd):
            # systemd: the unit's fallback file could not be written; a start would run the
            # configured flags while everything said "fallback". The incident goes the usual way.
            self.fallback.back_to_configured()
            return False
        self.policy.reset()
        self._history.save(self.config_hash)
        self.restarts["fallback"] += 1
        self.next_retry_at = time.time()
        self.machine.set(ServerState.RESTARTING, f"fallback ({reason})")
        self._publish()
        return True

    async def _wait_for_port(self) -> None:
        """The port is held by someone: say who, wait, try again. Not a crash, not a crash loop
        (the server never ran, and giving up would not free the port; the next sentinel used to
        find it failed long after the holder was gone)."""
        s = self.settings
        holders = await asyncio.to_thread(port_holders, s.port)
        who = describe_holders(holders)
        self.up = False
        self.epoch = None
        delay = min(max(s.restart.backoff_initial, _PORT_RETRY_MIN), _PORT_RETRY_MAX)
        # Counted as an attempt (restarts_total{reason="port_in_use"}), never as a crash.
        self.restarts["port_in_use"] += 1
        self.port_holders = who
        self.machine.set(ServerState.RESTARTING, f"port {s.port} held by {who}")
        self._publish()
        _log.warning("server_port_held", port=s.port, holders=who, retry_in=delay)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._reset_event.wait()

    async def _wait_for_start_limit(self, outcome: _Outcome) -> None:
        """systemd refused the start (StartLimitBurst= starts within StartLimitIntervalSec=, which
        counts an operator's starts as well as ours). Not a crash and not counted towards the crash
        loop: nothing ran. Start again once the limit is cleared (reset-failed, polkit permitting)
        or its interval has passed, never in a loop of refused starts."""
        s = self.settings
        self.up = False
        self.epoch = None
        retry = outcome.retry_after
        delay = _START_LIMIT_RETRY if retry is None else max(retry, _START_LIMIT_MIN)
        self.restarts["start_limit_hit"] += 1
        self.next_retry_at = time.time() + delay
        self.machine.set(ServerState.RESTARTING, "start refused by systemd (start-limit-hit)")
        self._publish()
        fix = (
            "cleared by sentinel with systemctl reset-failed"
            if retry == 0.0
            else f"install deploy/sentinel-polkit.rules so sentinel may run `systemctl reset-failed "
            f"{s.systemd.unit}` (or run it as root), or set StartLimitIntervalSec=0 in the unit"
        )
        _log.error(
            "server_start_refused", reason="start_limit_hit", detail=outcome.detail, fix=fix, retry_in=delay
        )
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(delay):
                await self._reset_event.wait()

    async def _one_life(self, runner: Runner) -> _Outcome:
        self.next_retry_at = None
        self.port_holders = ""
        self.bus.clear_tail()
        self.checks.reset()
        self.fallback.new_life()
        self.garbage.new_life()
        if (
            isinstance(runner, SystemdRunner)
            and self._read_unit_flags(runner)
            and self._apply_to_unit(changed_only=True)
            and await runner.is_running()
        ):
            # The fallback file changed under a running unit (a saved decision restored with its
            # file gone, or discarded): it runs other flags than decided. One restart, at once.
            _log.warning("unit_flags_changed_restarting", unit=self.settings.systemd.unit)
            self._pending_restart = "fallback"
        if self._gate is not None:
            await self._gate()
        self.machine.set(ServerState.STARTING, "preflight")
        # A unit that is already up gets attached to: its GPUs are busy by design, so the
        # preflight (free memory, ...) would wrongly refuse it.
        if isinstance(runner, ChildRunner):
            # A server a SIGKILLed (or older) sentinel left behind holds the port and the GPUs.
            await runner.reap_leftover(self.settings.stop_timeout)
        if self.settings.mode != "systemd" or not await runner.is_running():
            outcome = await self._preflight()
            if outcome is not None:
                return outcome
        try:
            await runner.launch()
        except LaunchError as exc:
            _log.error("launch_failed", error=str(exc))
            return _Outcome("preflight", str(exc), Crash("preflight", None, str(exc), time.time()))
        self._launch_t0 = time.monotonic()
        if self.settings.mode == "child":
            self.fallback.note_launch(self.command)
        elif self._fallback_on:
            self.fallback.note_launch(self.fallback.running)  # a life of the unit (started or attached)
        self.machine.set(ServerState.STARTING, "launched")
        exit_task = asyncio.create_task(runner.wait())
        # One restart request per life, shared by both phases: nothing asked for in between is lost.
        restart_req = self._take_restart_request()
        try:
            if self.member is not None and self.member.follower:  # never its dummy /health
                stop = await follow(
                    self.bus, self.machine, self.settings.start_timeout, exit_task, restart_req
                )
                return await (
                    self._crash_outcome(exit_task) if stop is None else self._deliberate_stop(runner, *stop)
                )
            outcome = await self._await_ready(runner, exit_task, restart_req)
            if outcome is None:
                outcome = await self._watch(runner, exit_task, restart_req)
            return outcome
        finally:
            # On cancellation (stop()) the server is left running: stop() drains and stops it.
            await cancel_and_wait(exit_task)

    async def _preflight(self) -> _Outcome | None:
        crash = await preflight_before_launch(
            self.settings,
            self.command,
            gpu_reader=self._gpu_reader,
            on_results=self._set_preflight,
            on_rerender=self._rerendered,
        )
        return None if crash is None else _Outcome(crash.reason, crash.detail, crash)

    def _set_preflight(self, results: list[PreflightResult]) -> None:
        self.preflight = results
        self._publish()

    def _rerendered(self, cmd: LaunchCommand) -> None:
        """The command re-rendered for an SGLang upgraded under us: launched from now on (a
        fallback decided for the old version ends)."""
        self.fallback.reconfigure(cmd, "sglang_version_changed")
        self._use_command(cmd)

    def _use_command(self, cmd: LaunchCommand) -> bool:
        """Launch ``cmd`` from now on (child mode); systemd mode: the unit's fallback file says what
        the fallback decides (its flags, or no file). False when that file could not be written."""
        if self.settings.mode == "systemd":
            return self._apply_to_unit()
        self.command = cmd = cmd if self.member is None else self.member.apply(cmd)
        if isinstance(self._runner, ChildRunner):
            self._runner.command = cmd
            self._runner.launch_hash = self.config_hash
        return True

    # ------------------------------------------------------------------ systemd: the unit's flags
    def _read_unit_flags(self, runner: SystemdRunner) -> bool:
        """Read the unit's configured flags (an edit ends a fallback about the old ones). True when
        they are known (the fallback machinery runs)."""
        args, why = runner.configured_args()
        if args is None:
            if why != self._unit_flags_problem:
                # Without them there are no records and no fallback in systemd mode: a problem only
                # where the fallback is on.
                unit = self.settings.systemd.unit
                if self.settings.fallback.enabled:
                    _log.warning("unit_launch_flags_unreadable", unit=unit, why=why)
                else:
                    _log.info("unit_launch_flags_unreadable", unit=unit, why=why)
            self._unit_flags_problem = why
            return False
        self._unit_flags_problem = ""
        cmd = unit_command(self.settings, args)
        if self.fallback.configured is None:
            self.fallback.begin(cmd)
        else:
            self.fallback.reconfigure(cmd, "configuration_changed")
        return True

    def _apply_to_unit(self, *, changed_only: bool = False) -> bool:
        """Write the running fallback's flags into the unit's fallback file, or remove it when the
        configured launch runs. True when done (``changed_only``: when that changed the file)."""
        runner = self._runner
        running = self.fallback.running
        if not isinstance(runner, SystemdRunner) or self.fallback.configured is None:
            return not changed_only
        args = running.argv[1:] if self.fallback.active and running is not None else None
        try:
            changed = runner.set_fallback_args(args)
        except (OSError, UnitEnvError) as exc:
            _log.error(
                "unit_fallback_file_failed",
                path=str(self.settings.systemd.fallback_env),
                error=str(exc),
                fallback=args is not None,
            )
            return False
        return changed or not changed_only

    def _unit_runs_what_is_decided(self) -> bool:
        """systemd mode: the unit's current life runs exactly the running command's flags."""
        runner, running = self._runner, self.fallback.running
        if not isinstance(runner, SystemdRunner) or running is None:
            return False
        return runner.started_with is not None and runner.started_with == running.argv[1:]

    async def _crash_outcome(self, exit_task: asyncio.Task[ExitInfo]) -> _Outcome:
        exit_info = exit_task.result()
        if exit_info.start_limit:
            return _Outcome("start_limit_hit", exit_info.description, None, exit_info.retry_after)
        if exit_info.external:
            # An operator's restart is not a crash: no error line, no crash count, no backoff.
            _log.warning("server_stopped_externally", detail=exit_info.description)
            return _Outcome("external", exit_info.description, None)
        tail = self.bus.tail()
        crash = replace(classify_exit(exit_info, tail, time.time()), lines=decisive_lines(tail))
        _log.error("server_exited", reason=crash.reason, detail=crash.detail, state=self.state.value)
        return _Outcome(crash.reason, crash.detail, crash)

    async def _deliberate_stop(self, runner: Runner, reason: str, detail: str) -> _Outcome:
        self.machine.set(ServerState.RESTARTING, reason)
        await self._run_hooks()
        exit_info = await runner.terminate(self.settings.stop_timeout)
        suffix = f" ({exit_info.description})" if exit_info is not None else ""
        crash = None
        if reason == "startup_timeout":
            crash = Crash(reason, exit_info, detail + suffix, time.time())
        return _Outcome(reason, detail + suffix, crash)

    def _take_restart_request(self) -> asyncio.Future[str]:
        fut: asyncio.Future[str] = asyncio.get_running_loop().create_future()
        if self._pending_restart is not None:
            fut.set_result(self._pending_restart)
            self._pending_restart = None
        self._restart_request = fut
        return fut

    async def _await_ready(
        self, runner: Runner, exit_task: asyncio.Task[ExitInfo], restart_req: asyncio.Future[str]
    ) -> _Outcome | None:
        assert self._client is not None
        assert self._launch_t0 is not None
        verdict = await await_ready(
            self._client, self.settings, self.machine, self.gaps, self._launch_t0, exit_task, restart_req
        )
        if verdict == "ready":
            self._became_ready()
            return None
        if verdict == "exited":
            return await self._crash_outcome(exit_task)
        return await self._deliberate_stop(runner, *verdict)

    def _became_ready(self) -> None:
        now_wall = time.time()
        if self._launch_t0 is not None:
            self.start_duration = time.monotonic() - self._launch_t0
        self._ready_t0 = time.monotonic()
        self.ready_timestamp = now_wall
        self.epoch = now_wall
        self.up = True
        self.machine.set(ServerState.READY, f"/health 200 after {self.start_duration or 0:.1f} s")

    async def _watch(
        self, runner: Runner, exit_task: asyncio.Task[ExitInfo], restart_req: asyncio.Future[str]
    ) -> _Outcome:
        assert self._client is not None
        checks = self.checks.start(self._client, allow_restart=True)
        try:
            done, _ = await asyncio.wait(either(exit_task, restart_req), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in checks:
                t.cancel()
            await asyncio.gather(*checks, return_exceptions=True)
        if exit_task not in done:
            # A dying server fails its probes a moment before its exit is noticed; the exit (and
            # its classified cause) is the truth, not the check that found the corpse.
            grace = _EXIT_GRACE if not await runner.is_running() else _DYING_GRACE
            await asyncio.wait([exit_task], timeout=grace)
        if exit_task.done():
            return await self._crash_outcome(exit_task)
        reason = restart_req.result()
        detail = {
            "manual": "restart requested",
            "fallback": "switching the launch configuration ([server.fallback])",
        }.get(reason, f"check {reason} failed")
        return await self._deliberate_stop(runner, reason, detail)
