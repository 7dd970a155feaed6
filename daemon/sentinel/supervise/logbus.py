"""The server's log lines: kept on disk (size-rotated), in a tail for crash analysis, and fanned out.

Subscribers never slow the server: a child that blocks on a full stdout pipe stops serving, so
each subscription has a bounded queue and lines that do not fit are dropped and counted.
"""

from __future__ import annotations

import asyncio
import os
import time
from collections import deque
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from sentinel.log import get_logger
from sentinel.redact import redact

__all__ = ["LineListener", "LineSubscription", "LogBus", "LogLine", "RotatingFile", "pump_lines"]

_log = get_logger(__name__)


@dataclass(frozen=True, slots=True)
class LogLine:
    text: str  # without the trailing newline
    timestamp: float  # wall clock when sentinel read it
    source: str  # "child" (stdout+stderr of a managed child) or "journal"


LineListener = Callable[[LogLine], None]


class LineSubscription:
    """An async iterator over new lines. Close it (or use ``async with``) when done."""

    def __init__(self, bus: LogBus, maxsize: int) -> None:
        self._bus = bus
        self._queue: asyncio.Queue[LogLine | None] = asyncio.Queue(maxsize)
        self.dropped = 0

    def _offer(self, line: LogLine) -> None:
        try:
            self._queue.put_nowait(line)
        except asyncio.QueueFull:
            self.dropped += 1
            self._bus.dropped_total += 1

    def close(self) -> None:
        self._bus._unsubscribe(self)
        # Wake a pending reader even when the queue is full.
        while True:
            try:
                self._queue.put_nowait(None)
                return
            except asyncio.QueueFull:
                self._queue.get_nowait()
                self.dropped += 1

    def __aiter__(self) -> AsyncIterator[LogLine]:
        return self

    async def __anext__(self) -> LogLine:
        item = await self._queue.get()
        if item is None:
            raise StopAsyncIteration
        return item

    async def __aenter__(self) -> LineSubscription:
        return self

    async def __aexit__(self, *exc: object) -> None:
        self.close()


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
        self._subs: list[LineSubscription] = []
        self._listeners: list[LineListener] = []
        self.lines_total = 0
        self.write_errors_total = 0
        self.listener_errors_total = 0
        # Lines not delivered to a subscriber whose queue was full (cumulative, all subscribers).
        self.dropped_total = 0
        self._file: RotatingFile | None = None
        self._flush_interval = flush_interval
        self._flush_pending: asyncio.TimerHandle | None = None
        self._closed = False
        self.log_file = log_file
        if log_file is not None:
            try:
                self._file = RotatingFile(log_file, max_bytes, backups)
            except OSError as exc:
                # Losing the file copy must not stop supervision: lines still reach the tail/subscribers.
                _log.error("cannot open server log file", path=str(log_file), error=str(exc))

    def close(self) -> None:
        """Flush and close the file; every subscription ends (now and any made later)."""
        self._closed = True
        if self._flush_pending is not None:
            self._flush_pending.cancel()
            self._flush_pending = None
        if self._file is not None:
            try:
                self._file.close()
            except OSError:
                self.write_errors_total += 1
            self._file = None
        for sub in list(self._subs):
            sub.close()

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
        # Redacted once here, so server.log, the crash tail, listeners and subscribers all get the
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
                        "log line listener failed", listener=repr(listener), errors=self.listener_errors_total
                    )
        for sub in list(self._subs):
            sub._offer(line)

    def tail(self, n: int | None = None) -> list[str]:
        lines = list(self._tail)
        return lines if n is None else lines[-n:]

    def clear_tail(self) -> None:
        """Forget the previous run's lines so a new crash is classified by its own tail."""
        self._tail.clear()

    def subscribe(self, maxsize: int = 10000) -> LineSubscription:
        sub = LineSubscription(self, maxsize)
        if self._closed:
            sub.close()  # nothing more will come: iterating it ends at once instead of hanging
        else:
            self._subs.append(sub)
        return sub

    def _unsubscribe(self, sub: LineSubscription) -> None:
        if sub in self._subs:
            self._subs.remove(sub)

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
