"""The daemon's state directory: small JSON documents and bounded JSONL histories.

Top level, not in ``schedule``: the daemon creates and checks the directory before anything else
starts, and its files belong to several packages (the scheduler's histories, the supervisor's
restart history and server log, the calibration store).

Layout (all under ``state_dir``)::

    runs.jsonl         one line per load run, calibration or skipped firing, newest last, bounded;
                       the budget's spending is rebuilt from it at start
    restarts.jsonl     one line per server life (ready time, launch-config hash), bounded
    calibration/       the calibration package's result store (atomic JSON files, bounded); the
                       latest result sets the capacity gauges at start; report/ its HTML report
    server.log         child mode: the server's rotated output (the supervisor's)
    supervisor-restarts.json  the supervisor's restart history (crash-loop limit across restarts)
    budget.jsonl       the token budget's reservations, fsync'd before a run sends (schedule/ledger.py)
    sentinel.lock      flock(2)ed by the daemon for its whole life: one daemon per state directory
    sentinel.pid       the daemon's pid (for `sentinel status`, `kill -HUP`, systemd's PIDFile=)

Writes of whole documents are atomic (temporary file in the same directory, fsync, rename,
fsync of the directory), so a power cut leaves the old or the new version, never half of one.
History lines are appended with one ``write`` each; a torn last line (crash mid-append) is
skipped on read. When a history grows past twice its bound it is rewritten atomically with the
newest ``limit`` lines, so appends stay O(1) and the file stays bounded.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sglang_sentinel.atomic import atomic_write_bytes
from sglang_sentinel.log import get_logger

__all__ = ["LOCK_FILE", "PID_FILE", "StateDir", "StateError", "StateLocked", "lock_holder"]

_log = get_logger(__name__)


LOCK_FILE = "sentinel.lock"
PID_FILE = "sentinel.pid"


class StateError(Exception):
    """The state directory cannot be used (missing permission, read-only filesystem...)."""


class StateLocked(StateError):
    """Another live process holds the directory's lock (``pid`` when it wrote one, else None)."""

    def __init__(self, path: Path, pid: int | None) -> None:
        who = f"pid {pid}" if pid is not None else "another process"
        super().__init__(f"state directory {path} is in use by a running sentinel daemon ({who})")
        self.pid = pid


def _read_pid(path: Path) -> int | None:
    try:
        text = (path / LOCK_FILE).read_text(encoding="ascii").strip()
    except (OSError, UnicodeDecodeError):
        return None
    return int(text) if text.isdigit() else None


def lock_holder(path: Path) -> int | None:
    """The pid of the daemon holding ``path``'s lock, or None when nobody holds it.

    For the one-shot commands (sweep, bench) that want to warn before writing into a live
    daemon's directory. Probes with a shared, non-blocking flock that is released at once, so it
    never blocks the daemon; a holder that wrote no pid reads as 0.
    """
    try:
        fd = os.open(path / LOCK_FILE, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return _read_pid(path) or 0
    except OSError:
        return None
    finally:
        os.close(fd)
    return None


class StateDir:
    """Owns one state directory. Every method is synchronous and quick (files are small)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.write_failures = 0
        self._lock_fd: int | None = None

    def lock(self) -> None:
        """Take the directory for this process, for its whole life, or raise :class:`StateLocked`.

        flock(2), not a pidfile check: the kernel drops the lock when the process dies however it
        dies (SIGKILL, OOM), so a stale file never blocks a restart and two daemons can never both
        pass. The holder's pid is written into the lock file (read by the refused one) and into
        ``sentinel.pid`` (for ``sentinel status``, ``kill -HUP`` and systemd).
        """
        lock_path = self.path / LOCK_FILE
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise StateError(f"state directory {self.path}: {exc.strerror or exc}") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            raise StateLocked(self.path, _read_pid(self.path)) from None
        except OSError as exc:
            os.close(fd)
            raise StateError(f"state directory {self.path}: cannot lock: {exc.strerror or exc}") from None
        pid = f"{os.getpid()}\n".encode()
        try:
            os.ftruncate(fd, 0)
            os.pwrite(fd, pid, 0)
            atomic_write_bytes(self.path / PID_FILE, pid)
        except OSError as exc:
            os.close(fd)
            raise StateError(f"state directory {self.path}: {exc.strerror or exc}") from None
        self._lock_fd = fd

    def unlock(self) -> None:
        """Release the lock and remove the pidfile (clean stop); idempotent."""
        if self._lock_fd is None:
            return
        with contextlib.suppress(OSError):
            (self.path / PID_FILE).unlink(missing_ok=True)
        os.close(self._lock_fd)
        self._lock_fd = None

    def ensure(self) -> None:
        """Create the directory and prove it is writable, or raise :class:`StateError`."""
        try:
            # Owner-only: it holds server.log, the key file for the child (server-secrets.yaml) and
            # run history. An existing directory is narrowed too.
            self.path.mkdir(mode=0o700, parents=True, exist_ok=True)
            self.path.chmod(0o700)
            probe = self.path / ".write-test"
            atomic_write_bytes(probe, b"ok\n")
            probe.unlink()
        except OSError as exc:
            raise StateError(f"state directory {self.path}: {exc.strerror or exc}") from None

    # -- whole documents ------------------------------------------------------------------------

    def write_json(self, name: str, document: Mapping[str, Any]) -> bool:
        """Atomically replace ``name``. Returns False (logged, counted) when the disk refuses."""
        data = (json.dumps(document, sort_keys=True, indent=1, default=str) + "\n").encode()
        try:
            atomic_write_bytes(self.path / name, data)
        except OSError as exc:
            self.write_failures += 1
            _log.error("state_write_failed", file=name, error=str(exc))
            return False
        return True

    def read_json(self, name: str) -> dict[str, Any] | None:
        """The document, or None when it is missing or unreadable (logged; the file is kept)."""
        path = self.path / name
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            _log.error("state_read_failed", file=name, error=str(exc))
            return None
        try:
            value = json.loads(raw)
        except ValueError as exc:
            _log.error("state_file_corrupt", file=name, error=str(exc))
            return None
        if not isinstance(value, dict):
            _log.error("state_file_corrupt", file=name, error="not a JSON object")
            return None
        return value

    # -- bounded histories ----------------------------------------------------------------------

    def append(self, name: str, record: Mapping[str, Any], limit: int) -> bool:
        """Append one record to the JSONL history ``name`` and keep at most ~2*limit lines on disk."""
        path = self.path / name
        line = (json.dumps(record, sort_keys=True, default=str, separators=(",", ":")) + "\n").encode()
        try:
            # O_APPEND: one write per line, so concurrent readers never see two records interleaved.
            fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                size = os.fstat(fd).st_size
                # A crash mid-append left a torn last line: end it, so this record stays whole.
                if size and os.pread(fd, 1, size - 1) != b"\n":
                    line = b"\n" + line
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
            if self._line_count(path) > 2 * limit:
                self._truncate(path, limit)
        except OSError as exc:
            self.write_failures += 1
            _log.error("state_write_failed", file=name, error=str(exc))
            return False
        return True

    def history(self, name: str, limit: int | None = None) -> list[dict[str, Any]]:
        """Records of a history, oldest first; at most the newest ``limit``. Bad lines are skipped."""
        path = self.path / name
        try:
            raw = path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            _log.error("state_read_failed", file=name, error=str(exc))
            return []
        records: list[dict[str, Any]] = []
        skipped = 0
        for line in raw.splitlines():
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except ValueError:
                skipped += 1
                continue
            if isinstance(value, dict):
                records.append(value)
            else:
                skipped += 1
        if skipped:
            _log.warning("state_history_lines_skipped", file=name, lines=skipped)
        return records[-limit:] if limit is not None else records

    @staticmethod
    def _line_count(path: Path) -> int:
        with path.open("rb") as fh:
            return sum(chunk.count(b"\n") for chunk in iter(lambda: fh.read(1 << 16), b""))

    def _truncate(self, path: Path, limit: int) -> None:
        lines = path.read_bytes().splitlines(keepends=True)
        atomic_write_bytes(path, b"".join(lines[-limit:]))
