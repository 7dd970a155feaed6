"""A small fake of ``systemctl`` for one unit, for testing the supervisor's systemd mode.

``fake_systemctl.py STATE_DIR show|start|stop|restart|reset-failed ...``. The unit's command line
is in ``STATE_DIR/cmd`` (one argument per line). ``start`` launches a detached "manager" process
that runs the command with its output appended to ``STATE_DIR/journal.log`` (what journald would
hold), waits for it and records the exit like systemd's ExecMainCode/ExecMainStatus. Every call
is appended to ``STATE_DIR/calls``.

Environment files as systemd's ``EnvironmentFile=``: ``STATE_DIR/env_files`` lists them, one a
line, a leading ``-`` for an optional one; they are read at every start, in order (a later
assignment wins), and an argument ``$NAME`` of the command is replaced by NAME's value split at
whitespace, quotes respected (systemd.service(5), "Command lines"). The argv a start ran is in
``STATE_DIR/argv`` (one argument per line); every start's argv is appended to ``STATE_DIR/argvs``
(one JSON list a line).

A start rate limit as systemd's: ``STATE_DIR/start_limit`` holds "BURST INTERVAL_S"; the start
times are in ``STATE_DIR/starts``; a start beyond it is refused like systemd's (unit failed,
``Result=start-limit-hit``, ExecMain* left from the previous life). ``reset-failed`` clears it,
unless ``STATE_DIR/deny_reset`` exists (polkit's "Access denied", exit 1).

The unit holds its main PID until the manager has reaped the process and recorded the exit, as
systemd does until it has handled the SIGCHLD: a ``show`` between the process's death and that
record says "active" (a crash) or "deactivating" (a stop job), never an "inactive" unit with no
exit status, which no systemd prints and which read as an unexplained crash. ``show`` prints
ExecMainCode and ExecMainStatus in every state (0 before any exit), as ``systemctl show`` does.

Jobs are serialized as systemd's job queue does: start, stop, restart and reset-failed hold a lock
on ``STATE_DIR/jobs.lock`` (an operator's restart and sentinel's start never interleave; a
``--no-block`` job that finds one running is queued behind it and the command returns), and each
waits *for* its outcome (the manager's pid, the exit's record) with a generous deadline, never a
fixed time: on a loaded box a manager takes seconds to start, and a start that gave up early
launched a second server beside the first.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

# Far beyond any start or stop on a loaded box; only a broken fake reaches it.
_DEADLINE_S = 60.0
# As systemd's TimeoutStopSec (90 s there, shortened: a test's server that ignores SIGTERM would
# hold the test that long): SIGTERM first, SIGKILL after this long.
_STOP_TIMEOUT_S = 2.0


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _environment(d: Path) -> dict[str, str]:
    """The assignments of the unit's environment files (the double-quoted values deploy/ writes:
    comments skipped, a backslash-newline joins lines, the quotes go, \\-escapes undone)."""
    env: dict[str, str] = {}
    listed = d / "env_files"
    for line in listed.read_text().splitlines() if listed.exists() else []:
        optional = line.startswith("-")
        path = Path(line.removeprefix("-"))
        if not path.exists():
            if optional:
                continue
            raise SystemExit(f"fake systemctl: environment file {path} missing")
        text = re.sub(r"\\\n", "", path.read_text())
        for assignment in text.splitlines():
            if assignment.strip() and not assignment.lstrip().startswith(("#", ";")):
                key, _, value = assignment.partition("=")
                value = value.strip()
                if value.startswith('"') and value.endswith('"'):
                    value = re.sub(r'\\(["\\`$])', r"\1", value[1:-1])
                env[key.strip()] = value
    return env


def _put(path: Path, text: str) -> None:
    """Written in one rename: a concurrent ``show`` (or a start waiting for the pid) never finds
    the file there but still empty."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}")
    tmp.write_text(text)
    tmp.replace(path)


def _record(d: Path, *fields: object) -> None:
    """The unit's last result."""
    _put(d / "result", "".join(f"{f}\n" for f in fields))


def _manage(d: Path) -> None:
    env = _environment(d)
    argv: list[str] = []
    for arg in (d / "cmd").read_text().splitlines():
        if arg.startswith("$") and arg[1:] in env:
            argv += shlex.split(env[arg[1:]])
        else:
            argv.append(arg)
    _put(d / "argv", "\n".join(argv) + "\n")  # read while the unit restarts: never half-written
    with (d / "argvs").open("a") as lives:
        lives.write(json.dumps(argv) + "\n")
    with (d / "journal.log").open("ab") as journal:
        # ExecMainStartTimestampMonotonic: taken at the fork, as systemd does.
        started = time.monotonic_ns() // 1000
        proc = subprocess.Popen(argv, stdout=journal, stderr=subprocess.STDOUT, start_new_session=True)
        _put(d / "started", str(started))
        _put(d / "pid", str(proc.pid))
        rc = proc.wait()
    code, status = ("1", rc) if rc >= 0 else ("2", -rc)
    exited = time.monotonic_ns() // 1000
    stopping = (d / "stopping").exists()
    # A stop job leaves "active" before the process exits; a crash, after.
    left = int((d / "stopping").read_text() or exited - 1) if stopping else exited + 1
    result = "success" if stopping or rc == 0 else ("signal" if rc < 0 else "exit-code")
    active = "inactive" if result == "success" else "failed"
    _record(d, active, result, code, status, left, exited)
    pid_file = d / "pid"
    if pid_file.exists() and pid_file.read_text() == str(proc.pid):
        pid_file.unlink(missing_ok=True)


def _start_limited(d: Path) -> bool:
    """Count this start; True (and the unit failed with start-limit-hit) when it is one too many."""
    limit = d / "start_limit"
    if not limit.exists():
        return False
    burst, interval = (float(x) for x in limit.read_text().split())
    now = time.time()
    starts_file = d / "starts"
    starts = [float(t) for t in starts_file.read_text().split()] if starts_file.exists() else []
    starts = [t for t in starts if now - t < interval]
    if len(starts) >= burst:
        old = (d / "result").read_text().split() if (d / "result").exists() else []
        code, status, left, exited = old[2:6] if len(old) >= 6 else ("0", "0", "0", "0")
        _record(d, "failed", "start-limit-hit", code, status, left, exited)
        _put(starts_file, " ".join(map(str, starts)))
        return True
    _put(starts_file, " ".join(map(str, [*starts, now])))
    return False


def _start(d: Path) -> bool:
    """Start the unit (a no-op while it runs); False when the start limit refused it."""
    if _running(d)[1]:
        return True
    # The last life's manager drops its pid file just after recording the exit: let it, so that
    # the file is never the old life's once this start has cleared the record.
    _wait_for(lambda: not (d / "pid").exists(), _DEADLINE_S)
    if _start_limited(d):
        return False
    # "starting" first: a show in between reads the last life's record (as systemd keeps ExecMain*
    # until the next start), never a unit that looks as if it had never run.
    (d / "starting").write_text("")
    for name in ("result", "stopping"):
        (d / name).unlink(missing_ok=True)
    subprocess.Popen(
        [sys.executable, __file__, str(d), "_manage"],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    _wait_for((d / "pid").exists, _DEADLINE_S)
    (d / "starting").unlink(missing_ok=True)
    return True


def _wait_for(condition: Callable[[], bool], timeout_s: float) -> bool:
    """Poll ``condition()`` until it holds or ``timeout_s`` passed; whether it held."""
    deadline = time.monotonic() + timeout_s
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)
    return True


def _kill(pid: int, sig: int) -> None:
    # The process may have died (and been reaped) since the unit was read as running.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _stop(d: Path, pid: int) -> None:
    _put(d / "stopping", str(time.monotonic_ns() // 1000))
    _kill(pid, signal.SIGTERM)
    if not _wait_for(lambda: not _alive(pid), _STOP_TIMEOUT_S):
        _kill(pid, signal.SIGKILL)
    # The manager records the exit (and drops the pid file) once it has reaped the process.
    _wait_for((d / "result").exists, _DEADLINE_S)


def main() -> int:
    d = Path(sys.argv[1])
    verb = sys.argv[2]
    args = [a for a in sys.argv[3:] if not a.startswith("-")]
    if "--queued" not in sys.argv:  # (a queued job's call was recorded when it was made)
        with (d / "calls").open("a") as f:
            f.write(" ".join(sys.argv[2:]) + "\n")
    if verb == "_manage":
        _manage(d)
        return 0
    if verb == "show":
        return _show(d)
    with (d / "jobs.lock").open("a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if "--no-block" in sys.argv:
                # As systemd: the job is queued behind the one running (an operator's restart) and
                # the command returns at once; the queued job runs when that one is done.
                subprocess.Popen(
                    [sys.executable, __file__, str(d), verb, "--queued", *args],
                    start_new_session=True,
                    stdin=subprocess.DEVNULL,
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
                return 0
            fcntl.flock(lock, fcntl.LOCK_EX)
        return _job(d, verb, args)


def _read(path: Path) -> str | None:
    """The file's text, None when it is not there (a job may remove it at any time)."""
    try:
        return path.read_text()
    except FileNotFoundError:
        return None


def _running(d: Path) -> tuple[int, bool]:
    """The main PID, and whether the unit still holds it: started and its exit not yet recorded.
    Read the record first: a start clears it only once the last life's pid file is gone."""
    recorded = (d / "result").exists()
    pid = int(_read(d / "pid") or 0)
    return pid, pid > 0 and not recorded


def _show(d: Path) -> int:
    pid, running = _running(d)
    record = None if running else _read(d / "result")
    if running and (d / "stopping").exists():
        # As systemd while a stop job waits for the main process: it has not exited yet.
        print(f"ActiveState=deactivating\nSubState=stop-sigterm\nResult=success\nMainPID={pid}")
        print("ExecMainCode=0\nExecMainStatus=0")
    elif running:
        print(f"ActiveState=active\nSubState=running\nResult=success\nMainPID={pid}")
        print("ExecMainCode=0\nExecMainStatus=0")
        print(f"ExecMainStartTimestampMonotonic={_read(d / 'started')}")
    elif record is not None:
        active, result, code, status, left, exited = record.split()
        print(f"ActiveState={active}\nSubState={'dead' if active == 'inactive' else 'failed'}")
        print(f"Result={result}\nMainPID=0\nExecMainCode={code}\nExecMainStatus={status}")
        print(f"ActiveExitTimestampMonotonic={left}\nExecMainExitTimestampMonotonic={exited}")
        if (d / "start_limit").exists():
            burst, interval = (d / "start_limit").read_text().split()
            print(f"StartLimitIntervalUSec={interval}s\nStartLimitBurst={burst}")
    elif (d / "starting").exists():
        print("ActiveState=activating\nSubState=start\nResult=success\nMainPID=0")
        print("ExecMainCode=0\nExecMainStatus=0")
    else:
        print("ActiveState=inactive\nSubState=dead\nResult=success\nMainPID=0")
        print("ExecMainCode=0\nExecMainStatus=0")
    return 0


def _job(d: Path, verb: str, args: list[str]) -> int:
    pid, running = _running(d)
    if verb == "reset-failed":
        if (d / "deny_reset").exists():
            print(f"Failed to reset failed state of unit {args[0] if args else '?'}: Access denied")
            return 1
        (d / "starts").unlink(missing_ok=True)
        # As systemd: a failed unit goes inactive with Result=success; the last exit's ExecMain*
        # stay until the next start.
        record = _read(d / "result")
        if record is not None and record.split()[0] == "failed":
            _record(d, "inactive", "success", *record.split()[2:6])
        return 0
    if verb == "start":
        _start(d)  # --no-block: a refused job was queued; systemd refuses it when it runs
        return 0
    if verb == "stop":
        if running:
            _stop(d, pid)
        return 0
    if verb == "restart":
        # An operator's blocking `systemctl restart`: a stop job, then a start job, which the start
        # limit counts like any other (and refuses the same way).
        if running:
            _stop(d, pid)
        if not _start(d):
            unit = args[0] if args else "?"
            print(
                f"Job for {unit} failed because start of the service was attempted too often.\n"
                f'See "systemctl status {unit}" and "journalctl -xeu {unit}" for details.'
            )
            return 1
        return 0
    print(f"fake systemctl: unknown verb {verb} {args}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
