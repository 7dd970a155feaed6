"""The supervisor: launch, watch, check, classify, restart — and stop cleanly.

One control task per supervisor. In child and systemd mode it runs "lives": preflight → launch →
wait for readiness (starting → warming → ready) → run the checks until the server exits or a
check policy asks for a restart → classify → back off → next life. More than
``restart.max_restarts`` restarts within ``restart.window`` ends in ``failed`` until
:meth:`Supervisor.reset`. In external mode it only observes and reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import random
import time
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from sentinel.atomic import atomic_write_bytes
from sentinel.log import get_logger
from sentinel.netloc import url_host
from sentinel.supervise.backoff import RestartPolicy
from sentinel.supervise.classify import RESTART_REASONS, Crash, classify_exit
from sentinel.supervise.logbus import LineListener, LineSubscription, LogBus
from sentinel.supervise.metrics import SupervisorCollector
from sentinel.supervise.preflight import GpuReader, PreflightResult, run_preflight
from sentinel.supervise.probes import (
    ProbeResult,
    StallDetector,
    probe_canary,
    probe_health,
    read_progress,
)
from sentinel.supervise.profiles import (
    LaunchCommand,
    SglangVersion,
    api_key_of,
    config_hash_of,
    detect_sglang_version,
    python_of,
    render_command,
    resolve_profile,
)
from sentinel.supervise.runners import ChildRunner, ExitInfo, LaunchError, Runner, SystemdRunner
from sentinel.supervise.settings import CheckSettings, ServerSettings
from sentinel.supervise.state import ServerState, StateListener, StateMachine

__all__ = ["BeforeStopHook", "Supervisor"]

log = get_logger("sentinel.supervise")

BeforeStopHook = Callable[[], Awaitable[None]]

_ALIVE = (ServerState.READY, ServerState.UNHEALTHY)
_GPU_RELEASE_POLL = 2.0
_HISTORY_FILE = "supervisor-restarts.json"
# How long a restart verdict waits for a dead server's exit to be reported (systemd mode: a
# poll interval plus the journal settle time, with margin).
_EXIT_GRACE = 30.0


@dataclass(frozen=True, slots=True)
class _Outcome:
    """How one life of the server ended."""

    reason: str  # a RESTART_REASONS value
    detail: str
    crash: Crash | None = None


class Supervisor:
    """Keeps one SGLang server up. Create, ``await start()``, ``await stop()``.

    Public surface for the daemon: :attr:`state`, :attr:`epoch`, :attr:`config_hash`,
    :meth:`subscribe_state`, :meth:`subscribe_lines` / :meth:`add_line_listener`,
    :meth:`add_before_stop_hook`, :meth:`restart`, :meth:`reset`, :meth:`wait_for_state`, and
    :meth:`collector` for the ``sentinel_server_*`` / ``sentinel_probe_*`` series.
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
    ) -> None:
        """``command`` replaces the rendered profile in child mode (embedding, tests); the
        other keyword arguments are the injectable boundaries (HTTP transport, NVML, randomness)."""
        self.settings = settings
        self._state_dir = state_dir
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
        self._runner: Runner | None = None
        self._task: asyncio.Task[None] | None = None
        self._client: httpx.AsyncClient | None = None
        self._hooks: list[BeforeStopHook] = []
        self._reset_event = asyncio.Event()
        self._restart_request: asyncio.Future[str] | None = None
        self._pending_restart: str | None = None
        self._stall = StallDetector(settings.checks.stall.stall_after)
        self._consecutive: Counter[str] = Counter()
        self._stall_unsupported_logged = False
        # --- exported figures (read by SupervisorCollector, possibly from another thread) ---
        self.up = False
        self.restarts: Counter[str] = Counter(dict.fromkeys(RESTART_REASONS, 0))
        self.crashes: Counter[str] = Counter()
        self.probes: dict[str, ProbeResult] = {}
        self.probe_failures: Counter[tuple[str, str]] = Counter()
        # Probes of the current server whose conclusive failures in a row reached their check's
        # ``failures`` (the point where child mode restarts): the verdict endpoint's "confirmed".
        # Maps probe -> failures in a row; its failing result is in ``probes``.
        self.confirmed: dict[str, int] = {}
        self.start_duration: float | None = None
        self.ready_timestamp: float | None = None
        self.epoch: float | None = None
        self.last_crash: Crash | None = None
        self.preflight: list[PreflightResult] = []
        self._launch_t0: float | None = None
        self._ready_t0: float | None = None

    # ------------------------------------------------------------------ public API
    @property
    def state(self) -> ServerState:
        return self.machine.state

    @property
    def config_hash(self) -> str:
        """Hash of what is launched (child mode: argv + env); changes when the launch config changes."""
        return config_hash_of(self.settings, self.command)

    def subscribe_state(self, listener: StateListener) -> Callable[[], None]:
        return self.machine.subscribe(listener)

    def subscribe_lines(self, maxsize: int = 10000) -> LineSubscription:
        """Every server log line from now on, as an async iterator (bounded; overflow is counted)."""
        return self.bus.subscribe(maxsize)

    def add_line_listener(self, listener: LineListener) -> Callable[[], None]:
        return self.bus.add_listener(listener)

    def add_before_stop_hook(self, hook: BeforeStopHook) -> None:
        """``hook()`` runs before every deliberate stop or restart (e.g. stop synthetic load)."""
        self._hooks.append(hook)

    async def wait_for_state(self, *states: ServerState, timeout_s: float | None = None) -> ServerState:
        """Wait until the state is one of ``states``; raises TimeoutError after ``timeout_s``."""
        return await self.machine.wait_for(*states, timeout_s=timeout_s)

    def collector(self) -> SupervisorCollector:
        """A prometheus_client collector for this supervisor's series (register it once)."""
        return SupervisorCollector(self)

    async def start(self) -> None:
        """Render the launch command and start supervising (returns at once; see wait_for_state)."""
        if self._task is not None:
            raise RuntimeError("supervisor already started")
        s = self.settings
        if s.mode == "child":
            if self.command is None:
                _, profile = resolve_profile(s)
                version, message = None, ""
                if profile.kind == "sglang" and not profile.sglang_version:
                    version, message = await asyncio.to_thread(detect_sglang_version, python_of(profile))
                self.command = render_command(s, detected_version=version, detect_message=message)
            self._runner = ChildRunner(self.command, self.bus)
        elif s.mode == "systemd":
            self._runner = SystemdRunner(s.systemd, self.bus)
        # The probes need the key the server was started with (a profile may carry its own).
        api_key = api_key_of(s, self.command.profile if self.command is not None else None)
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else None
        self._client = httpx.AsyncClient(
            base_url=f"http://{url_host(s.host)}:{s.port}",
            transport=self._transport,
            headers=headers,
            # Probes must not queue behind each other or behind a stuck connection.
            limits=httpx.Limits(max_connections=8, max_keepalive_connections=4),
        )
        self._restore_history()
        log.info("supervisor starting", mode=s.mode, profile=s.profile, config_hash=self.config_hash)
        main = self._run_external() if s.mode == "external" else self._run_managed()
        self._task = asyncio.create_task(main, name="sentinel-supervisor")

    async def stop(self) -> None:
        """Stop supervising; in child mode (and systemd with stop_unit_on_exit) stop the server too."""
        task, self._task = self._task, None
        try:
            if task is not None:
                await _cancel_and_wait(task)
            runner = self._runner
            if runner is not None:
                if self.settings.mode == "child" or self.settings.stop_unit_on_exit:
                    if runner.pid is not None or self.settings.mode == "systemd":
                        await self._run_hooks()
                    exit_info = await runner.terminate(self.settings.stop_timeout)
                    if exit_info is not None:
                        log.info("server stopped", exit=exit_info.description)
                await runner.close()
            if self._client is not None:
                await self._client.aclose()
                self._client = None
        finally:
            # Whatever failed above: subscribers (an operator's log follower) must see the end.
            self.up = False
            self.epoch = None
            self.machine.set(ServerState.STOPPED, "supervisor stopped")
            self.bus.close()

    def restart(self, reason: str = "manual") -> None:
        """Ask for a restart of a running server (stop hooks, SIGTERM, backoff skipped for manual)."""
        if reason not in RESTART_REASONS:
            raise ValueError(f"unknown restart reason {reason!r}")
        if self.settings.mode == "external":
            log.warning("restart ignored: in external mode someone else runs the server", reason=reason)
            return
        if self.state is ServerState.FAILED:
            # An operator asking for a restart of a failed server means "try again now".
            self.reset()
            return
        self._request_restart(reason)

    def reset(self) -> None:
        """Manual reset: forget the restart history; leave the failed state and start again."""
        self.policy.reset()
        self._save_history()
        log.info("supervisor reset", state=self.state.value)
        self._reset_event.set()

    # ------------------------------------------------------------------ internals
    @property
    def _history_path(self) -> Path | None:
        return self._state_dir / _HISTORY_FILE if self._state_dir is not None else None

    def _restore_history(self) -> None:
        """Restart history of the same launch config survives a restart of sentinel itself, so a
        daemon that is itself restarted over and over cannot defeat the crash-loop limit."""
        path = self._history_path
        if path is None or self.settings.mode == "external":
            return
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            log.warning("ignoring unreadable restart history", path=str(path), error=str(exc))
            return
        if not isinstance(data, dict) or data.get("config_hash") != self.config_hash:
            return  # a different launch config starts with a clean slate
        self.policy.restore(data, time.monotonic(), time.time())
        log.info(
            "restart history restored", restarts_in_window=self.policy.restarts_in_window(time.monotonic())
        )

    def _save_history(self) -> None:
        path = self._history_path
        if path is None or self.settings.mode == "external":
            return
        data = {"config_hash": self.config_hash, **self.policy.snapshot(time.monotonic(), time.time())}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, json.dumps(data).encode())
        except OSError as exc:
            log.warning("cannot save restart history", path=str(path), error=str(exc))

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
                log.error(
                    "before-stop hook timed out", hook=repr(hook), timeout=self.settings.before_stop_timeout
                )
            except Exception:
                log.exception("before-stop hook failed", hook=repr(hook))

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
                log.exception("supervisor error during a server life")
                if self.settings.mode == "child":  # never bounce a unit over our own bug
                    with contextlib.suppress(Exception):
                        await self._runner.terminate(self.settings.stop_timeout)
                detail = f"supervisor error: {type(exc).__name__}: {exc}"
                outcome = _Outcome("unknown", detail, Crash("unknown", None, detail, time.time()))
            now = time.monotonic()
            self.up = False
            self.epoch = None
            if self._ready_t0 is not None and now - self._ready_t0 >= self.settings.restart.stable_after:
                self.policy.mark_stable()
            self._ready_t0 = None
            if outcome.crash is not None:
                self.crashes[outcome.reason] += 1
                self.last_crash = outcome.crash
            # An operator's restart is neither backed off nor counted towards the crash loop.
            delay = 0.0 if outcome.reason in ("manual", "external") else self.policy.next_delay(now)
            self._save_history()
            if delay is None:
                log.error(
                    "crash loop: not restarting until a manual reset",
                    reason=outcome.reason,
                    detail=outcome.detail,
                    max_restarts=self.settings.restart.max_restarts,
                    window=self.settings.restart.window,
                )
                self.machine.set(ServerState.FAILED, f"crash loop ({outcome.reason})")
                continue
            self.restarts[outcome.reason] += 1
            self.machine.set(ServerState.RESTARTING, outcome.reason)
            log.warning(
                "restarting server", reason=outcome.reason, detail=outcome.detail, delay=round(delay, 3)
            )
            # A reset during the backoff skips the rest of the wait.
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(delay):
                    await self._reset_event.wait()

    async def _one_life(self, runner: Runner) -> _Outcome:
        self.bus.clear_tail()
        self._stall.reset()
        self._consecutive.clear()
        self.confirmed = {}
        self.machine.set(ServerState.STARTING, "preflight")
        # A unit that is already up gets attached to: its GPUs are busy by design, so the
        # preflight (free memory, ...) would wrongly refuse it.
        if self.settings.mode != "systemd" or not await runner.is_running():
            outcome = await self._preflight()
            if outcome is not None:
                return outcome
        try:
            await runner.launch()
        except LaunchError as exc:
            log.error("launch failed", error=str(exc))
            return _Outcome("preflight", str(exc), Crash("preflight", None, str(exc), time.time()))
        self._launch_t0 = time.monotonic()
        self.machine.set(ServerState.STARTING, "launched")
        exit_task = asyncio.create_task(runner.wait())
        # One restart request per life, shared by both phases: nothing asked for in between is lost.
        restart_req = self._take_restart_request()
        try:
            outcome = await self._await_ready(runner, exit_task, restart_req)
            if outcome is None:
                outcome = await self._watch(runner, exit_task, restart_req)
            return outcome
        finally:
            # On cancellation (stop()) the server is left running: stop() drains and stops it.
            await _cancel_and_wait(exit_task)

    async def _preflight(self) -> _Outcome | None:
        s = self.settings
        cmd = self.command
        if cmd is None:
            try:
                cmd = render_command(s)
            except Exception:
                return None  # systemd mode with a profile we cannot render: nothing to check
        child = s.mode == "child"
        detected: tuple[SglangVersion | None, str] = (None, "")
        if child and cmd.profile.kind == "sglang":
            detected = await asyncio.to_thread(detect_sglang_version, python_of(cmd.profile))
            if not cmd.profile.sglang_version and detected[0] not in (None, cmd.sglang_version):
                # SGLang was upgraded under us: flags (--nsa-* / --dsa-*) must follow.
                cmd = render_command(s, detected_version=detected[0])
                log.warning("sglang version changed; launch command re-rendered", version=detected[0])
                self.command = cmd
                if isinstance(self._runner, ChildRunner):
                    self._runner.command = cmd
        deadline = time.monotonic() + s.gpu_release_wait
        while True:
            self.preflight = await run_preflight(
                cmd, s, gpu_reader=self._gpu_reader, check_port_free=child, detected=detected
            )
            # The unit owns model path and interpreter in systemd mode; only GPU facts apply there.
            relevant = [r for r in self.preflight if child or r.name in ("gpus", "known_bad")]
            failed = [r for r in relevant if r.status == "fail"]
            if not failed or not all(r.transient for r in failed) or time.monotonic() >= deadline:
                break
            log.info("waiting for GPU memory to be released", detail=failed[0].message)
            await asyncio.sleep(min(_GPU_RELEASE_POLL, max(0.0, deadline - time.monotonic())))
        for r in relevant:
            if r.status == "warn":
                log.warning("preflight warning", check=r.name, message=r.message)
        if not failed:
            return None
        first = failed[0]
        detail = "; ".join(f"{r.name}: {r.message}" for r in failed)
        log.error("preflight failed", detail=detail)
        return _Outcome(first.reason, detail, Crash(first.reason, None, detail, time.time()))

    async def _crash_outcome(self, exit_task: asyncio.Task[ExitInfo]) -> _Outcome:
        exit_info = exit_task.result()
        if exit_info.external:
            # An operator's restart is not a crash: no error line, no crash count, no backoff.
            log.warning("server stopped or restarted outside sentinel", detail=exit_info.description)
            return _Outcome("external", exit_info.description, None)
        crash = classify_exit(exit_info, self.bus.tail(), time.time())
        log.error("server exited", reason=crash.reason, detail=crash.detail, state=self.state.value)
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
        s = self.settings
        assert self._client is not None
        assert self._launch_t0 is not None
        probe_timeout = min(s.checks.health.timeout, max(s.startup_poll_interval, 1.0))
        deadline = self._launch_t0 + s.start_timeout
        while True:
            result = await probe_health(self._client, "/health", "startup", probe_timeout)
            if exit_task.done():
                return await self._crash_outcome(exit_task)
            if result.ok:
                self._became_ready()
                return None
            if result.reason == "refused":
                self.machine.set(ServerState.STARTING, "port refused")
            elif result.status_code is not None:
                self.machine.set(ServerState.WARMING, f"/health {result.status_code}")
            now = time.monotonic()
            if now >= deadline:
                detail = f"not ready after {s.start_timeout:g} s (last /health: {result.reason})"
                log.error("startup timeout", detail=detail)
                return await self._deliberate_stop(runner, "startup_timeout", detail)
            wait = min(s.startup_poll_interval, deadline - now)
            done, _ = await asyncio.wait(
                _either(exit_task, restart_req), timeout=wait, return_when=asyncio.FIRST_COMPLETED
            )
            if exit_task in done:
                return await self._crash_outcome(exit_task)
            if restart_req in done:
                return await self._deliberate_stop(runner, restart_req.result(), "restart requested")

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
        checks = self._start_checks(allow_restart=True)
        try:
            done, _ = await asyncio.wait(_either(exit_task, restart_req), return_when=asyncio.FIRST_COMPLETED)
        finally:
            for t in checks:
                t.cancel()
            await asyncio.gather(*checks, return_exceptions=True)
        if exit_task not in done and not await runner.is_running():
            # A dying server fails its probes a moment before its exit is noticed; the exit (and
            # its classified cause) is the truth, not the check that found the corpse.
            await asyncio.wait([exit_task], timeout=_EXIT_GRACE)
        if exit_task.done():
            return await self._crash_outcome(exit_task)
        reason = restart_req.result()
        detail = "restart requested" if reason == "manual" else f"check {reason} failed"
        return await self._deliberate_stop(runner, reason, detail)

    # ------------------------------------------------------------------ checks
    def _start_checks(self, *, allow_restart: bool, include_health: bool = True) -> list[asyncio.Task[None]]:
        c = self.settings.checks
        assert self._client is not None
        client = self._client
        tasks: list[asyncio.Task[None]] = []

        def spawn(
            settings: CheckSettings, family: str, fn: Callable[[], Awaitable[list[ProbeResult]]]
        ) -> None:
            if settings.enabled:
                tasks.append(asyncio.create_task(self._check_loop(settings, family, fn, allow_restart)))

        async def health() -> list[ProbeResult]:
            return [await probe_health(client, "/health", "health", c.health.timeout)]

        async def health_generate() -> list[ProbeResult]:
            return [
                await probe_health(client, "/health_generate", "health_generate", c.health_generate.timeout)
            ]

        async def stall() -> list[ProbeResult]:
            t0 = time.monotonic()
            try:
                progress = await read_progress(client, c.stall.timeout)
            except (httpx.HTTPError, ValueError) as exc:
                return [
                    ProbeResult(
                        "stall",
                        False,
                        time.monotonic() - t0,
                        "metrics_error",
                        str(exc)[:200],
                        conclusive=False,
                    )
                ]
            r = self._stall.observe(progress, time.monotonic())
            return [
                ProbeResult(r.probe, r.ok, time.monotonic() - t0, r.reason, r.detail, conclusive=r.conclusive)
            ]

        async def canaries() -> list[ProbeResult]:
            # Sequential: canaries must not add a burst of load to a struggling server.
            return [await probe_canary(client, spec, c.canary) for spec in c.canary.canaries]

        if include_health:
            spawn(c.health, "health", health)
        spawn(c.health_generate, "health_generate", health_generate)
        spawn(c.stall, "stall", stall)
        if c.canary.canaries:
            spawn(c.canary, "canary", canaries)
        return tasks

    async def _check_loop(
        self,
        settings: CheckSettings,
        family: str,
        fn: Callable[[], Awaitable[list[ProbeResult]]],
        allow_restart: bool,
    ) -> None:
        first = True
        failing = False
        while True:
            # Canaries run once right after ready (a broken backend answers nonsense from the
            # first request on); the other checks start one interval later.
            if not (first and family == "canary"):
                wait = settings.interval
                if failing and settings.retry_interval is not None:
                    wait = min(wait, settings.retry_interval)
                await asyncio.sleep(wait)
            first = False
            try:
                results = await fn()
            except Exception:
                # A bug in a probe must not silently end the check (or the supervisor).
                log.exception("check crashed", check=family)
                continue
            for result in results:
                self._record(result, settings, family, allow_restart)
            failing = any(not r.ok and r.conclusive for r in results)

    def _record(self, result: ProbeResult, settings: CheckSettings, family: str, allow_restart: bool) -> None:
        if result.reason == "unsupported":
            if not self._stall_unsupported_logged:
                log.warning("stall check unavailable", detail=result.detail)
                self._stall_unsupported_logged = True
            return
        if result.conclusive:
            # The success series carries verdicts only: "could not read /metrics" is counted in
            # sentinel_probe_failures_total but must not look like "stalled".
            self.probes[result.probe] = result
        if result.probe == "health":
            self.up = result.ok
        if result.ok:
            self._consecutive[result.probe] = 0
            if result.probe in self.confirmed:
                self.confirmed = {p: r for p, r in self.confirmed.items() if p != result.probe}
        else:
            self.probe_failures[(result.probe, result.reason)] += 1
            if result.conclusive:
                self._consecutive[result.probe] += 1
            log.warning(
                "check failed",
                probe=result.probe,
                reason=result.reason,
                detail=result.detail,
                consecutive=self._consecutive[result.probe],
            )
        failing = [p for p, n in self._consecutive.items() if n > 0]
        if failing and self.state is ServerState.READY:
            self.machine.set(ServerState.UNHEALTHY, f"{result.probe}: {result.reason}")
        elif not failing and self.state is ServerState.UNHEALTHY:
            self.machine.set(ServerState.READY, "all checks passing")
        n = self._consecutive[result.probe]
        if not result.ok and result.conclusive and n >= settings.failures:
            # Replaced whole, never mutated: the exporter's threads read it.
            self.confirmed = {**self.confirmed, result.probe: n}
            if settings.action == "restart" and allow_restart:
                self._request_restart(family)
            elif n == settings.failures:
                log.error(
                    "check failing (alert only)", probe=result.probe, reason=result.reason, consecutive=n
                )

    # ------------------------------------------------------------------ external mode
    async def _run_external(self) -> None:
        """Observe a server someone else runs: states and checks, never a restart."""
        s = self.settings
        assert self._client is not None
        checks: list[asyncio.Task[None]] = []
        seen_at: float | None = None
        try:
            while True:
                r = await probe_health(self._client, "/health", "health", s.checks.health.timeout)
                alive = self.state in _ALIVE
                if r.ok and not alive:
                    if seen_at is not None:
                        self.start_duration = time.monotonic() - seen_at
                    self.ready_timestamp = self.epoch = time.time()
                    self._ready_t0 = time.monotonic()
                    self._stall.reset()
                    self._consecutive.clear()
                    self.confirmed = {}
                    self.machine.set(ServerState.READY, "/health 200")
                    checks = self._start_checks(allow_restart=False, include_health=False)
                if r.reason == "refused":
                    await _cancel_all(checks)
                    seen_at = None
                    self.up = False
                    self.epoch = None
                    self.confirmed = {}  # a verdict is about the server that gave it
                    self.probes["health"] = r
                    self.machine.set(ServerState.STOPPED, "port refused")
                elif r.ok or alive:
                    self._record(r, s.checks.health, "health", allow_restart=False)
                else:
                    seen_at = seen_at if seen_at is not None else time.monotonic()
                    self.probes["health"] = r
                    self.machine.set(ServerState.WARMING, f"/health {r.reason}")
                alive = self.state in _ALIVE
                await asyncio.sleep(s.checks.health.interval if alive else s.startup_poll_interval)
        finally:
            await _cancel_all(checks)


# How long a cancelled task gets before it is cancelled again.
_RECANCEL_AFTER = 5.0


async def _cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended.

    Python 3.11's ``asyncio.wait_for`` returns the result and drops a cancellation that arrives
    just as the awaited thing completes (this package uses ``asyncio.timeout`` for that reason,
    libraries may not); a task that lost its cancel would be awaited forever (a hung ``stop()``),
    so the cancel is repeated until the task ends.
    """
    if task.done():
        return
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=_RECANCEL_AFTER)
    if not task.cancelled() and (exc := task.exception()) is not None:
        log.error("task failed while being cancelled", task=task.get_name(), error=repr(exc))


def _either(a: asyncio.Future[Any], b: asyncio.Future[Any]) -> list[asyncio.Future[Any]]:
    return [a, b]


async def _cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    tasks.clear()
