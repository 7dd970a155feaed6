"""``<state_dir>/server.pid``: which server process this sentinel started, so the next one can find it.

The parent-death signal (:mod:`~sglang_sentinel.supervise.pdeath`) normally takes the server down with
sentinel; the pidfile covers what it cannot: a server started by an older sentinel without it, a
wrapper on a kernel without ``prctl``, a server whose parent thread is still alive in a wedged
sentinel that systemd then replaced. A pid alone could name a recycled process, so the record also
holds the process's start time (``/proc/<pid>/stat`` field 22, clock ticks since boot): same pid and
same start time is the same process.

Leftovers are *reaped*, not adopted: the leftover's stdout went to the dead sentinel's pipe, so its
log lines (and with them the cause of its next crash) would be lost, and it cannot be waited for as
a child. One restart of a server that was going to be restarted anyway is the cheaper price.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from sglang_sentinel.atomic import atomic_write_bytes
from sglang_sentinel.log import get_logger

__all__ = ["PIDFILE", "Leftover", "ServerPidfile", "argv_hash", "process_start_ticks"]

_log = get_logger(__name__)

PIDFILE = "server.pid"
_REAP_POLL = 0.05


def process_start_ticks(pid: int) -> int | None:
    """The process's start time in clock ticks since boot; None if there is no such (live) process."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat.rsplit(")", 1)[-1].split()
    # fields[0] is field 3 (state); starttime is field 22.
    if len(fields) < 20 or fields[0] == "Z":
        return None
    try:
        return int(fields[19])
    except ValueError:
        return None


def argv_hash(argv: list[str]) -> str:
    return hashlib.sha256("\0".join(argv).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class Leftover:
    pid: int
    launch_hash: str
    argv_hash: str
    sentinel_pid: int | None


class ServerPidfile:
    def __init__(self, path: Path) -> None:
        self.path = path

    def write(self, pid: int, launch_hash: str, argv: list[str]) -> None:
        record = {
            "pid": pid,
            "start_ticks": process_start_ticks(pid),
            "launch_hash": launch_hash,
            "argv_hash": argv_hash(argv),
            "sentinel_pid": os.getpid(),
            "written": time.time(),
        }
        try:
            atomic_write_bytes(self.path, json.dumps(record).encode() + b"\n")
        except OSError as exc:
            # Not fatal: only the clean-up after a SIGKILLed sentinel depends on it.
            _log.warning("server_pidfile_unwritable", path=str(self.path), error=exc.strerror or str(exc))

    def remove(self) -> None:
        with contextlib.suppress(OSError):
            self.path.unlink()

    def leftover(self) -> Leftover | None:
        """The recorded server if it is still running (same pid *and* start time), else None."""
        try:
            data = json.loads(self.path.read_text())
            pid, ticks = int(data["pid"]), data.get("start_ticks")
        except FileNotFoundError:
            return None
        except (OSError, ValueError, TypeError, KeyError):
            _log.warning("server_pidfile_unreadable", path=str(self.path))
            self.remove()
            return None
        if pid <= 1 or ticks is None or process_start_ticks(pid) != ticks:
            self.remove()  # gone, or the pid now names another process
            return None
        sentinel_pid = data.get("sentinel_pid")
        return Leftover(
            pid,
            str(data.get("launch_hash", "")),
            str(data.get("argv_hash", "")),
            sentinel_pid if isinstance(sentinel_pid, int) else None,
        )

    async def reap(self, timeout_s: float) -> Leftover | None:
        """Stop a leftover server (SIGTERM to its group, SIGKILL after ``timeout_s``); what was reaped."""
        left = self.leftover()
        if left is None:
            return None
        if left.sentinel_pid == os.getpid():
            return None  # our own live child (a second launch in this process): not a leftover
        _log.warning(
            "leftover_server_found",
            pid=left.pid,
            launch_hash=left.launch_hash,
            started_by=left.sentinel_pid,
            action="reap",
        )
        ticks = process_start_ticks(left.pid)
        _signal_group(left.pid, signal.SIGTERM)
        if not await _gone(left.pid, ticks, timeout_s):
            _signal_group(left.pid, signal.SIGKILL)
            if not await _gone(left.pid, ticks, timeout_s):
                # Stuck in the kernel (a GPU driver call): the port check will say who holds it.
                _log.error("leftover_server_unkillable", pid=left.pid)
                return left
        self.remove()
        _log.warning("leftover_server_reaped", pid=left.pid)
        return left


async def _gone(pid: int, ticks: int | None, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while ticks is not None and process_start_ticks(pid) == ticks:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(_REAP_POLL)
    return True


def _signal_group(pid: int, sig: int) -> None:
    """The leftover led its own session (pgid == pid); its TP workers are in that group."""
    try:
        pgid = os.getpgid(pid)
    except ProcessLookupError:
        return
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if pgid == pid:
            os.killpg(pgid, sig)
        else:
            os.kill(pid, sig)
