"""A small fake of ``systemctl`` for one unit, for testing the supervisor's systemd mode.

``fake_systemctl.py STATE_DIR show|start|stop ...``. The unit's command line is in
``STATE_DIR/cmd`` (one argument per line). ``start`` launches a detached "manager" process that
runs the command with its output appended to ``STATE_DIR/journal.log`` (what journald would
hold), waits for it and records the exit like systemd's ExecMainCode/ExecMainStatus. Every call
is appended to ``STATE_DIR/calls``.

A start rate limit as systemd's: ``STATE_DIR/start_limit`` holds "BURST INTERVAL_S"; the start
times are in ``STATE_DIR/starts``; a start beyond it is refused like systemd's (unit failed,
``Result=start-limit-hit``, ExecMain* left from the previous life). ``reset-failed`` clears it,
unless ``STATE_DIR/deny_reset`` exists (polkit's "Access denied", exit 1).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


def _manage(d: Path) -> None:
    argv = (d / "cmd").read_text().splitlines()
    with (d / "journal.log").open("ab") as journal:
        proc = subprocess.Popen(argv, stdout=journal, stderr=subprocess.STDOUT, start_new_session=True)
        (d / "pid").write_text(str(proc.pid))
        rc = proc.wait()
    code, status = ("1", rc) if rc >= 0 else ("2", -rc)
    exited = time.monotonic_ns() // 1000
    stopping = (d / "stopping").exists()
    # A stop job leaves "active" before the process exits; a crash, after.
    left = int((d / "stopping").read_text() or exited - 1) if stopping else exited + 1
    result = "success" if stopping or rc == 0 else ("signal" if rc < 0 else "exit-code")
    active = "inactive" if result == "success" else "failed"
    (d / "result").write_text(f"{active}\n{result}\n{code}\n{status}\n{left}\n{exited}\n")
    (d / "pid").unlink(missing_ok=True)


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
        (d / "result").write_text(f"failed\nstart-limit-hit\n{code}\n{status}\n{left}\n{exited}\n")
        starts_file.write_text(" ".join(map(str, starts)))
        return True
    starts_file.write_text(" ".join(map(str, [*starts, now])))
    return False


def main() -> int:
    d = Path(sys.argv[1])
    verb = sys.argv[2]
    args = [a for a in sys.argv[3:] if not a.startswith("-")]
    with (d / "calls").open("a") as f:
        f.write(" ".join(sys.argv[2:]) + "\n")
    pid_file = d / "pid"
    pid = int(pid_file.read_text()) if pid_file.exists() else 0
    running = pid > 0 and _alive(pid)
    if verb == "_manage":
        _manage(d)
        return 0
    if verb == "show":
        if running and (d / "stopping").exists():
            # As systemd while a stop job waits for the main process: it has not exited yet.
            print(f"ActiveState=deactivating\nSubState=stop-sigterm\nResult=success\nMainPID={pid}")
            print("ExecMainCode=0\nExecMainStatus=0")
        elif running:
            print(f"ActiveState=active\nSubState=running\nResult=success\nMainPID={pid}")
            print("ExecMainCode=0\nExecMainStatus=0")
        elif (d / "result").exists():
            active, result, code, status, left, exited = (d / "result").read_text().split()
            print(f"ActiveState={active}\nSubState={'dead' if active == 'inactive' else 'failed'}")
            print(f"Result={result}\nMainPID=0\nExecMainCode={code}\nExecMainStatus={status}")
            print(f"ActiveExitTimestampMonotonic={left}\nExecMainExitTimestampMonotonic={exited}")
            if (d / "start_limit").exists():
                burst, interval = (d / "start_limit").read_text().split()
                print(f"StartLimitIntervalUSec={interval}s\nStartLimitBurst={burst}")
        elif (d / "starting").exists():
            print("ActiveState=activating\nSubState=start\nResult=success\nMainPID=0")
        else:
            print("ActiveState=inactive\nSubState=dead\nResult=success\nMainPID=0")
        return 0
    if verb == "reset-failed":
        if (d / "deny_reset").exists():
            print(f"Failed to reset failed state of unit {args[0] if args else '?'}: Access denied")
            return 1
        (d / "starts").unlink(missing_ok=True)
        result_file = d / "result"
        if result_file.exists() and result_file.read_text().split()[0] == "failed":
            result_file.unlink()
        return 0
    if verb == "start":
        if running:
            return 0
        if _start_limited(d):
            return 0  # --no-block: the job was queued; systemd refuses it when it runs
        for name in ("result", "stopping"):
            (d / name).unlink(missing_ok=True)
        (d / "starting").write_text("")
        subprocess.Popen(
            [sys.executable, __file__, str(d), "_manage"],
            start_new_session=True,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        for _ in range(100):
            if pid_file.exists():
                break
            time.sleep(0.02)
        (d / "starting").unlink(missing_ok=True)
        return 0
    if verb == "stop":
        if not running:
            return 0
        (d / "stopping").write_text(str(time.monotonic_ns() // 1000))
        os.killpg(pid, signal.SIGTERM)
        for _ in range(100):
            if not _alive(pid):
                break
            time.sleep(0.02)
        else:
            os.killpg(pid, signal.SIGKILL)
        for _ in range(100):
            if (d / "result").exists():
                break
            time.sleep(0.02)
        return 0
    print(f"fake systemctl: unknown verb {verb} {args}", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
