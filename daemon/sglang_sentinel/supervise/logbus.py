"""The server's log lines: kept on disk (size-rotated), in a tail for crash analysis, and fanned out.

Consumers are listeners called synchronously for every line (the log collector's parser), so no
line is queued or dropped on the way; a listener must be fast, because a child that blocks on a
full stdout pipe stops serving.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from sglang_sentinel.log import get_logger
from sglang_sentinel.redact import redact

__all__ = ["LineListener", "LogBus", "LogLine", "RotatingFile", "pump_lines"]

_log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class LogLine:
    text: str  # without the trailing newline
    timestamp: float  # wall clock when sentinel read it
    source: str  # "child" (stdout+stderr of a managed child) or "journal"


LineListener = Callable[[LogLine], None]


def _open_private(path: Path) -> TextIO:
    """Append, owner-only: the server's output can hold prompts, paths and (unredacted by an
    unknown shape) secrets. An existing file with wider bits is narrowed."""
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
    os.fchmod(fd, 0o600)
    return open(fd, "a", encoding="utf-8", errors="replace", buffering=1 << 16)


class RotatingFile:
    """Append-only text file rotated by size (``path`` → ``path.1`` … ``path.N``), buffered.

    logging's RotatingFileHandler seeks, writes and flushes per record (about 75 µs a line in
    benchmarks/supervise_logbus.py, in the event loop); this writes into a buffer and flushes at
    most every ``flush_interval`` seconds, about 15x cheaper per line.
    """

    def __init__(self, path: Path, max_bytes: int, backups: int) -> None:
        self.path = path
        self._max = max_bytes
        self._backups = backups
        path.parent.mkdir(parents=True, exist_ok=True)
        self._fh = _open_private(path)
        self._size = self._fh.tell()

    def write_line(self, text: str) -> None:
        data = text + "\n"
        n = len(data.encode("utf-8", "replace")) if not data.isascii() else len(data)
        if self._size and self._size + n > self._max:
            self._rotate()
        self._fh.write(data)
        self._size += n

    def _rotate(self) -> None:
        self._fh.close()
        if self._backups > 0:
            for i in range(self._backups - 1, 0, -1):
                older = self.path.with_name(f"{self.path.name}.{i}")
                if older.exists():
                    older.replace(self.path.with_name(f"{self.path.name}.{i + 1}"))
            self.path.replace(self.path.with_name(f"{self.path.name}.1"))
        else:
            self.path.unlink(missing_ok=True)  # no backups kept: start the file over
        self._fh = _open_private(self.path)
        self._size = 0

    def flush(self) -> None:
        self._fh.flush()

    def close(self) -> None:
        self._fh.close()


class LogBus:
    """Receives every line of the server's output and distributes it."""

    def __init__(
        self,
        log_file: Path | None,
        *,
        max_bytes: int,
        backups: int,
        tail_lines: int,
        flush_interval: float = 0.5,
    ) -> None:
        self._tail: deque[str] = deque(maxlen=tail_lines)
        self._listeners: list[LineListener] = []
        self.lines_total = 0
        self.write_errors_total = 0
        self.listener_errors_total = 0
        self._file: RotatingFile | None = None
        self._flush_interval = flush_interval
        self._flush_pending: asyncio.TimerHandle | None = None
        self.log_file = log_file
        if log_file is not None:
            try:
                self._file = RotatingFile(log_file, max_bytes, backups)
            except OSError as exc:
                # Losing the file copy must not stop supervision: lines still reach the tail/listeners.
                _log.error("server_log_open_failed", path=str(log_file), error=str(exc))

    def close(self) -> None:
        """Flush and close the file."""
        if self._flush_pending is not None:
            self._flush_pending.cancel()
            self._flush_pending = None
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                self.write_errors_total += 1
            self._file = None

    def flush(self) -> None:
        self._flush_pending = None
        if self._file is not None:
            try:
                self._file.flush()
            except OSError:
                self.write_errors_total += 1

    def _write(self, text: str) -> None:
        assert self._file is not None
        try:
            self._file.write_line(text)
        except OSError:
            # Disk full, file removed under us: count it, keep serving the other consumers.
            self.write_errors_total += 1
            return
        if self._flush_pending is None:
            try:
                loop = asyncio.get_running_loop()
            except RuntimeError:
                self.flush()
                return
            self._flush_pending = loop.call_later(self._flush_interval, self.flush)

    def publish(self, text: str, source: str) -> None:
        # Redacted once here, so server.log, the crash tail and the listeners all get the
        # masked line: SGLang's start-up line prints server_args with api_key='...'.
        text = redact(text)
        line = LogLine(text, time.time(), source)
        self.lines_total += 1
        self._tail.append(text)
        if self._file is not None:
            self._write(text)
        for listener in list(self._listeners):
            try:
                listener(line)
            except Exception:
                self.listener_errors_total += 1
                # A broken listener fails on every line: log the first error and then every 1000th.
                if self.listener_errors_total % 1000 == 1:
                    _log.exception(
                        "log_line_listener_failed", listener=repr(listener), errors=self.listener_errors_total
                    )

    def tail(self, n: int | None = None) -> list[str]:
        lines = list(self._tail)
        return lines if n is None else lines[-n:]

    def clear_tail(self) -> None:
        """Forget the previous run's lines so a new crash is classified by its own tail."""
        self._tail.clear()

    def add_listener(self, listener: LineListener) -> Callable[[], None]:
        """Call ``listener`` synchronously for every line (keep it fast). Returns a remover."""
        self._listeners.append(listener)

        def remove() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return remove


async def pump_lines(stream: asyncio.StreamReader, bus: LogBus, source: str) -> None:
    """Read ``stream`` to EOF, publishing each line. Over-long lines are split, never fatal."""
    pending = b""
    while True:
        try:
            chunk = await stream.readuntil(b"\n")
        except asyncio.IncompleteReadError as exc:
            rest = pending + exc.partial
            if rest:
                bus.publish(rest.decode("utf-8", "replace").rstrip("\r\n"), source)
            return
        except asyncio.LimitOverrunError as exc:
            # A line longer than the reader's limit (SGLang's server_args=... line can be long):
            # take what is buffered and keep going.
            pending += await stream.readexactly(exc.consumed)
            if len(pending) > 1 << 20:
                bus.publish(pending.decode("utf-8", "replace"), source)
                pending = b""
            continue
        data = pending + chunk
        pending = b""
        bus.publish(data.decode("utf-8", "replace").rstrip("\r\n"), source)
