"""Starting and stopping the server: as our own child process, or as a systemd unit.

Child mode: an argv list (never a shell), its own session and process group (so one killpg
reaches every TP worker), NOTIFY_SOCKET and the watchdog variables removed from its environment,
stdout+stderr read line by line into the :class:`LogBus`. It is started behind
:mod:`~sglang_sentinel.supervise.pdeath` (it dies with sentinel, even with a SIGKILLed one) and recorded in
the state directory's pidfile (:mod:`~sglang_sentinel.supervise.pidfile`), so the next sentinel reaps a
leftover instead of failing on its port.

systemd mode: ``systemctl start/stop`` and ``systemctl show`` for the exit status, the journal
followed by a long-running ``journalctl --follow``; both commands are injectable. The unit's launch
flags are read from its environment files, and a fallback's written into the one sentinel owns
(supervise/unitenv.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import shutil
import signal
import time
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Protocol

from sglang_sentinel.log import get_logger
from sglang_sentinel.supervise.launch import LaunchCommand
from sglang_sentinel.supervise.logbus import LogBus, pump_lines
from sglang_sentinel.supervise.pdeath import wrap
from sglang_sentinel.supervise.pidfile import PIDFILE, Leftover, ServerPidfile
from sglang_sentinel.supervise.secretargs import hide_secret_flags
from sglang_sentinel.supervise.settings import SystemdSettings
from sglang_sentinel.supervise.unitenv import UnitEnvError, read_args, remove_args_file, write_args_file
from sglang_sentinel.systemd import clean_child_env

__all__ = ["ChildRunner", "ExitInfo", "LaunchError", "Runner", "SystemdRunner"]

_log = get_logger(__name__)

# asyncio's default 64 KiB line limit is too small for SGLang's one-line server_args dump.
_LINE_LIMIT = 1 << 20
# How often a child's exit status is looked at while waiting for it.
_EXIT_POLL = 0.1


class LaunchError(Exception):
    """The server could not even be started (binary missing, systemctl failed)."""


@dataclass(frozen=True, slots=True)
class ExitInfo:
    returncode: int | None  # exit status when it exited normally
    signal: int | None  # signal number when it was killed
    description: str
    # Stopped or restarted by someone else (an operator's systemctl, a package upgrade): not a crash.
    external: bool = False
    # Our stop: SIGTERM was not enough within stop_timeout, our SIGKILL of the group ended it.
    stop_killed: bool = False
    # systemd refused the start (the unit's Result=start-limit-hit): nothing ran, nothing crashed.
    start_limit: bool = False
    # With start_limit: seconds until a start can succeed (0: the limit was cleared), None unknown.
    retry_after: float | None = None

    @classmethod
    def from_returncode(cls, rc: int) -> ExitInfo:
        if rc < 0:
            return cls(None, -rc, f"killed by signal {-rc} ({_signame(-rc)})")
        return cls(rc, None, f"exited with status {rc}")


def _signame(sig: int) -> str:
    try:
        return signal.Signals(sig).name
    except ValueError:
        return f"signal {sig}"


def _alive(pid: int) -> bool:
    """Not exited: a zombie has exited, asyncio's child watcher just has not reaped it yet."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    except OSError:
        return True  # no /proc: trust the returncode
    return stat.rsplit(")", 1)[-1].split()[:1] != ["Z"]


class Runner(Protocol):
    #: Stops that SIGTERM did not end within the timeout, ended by our SIGKILL (child mode).
    stop_kills: int

    @property
    def pid(self) -> int | None: ...

    async def launch(self) -> None: ...

    async def wait(self) -> ExitInfo:
        """Return when the server has exited (for whatever reason)."""
        ...

    async def is_running(self) -> bool:
        """Whether the server process (or unit) is alive right now."""
        ...

    async def terminate(self, timeout_s: float) -> ExitInfo | None:
        """Stop it: polite first, forceful after ``timeout_s`` seconds. None if it was not running."""
        ...

    async def close(self) -> None:
        """Release what the runner holds (followers, pipes). The server itself is left alone."""
        ...


class ChildRunner:
    def __init__(
        self,
        cmd: LaunchCommand,
        bus: LogBus,
        secrets_dir: Path | None = None,
        *,
        state_dir: Path | None = None,
        launch_hash: str = "",
    ) -> None:
        self.command = cmd
        self._bus = bus
        self._secrets_dir = secrets_dir  # where the API key goes instead of argv (secretargs.py)
        # Without a state directory the key file goes into a private temporary directory of this
        # life of the server: removed when it exits, so no copy of the key outlives the server.
        self._temp_secrets: Path | None = None
        self._pidfile = ServerPidfile(state_dir / PIDFILE) if state_dir is not None else None
        self.launch_hash = launch_hash
        self._proc: asyncio.subprocess.Process | None = None
        self._pump: asyncio.Task[None] | None = None
        self._exit: ExitInfo | None = None
        self.stop_kills = 0

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None and self._exit is None else None

    async def launch(self) -> None:
        # sentinel's own configuration (SENTINEL_*: the API key, a group token, passwords) is not
        # the server's: a child that needs the key gets it from the launch (--api-key, hidden in
        # a 0600 file), not by inheriting every secret sentinel was given.
        env = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
        clean_child_env(env)
        env.update(self.command.env)
        # Unbuffered Python output: a crash's last lines must reach us before the process dies.
        env.setdefault("PYTHONUNBUFFERED", "1")
        self._exit = None
        self._drop_temp_secrets()
        argv, key_file = hide_secret_flags(self.command.argv, self._secrets_dir)
        if self._secrets_dir is None and key_file is not None:
            self._temp_secrets = key_file.parent
        # The wrapper execs the server, so a missing binary would only show as its exit 127.
        if shutil.which(argv[0], path=env.get("PATH")) is None:
            self._drop_temp_secrets()
            raise LaunchError(f"cannot start {argv[0]}: No such file or directory")
        try:
            # Forked from the event-loop thread: the parent-death signal is tied to the forking
            # thread, and this one lives as long as sentinel.
            self._proc = await asyncio.create_subprocess_exec(
                *wrap(argv),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.STDOUT,
                env=env,
                start_new_session=True,
                limit=_LINE_LIMIT,
            )
        except OSError as exc:
            self._drop_temp_secrets()
            raise LaunchError(f"cannot start {self.command.argv[0]}: {exc.strerror or exc}") from exc
        assert self._proc.stdout is not None
        if self._pidfile is not None:
            self._pidfile.write(self._proc.pid, self.launch_hash, argv)
        self._pump = asyncio.create_task(pump_lines(self._proc.stdout, self._bus, "child"))
        _log.info("server_process_started", pid=self._proc.pid, argv=self.command.redacted_argv())

    def _killpg(self, sig: int) -> None:
        if self._proc is None:
            return
        # The child leads its own session, so its pgid is its pid; this also reaches TP workers
        # after the leader has exited (the group outlives the leader while members remain).
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._proc.pid, sig)

    async def wait(self) -> ExitInfo:
        if self._proc is None:
            raise RuntimeError("not launched")
        if self._exit is not None:
            return self._exit
        rc = await self._exited()
        # Workers left behind (SGLang's own tree-kill normally gets them) would hold GPU memory and
        # the port; they also keep the pipe open, which would stall the line pump forever.
        self._killpg(signal.SIGKILL)
        if self._pump is not None:
            try:
                async with asyncio.timeout(5.0):
                    await asyncio.shield(self._pump)
            except TimeoutError:
                self._pump.cancel()
        await _reap(self._proc)  # the pipe is closed now: this lets asyncio close the transport
        if self._pidfile is not None:
            self._pidfile.remove()
        self._drop_temp_secrets()
        self._exit = ExitInfo.from_returncode(rc)
        return self._exit

    def _drop_temp_secrets(self) -> None:
        if self._temp_secrets is not None:
            shutil.rmtree(self._temp_secrets, ignore_errors=True)
            self._temp_secrets = None

    async def reap_leftover(self, timeout_s: float) -> Leftover | None:
        """Stop a server a previous sentinel left running (pidfile still names it); before a launch."""
        if self._pidfile is None or self.pid is not None:
            return None
        return await self._pidfile.reap(timeout_s)

    async def _exited(self) -> int:
        """The exit status, as soon as the process has exited.

        Not ``Process.wait()``: on Python 3.11 it also waits until the output pipe is closed, and a
        worker that outlives a SIGKILLed leader holds it open: the crash would go unseen and a
        stop would wait forever.
        """
        assert self._proc is not None
        # Polled: asyncio has no public "exited" event apart from wait(); returncode is set as soon
        # as the child watcher reports the exit.
        while (rc := self._proc.returncode) is None:  # noqa: ASYNC110
            await asyncio.sleep(_EXIT_POLL)
        return rc

    async def is_running(self) -> bool:
        if self._proc is None or self._proc.returncode is not None:
            return False
        return _alive(self._proc.pid)

    async def terminate(self, timeout_s: float) -> ExitInfo | None:
        if self._proc is None or self._proc.returncode is not None:
            return await self.wait() if self._proc is not None else None
        self._killpg(signal.SIGTERM)
        try:
            async with asyncio.timeout(timeout_s):
                await self._exited()
        except TimeoutError:
            # SGLang's drain has no upper bound (it waits for every in-flight request), and a
            # 0.5.23 node of rank >= 1 ignores SIGTERM (it waits for rank 0's ShutdownReq).
            _log.warning("server_stop_timeout_killing_group", timeout=timeout_s, pid=self._proc.pid)
            self._killpg(signal.SIGKILL)
            self.stop_kills += 1
            info = await self.wait()
            return replace(
                info, stop_killed=True, description=f"{info.description} after SIGTERM + {timeout_s:g} s"
            )
        return await self.wait()

    async def close(self) -> None:
        if self._pump is not None and not self._pump.done():
            self._pump.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._pump
        if self._proc is None or self._proc.returncode is not None:
            self._drop_temp_secrets()  # a server still running (left to a successor) still reads it


async def _run(argv: list[str], timeout_s: float) -> tuple[int, str]:
    """Run a short command; (exit status, combined output). 127 if it cannot be started."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            env=clean_child_env(dict(os.environ)),
        )
    except OSError as exc:
        return 127, f"cannot run {argv[0]}: {exc.strerror or exc}"
    try:
        async with asyncio.timeout(timeout_s):
            out, _ = await proc.communicate()
    except TimeoutError:
        await _reap(proc)
        return 124, f"{argv[0]} timed out after {timeout_s:g} s"
    except BaseException:
        # Cancelled (a `show` poll when the supervisor stops): an unreaped child would outlive
        # us, and its transport, collected after the event loop closed, fails in __del__.
        await _reap(proc)
        raise
    return proc.returncode or 0, out.decode("utf-8", "replace").strip()


async def _reap(proc: asyncio.subprocess.Process) -> None:
    """Kill ``proc`` and wait for it (bounded: a grandchild may hold its pipe open)."""
    with contextlib.suppress(ProcessLookupError):
        proc.kill()
    # Shielded: a second cancellation must not leave the process unreaped either.
    with contextlib.suppress(TimeoutError):
        async with asyncio.timeout(5.0):
            await asyncio.shield(proc.wait())


def _parse_show(text: str) -> dict[str, str]:
    props: dict[str, str] = {}
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            props[key.strip()] = value.strip()
    return props


# How long an "inactive" unit is taken for "start job not begun yet" rather than "exited".
_START_GRACE = 10.0
# systemd's ExecMainCode is a CLD_* code: 1 exited, 2 killed, 3 dumped core.
_CLD_EXITED = "1"
_CLD_SIGNALLED = ("2", "3")
# Signals systemd counts as a clean end of a service (Result=success) when it sent them itself.
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGPIPE)
_PROPERTIES = (
    "ActiveState",
    "SubState",
    "Result",
    "ExecMainCode",
    "ExecMainStatus",
    "MainPID",
    # When the unit left "active" and when its main process exited (CLOCK_MONOTONIC, µs): a stop
    # job leaves "active" first and the process exits after it; a crash is the other way round.
    "ActiveExitTimestampMonotonic",
    "ExecMainExitTimestampMonotonic",
    "StartLimitIntervalUSec",
    "StartLimitBurst",
    # When the main process of this life was started (CLOCK_MONOTONIC, µs): environment files
    # changed after it are not what it runs.
    "ExecMainStartTimestampMonotonic",
)
# systemd's Result= for a start it refused under StartLimitIntervalSec=/StartLimitBurst=.
START_LIMIT_HIT = "start-limit-hit"
# What a blocking `systemctl start` prints for the same refusal (systemd 239 .. 256).
_START_LIMIT_TEXT = ("start of the service was attempted too often", "start-limit-hit")


def _usec(value: str) -> int | None:
    """A systemd µs property as an int; None for "infinity", empty or unparsable."""
    try:
        return int(value)
    except ValueError:
        return None


# systemctl show prints *USec properties as timespans ("1h", "1min 30s", "500ms"), the
# *Monotonic ones as plain µs.
_TIMESPAN_UNITS = {
    "us": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "min": 60.0,
    "h": 3600.0,
    "d": 86400.0,
    "w": 604800.0,
    "M": 2629800.0,
    "y": 31557600.0,
}
_TIMESPAN_PART = re.compile(r"(\d+(?:\.\d+)?)\s*(us|ms|min|s|h|d|w|M|y)?")


def timespan_seconds(value: str) -> float | None:
    """A systemd timespan as ``systemctl show`` prints it, in seconds; None for "infinity"/junk."""
    value = value.strip()
    if not value or value == "infinity":
        return None
    total = 0.0
    pos = 0
    for m in _TIMESPAN_PART.finditer(value):
        if value[pos : m.start()].strip():
            return None
        # A bare number is µs (how D-Bus carries a USec value); systemctl always prints a unit.
        total += float(m.group(1)) * _TIMESPAN_UNITS[m.group(2) or "us"]
        pos = m.end()
    return total if pos and not value[pos:].strip() else None


def stopped_by_a_stop_job(props: dict[str, str]) -> bool:
    """The unit left "active" before its main process exited: a stop (or restart) job ended it,
    whatever signal the process finally died of (SGLang SIGKILLs itself at the end of shutdown)."""
    left = _usec(props.get("ActiveExitTimestampMonotonic", ""))
    exited = _usec(props.get("ExecMainExitTimestampMonotonic", ""))
    return bool(left and exited and left < exited)


class SystemdRunner:
    def __init__(self, settings: SystemdSettings, bus: LogBus, command_timeout: float = 30.0) -> None:
        self._s = settings
        self._bus = bus
        self._timeout = command_timeout
        self._follower: asyncio.Task[None] | None = None
        self._follower_proc: asyncio.subprocess.Process | None = None
        self._main_pid: int | None = None
        self.journal_restarts_total = 0
        self.stop_kills = 0  # systemd escalates by itself (the unit's TimeoutStopSec)
        #: The launch flags this life of the unit runs (its environment files as they were when
        #: its main process started); None until it is seen running, or when a file changed since.
        self.started_with: tuple[str, ...] | None = None
        # CLOCK_MONOTONIC of our last change to the fallback file (a removal leaves no mtime).
        self._fallback_changed_at = 0.0

    @property
    def pid(self) -> int | None:
        return self._main_pid

    def _systemctl(self, *args: str) -> list[str]:
        return [*self._s.systemctl, *args]

    async def show(self) -> dict[str, str]:
        rc, out = await _run(
            self._systemctl(
                "show",
                self._s.unit,
                "--property=" + ",".join(_PROPERTIES),
            ),
            self._timeout,
        )
        if rc != 0:
            raise LaunchError(f"systemctl show {self._s.unit} failed ({rc}): {out[:300]}")
        return _parse_show(out)

    def _ensure_follower(self) -> None:
        if self._follower is None or self._follower.done():
            self._follower = asyncio.create_task(self._follow_journal())

    async def _follow_journal(self) -> None:
        argv = [a.replace("{unit}", self._s.unit) for a in self._s.journal]
        while True:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=asyncio.subprocess.PIPE,
                    stderr=asyncio.subprocess.DEVNULL,
                    env=clean_child_env(dict(os.environ)),
                    start_new_session=True,
                    limit=_LINE_LIMIT,
                )
            except OSError as exc:
                _log.error("journal_follow_failed", argv=argv, error=exc.strerror or str(exc))
            else:
                self._follower_proc = proc
                assert proc.stdout is not None
                try:
                    await pump_lines(proc.stdout, self._bus, "journal")
                    await proc.wait()
                finally:
                    # Also on cancellation: reap the follower (no zombie, no transport left open).
                    await _reap(proc)
                _log.warning("journal_follower_restarted", returncode=proc.returncode)
            self.journal_restarts_total += 1
            await asyncio.sleep(5.0)

    # ------------------------------------------------------------------ launch flags
    def configured_args(self) -> tuple[tuple[str, ...] | None, str]:
        """(the flags of the operator's environment file alone, "") or (None, why not)."""
        s = self._s
        try:
            args = read_args([s.launch_env], s.args_variable)
        except UnitEnvError as exc:
            return None, str(exc)
        if args is None:
            return None, f"{s.launch_env} does not exist or does not set {s.args_variable}"
        return args, ""

    def set_fallback_args(self, args: Sequence[str] | None) -> bool:
        """Write a fallback's flags into the unit's fallback environment file (None: remove it), for
        the unit's next start. True when that changed the file. Raises OSError or UnitEnvError."""
        s = self._s
        if args is None:
            changed = remove_args_file(s.fallback_env)
        else:
            header = (
                "Written by sentinel ([server.fallback]): the launch flags of a fallback configuration.\n"
                f"{self._s.unit} reads this file after {s.launch_env}; its {s.args_variable} wins.\n"
                "`sentinel reset --configured` removes it (and restarts the unit with the configured\n"
                "flags). Do not edit: sentinel rewrites or removes it."
            )
            changed = write_args_file(s.fallback_env, s.args_variable, args, header)
        if changed:
            self._fallback_changed_at = time.monotonic()
            if args is not None:
                _log.info("unit_fallback_flags_written", unit=s.unit, path=str(s.fallback_env))
            else:
                _log.info("unit_fallback_flags_removed", unit=s.unit, path=str(s.fallback_env))
        return changed

    def _flags_of_this_life(self, props: dict[str, str]) -> tuple[str, ...] | None:
        """What the main process that started at ExecMainStartTimestampMonotonic runs: the files'
        flags, if neither file changed since (else unknown: systemd read them at that start)."""
        s = self._s
        started = _usec(props.get("ExecMainStartTimestampMonotonic", ""))
        if not started:
            return None
        started_s = started / 1e6
        if self._fallback_changed_at > started_s:
            return None
        # File times are wall clock; the start is CLOCK_MONOTONIC (the clock time.monotonic reads).
        offset = time.time() - time.monotonic()
        for path in (s.launch_env, s.fallback_env):
            try:
                mtime = path.stat().st_mtime
            except FileNotFoundError:
                continue
            except OSError:
                return None
            if mtime - offset > started_s:
                return None
        try:
            return read_args([s.launch_env, s.fallback_env], s.args_variable)
        except UnitEnvError:
            return None

    async def launch(self) -> None:
        self._ensure_follower()
        self.started_with = None
        props = await self.show()
        if props.get("ActiveState") == "active":
            # Already serving (sentinel itself restarted): attach, never bounce a healthy server.
            self._main_pid = int(props.get("MainPID", "0") or 0) or None
            _log.info("unit_attached", unit=self._s.unit, pid=self._main_pid)
            return
        if props.get("Result") == START_LIMIT_HIT:
            # Refused before (operator's starts count as well): clear it now if polkit lets us,
            # else the start below is refused again and wait() says how long to wait.
            await self.reset_failed()
        rc, out = await _run(self._systemctl("start", "--no-block", self._s.unit), self._timeout)
        if rc != 0:
            if any(t in out for t in _START_LIMIT_TEXT):
                # A blocking start (a systemctl override without --no-block): same refusal.
                _log.info("unit_start_refused_by_systemctl", unit=self._s.unit, output=out[:300])
            else:
                raise LaunchError(f"systemctl start {self._s.unit} failed ({rc}): {out[:300]}")
        else:
            _log.info("unit_start_requested", unit=self._s.unit)

    async def reset_failed(self) -> bool:
        """``systemctl reset-failed UNIT``: clears the failed state and the start rate limit.
        deploy/sentinel-polkit.rules grants the sentinel user exactly this verb on this unit."""
        rc, out = await _run(self._systemctl("reset-failed", self._s.unit), self._timeout)
        if rc != 0:
            _log.info("unit_reset_failed_denied", unit=self._s.unit, returncode=rc, output=out[:300])
            return False
        _log.info("unit_start_limit_cleared", unit=self._s.unit)
        return True

    async def _refused(self, info: ExitInfo, props: dict[str, str]) -> ExitInfo:
        """A start-limit refusal: clear it (polkit permitting) or say how long until it clears."""
        if await self.reset_failed():
            return replace(
                info, retry_after=0.0, description=f"{info.description}; cleared with reset-failed"
            )
        return replace(info, retry_after=timespan_seconds(props.get("StartLimitIntervalUSec", "")))

    async def wait(self) -> ExitInfo:
        seen_running = False
        failures = 0
        t0 = time.monotonic()
        while True:
            try:
                props = await self.show()
                failures = 0
            except LaunchError as exc:
                failures += 1
                if failures == 3:
                    _log.error("unit_state_unreadable", error=str(exc))
                await asyncio.sleep(self._s.poll_interval)
                continue
            state = props.get("ActiveState", "")
            exit_info: ExitInfo | None = None
            if props.get("SubState") == "auto-restart":
                # Died; systemd's own Restart= will start it again after RestartSec.
                exit_info = self._exit_info(props)
            elif state in ("active", "reloading", "activating"):
                pid = int(props.get("MainPID", "0") or 0)
                if seen_running and pid and self._main_pid and pid != self._main_pid:
                    # systemd restarted it between two polls (its own Restart=): the old one exited.
                    # Without Restart= in the unit (as shipped) that is someone else's restart.
                    exit_info = ExitInfo(
                        None, None, f"unit restarted outside sentinel (new MainPID {pid})", external=True
                    )
                elif pid:
                    if not seen_running:
                        self.started_with = self._flags_of_this_life(props)
                    self._main_pid = pid
                    seen_running = True
            elif state == "inactive" and not seen_running and time.monotonic() - t0 < _START_GRACE:
                pass  # `start --no-block` queued a job that systemd has not begun yet
            elif state in ("failed", "inactive", "deactivating") or (seen_running and state):
                exit_info = self._exit_info(props)
            if exit_info is not None:
                if exit_info.start_limit:
                    self._main_pid = None
                    return await self._refused(exit_info, props)
                if exit_info.external:
                    await self._wait_out_stop_job(props)
                self._main_pid = None
                # journald (and our follower) lag the exit a little; the cause is in those lines.
                await asyncio.sleep(self._s.settle)
                return exit_info
            await asyncio.sleep(self._s.poll_interval)

    async def _wait_out_stop_job(self, props: dict[str, str]) -> None:
        """Let someone else's stop (or restart) job finish: a start queued behind it would find
        the same stopping unit and count the one restart again."""
        failures = 0
        while props.get("ActiveState") == "deactivating" and failures < 3:
            await asyncio.sleep(self._s.poll_interval)
            try:
                props = await self.show()
            except LaunchError:
                failures += 1

    async def is_running(self) -> bool:
        try:
            props = await self.show()
        except LaunchError:
            return True  # cannot tell: let the check's verdict stand
        return props.get("ActiveState") in ("active", "reloading") and props.get("SubState") != "auto-restart"

    @staticmethod
    def _exit_info(props: dict[str, str], *, ours: bool = False) -> ExitInfo:
        code, status = props.get("ExecMainCode", ""), props.get("ExecMainStatus", "")
        state = f"{props.get('ActiveState', '?')}/{props.get('SubState', '?')}"
        if props.get("Result") == START_LIMIT_HIT:
            # First: ExecMain* still describe the previous life (often SGLang's own SIGKILL at the
            # end of a stop), which is how a refusal used to read as "killed by signal 9".
            burst = props.get("StartLimitBurst", "?")
            within = props.get("StartLimitIntervalUSec") or "StartLimitIntervalSec="
            return ExitInfo(
                None,
                None,
                f"unit {state}: systemd refused the start (start request repeated too quickly: "
                f"more than {burst} starts within {within}, Result={START_LIMIT_HIT}); nothing was started",
                start_limit=True,
            )
        who = "stopped by sentinel" if ours else "stopped outside sentinel"
        try:
            n = int(status)
        except ValueError:
            return ExitInfo(None, None, f"unit {state}, result {props.get('Result', '?')}")
        if code == _CLD_EXITED:
            if stopped_by_a_stop_job(props):
                # A stop (or restart) job came first and the process then exited on its own: a
                # server that ends on SIGTERM with a status (0, or its shutdown's) was stopped,
                # not crashed.
                return ExitInfo(n, None, f"unit {state}: {who} (exited with status {n})", external=True)
            return ExitInfo(n, None, f"unit {state}: exited with status {n}")
        if code in _CLD_SIGNALLED and (
            (props.get("Result") == "success" and n in _STOP_SIGNALS) or stopped_by_a_stop_job(props)
        ):
            # systemd files a stop it performed (SIGTERM) as success; SGLang's own SIGKILL at the
            # end of its shutdown comes after the unit left "active": someone ran stop/restart.
            return ExitInfo(None, n, f"unit {state}: {who} ({_signame(n)})", external=True)
        if code not in _CLD_SIGNALLED:
            # ExecMainCode 0: the main process has not exited; the unit is being stopped or
            # restarted by a job someone else queued (`systemctl restart sglang`), not by a signal 0.
            return ExitInfo(
                None,
                None,
                f"unit {state}: {'stopped by sentinel' if ours else 'stopped or restarted outside sentinel'}",
                external=True,
            )
        return ExitInfo(None, n, f"unit {state}: killed by signal {n} ({_signame(n)})")

    async def terminate(self, timeout_s: float) -> ExitInfo | None:
        # systemd applies the unit's own KillMode/TimeoutStopSec; we bound the wait for the command.
        rc, out = await _run(self._systemctl("stop", self._s.unit), timeout_s + self._timeout)
        if rc != 0:
            _log.error("systemctl_stop_failed", unit=self._s.unit, returncode=rc, output=out[:300])
        self._main_pid = None
        try:
            return self._exit_info(await self.show(), ours=True)
        except LaunchError:
            return None

    async def close(self) -> None:
        if self._follower is not None:
            self._follower.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._follower
            self._follower = None
        proc, self._follower_proc = self._follower_proc, None
        if proc is not None and proc.returncode is None:
            # The cancelled follower task could not wait for it; reap it here (no zombie).
            await _reap(proc)
