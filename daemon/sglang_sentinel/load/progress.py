"""``sentinel bench``'s live progress line on a terminal (stderr), without tqdm.

One line, redrawn in place twice a second::

    warm-up: done 1 | in flight 0 | 0.4 s
    done 13/40 | failed 0 | in flight 3 | 1,466 out tok/s | 4.2 s

and, when the run ends, replaced by a summary taken from the result (the same figures as the
result block that follows), ended with a newline so that the block starts on a clean line::

    done 40/40 | failed 0 | 2,491 out tok/s | 4.1 s

Counts come from the engine's per-request callback, not `LoadCounters.completed`, because the
counters include warm-up requests (a 40-prompt run would otherwise end at "done 41/40").
Output tokens are counted as they stream: the completed requests' tokens plus what the measured
requests in flight have received so far (`LoadCounters.streaming`, read from each parser at the
redraw, so the hot path does no extra work), over the measured time. A long run therefore shows
its rate from the first tokens on, not only once requests start to complete; the summary that
replaces the line at the end is the result's own output throughput (completed requests only).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, TextIO

from sglang_sentinel.load.records import FailureReason

if TYPE_CHECKING:
    from sglang_sentinel.load.records import LoadCounters, RequestRecord
    from sglang_sentinel.load.result import RunResult

__all__ = ["ProgressLine"]

# Redraws per second stay low: a terminal over SSH repaints every one, and the engine shares
# this event loop. Ticks are shorter so that the start of the measured phase is placed closely.
_REDRAW_S = 0.5
_TICK_S = 0.1


class ProgressLine:
    """The progress line for one run: `on_record` is the engine callback, `run` the drawing task."""

    def __init__(
        self,
        counters: LoadCounters,
        stream: TextIO,
        *,
        planned: int | None = None,
        duration_s: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        term: str | None = None,
    ) -> None:
        self._counters = counters
        self._stream = stream
        self._planned = planned
        self._duration_s = duration_s
        self._clock = clock
        # A dumb terminal (Emacs shell buffers, some CI log viewers) has no erase sequence:
        # the previous line is blanked with spaces instead.
        self._dumb = (term if term is not None else os.environ.get("TERM", "")) == "dumb"
        self._shown = 0  # length of the line on screen; 0: nothing drawn
        self._redraw_now = False  # a log line erased it: draw again at the next tick
        self._broken = False  # a write failed: the terminal is gone
        self.started = clock()
        self.measured_since: float | None = None
        self.warm_done = 0
        self.warm_records = 0
        self.done = 0
        self.failed = 0
        self.output_tokens = 0

    # ---- inputs ----

    def on_record(self, rec: RequestRecord) -> None:
        """The engine's `on_record`: count one finished request (warm-up ones separately)."""
        if rec.warmup:
            self.warm_records += 1
            self.warm_done += rec.success
        elif rec.success:
            self.done += 1
            self.output_tokens += rec.output_len
        elif rec.failure != FailureReason.CANCELLED:
            self.failed += 1

    # ---- drawing ----

    async def run(self) -> None:
        """Redraw until cancelled."""
        next_draw = self._clock() + _REDRAW_S  # a run that ends at once draws nothing
        while True:
            await asyncio.sleep(_TICK_S)
            now = self._clock()
            self._note_phase(now)
            if now >= next_draw or self._redraw_now:
                next_draw = now + _REDRAW_S
                self._redraw_now = False
                self.draw(self.line(now))

    def _note_phase(self, now: float) -> None:
        c = self._counters
        # Warm-up requests all finish before the measured phase sends anything, so a send
        # beyond them is the measured phase's first.
        if self.measured_since is None and not c.warmup and c.sent > self.warm_records:
            self.measured_since = now

    def line(self, now: float) -> str:
        c = self._counters
        elapsed = f"{now - self.started:.1f} s"
        if self.measured_since is None:
            return f"warm-up: done {self.warm_done} | in flight {c.in_flight} | {elapsed}"
        if self._duration_s is not None:
            elapsed = f"{now - self.measured_since:.1f}/{self._duration_s:g} s"
        streamed = self.output_tokens + sum(p.tokens_seen for p in c.streaming.values())
        rate = streamed / max(now - self.measured_since, 1e-3)
        return (
            f"done {self.done}{self._of()} | failed {self.failed} | in flight {c.in_flight} | "
            f"{rate:,.0f} out tok/s | {elapsed}"
        )

    def draw(self, text: str) -> None:
        text = text[: max(self._width() - 1, 10)]  # a wrapped line cannot be redrawn in place
        self._write(text)
        self._shown = max(len(text), 1)

    def clear(self) -> None:
        """Erase the line (before a log line is written, and when the run ends)."""
        if self._shown:
            self._write("", end="\r" if self._dumb else "")
            self._shown = 0

    def finish(self, result: RunResult | None) -> None:
        """Replace the live line with the run's summary and end it with a newline."""
        if result is None or result.warmup_failed:
            self.clear()  # the error message that follows says what happened
            return
        m = result.metrics
        parts = [f"done {m.completed}{self._of()}", f"failed {m.failed}"]
        if m.cancelled:
            parts.append(f"cancelled {m.cancelled}")
        parts += [f"{m.output_throughput:,.0f} out tok/s", f"{m.duration:.1f} s"]
        text = " | ".join(parts)[: max(self._width() - 1, 10)]
        self._write(text, end="\n")
        self._shown = 0

    def _of(self) -> str:
        return f"/{self._planned}" if self._planned is not None else ""

    def _write(self, text: str, end: str = "") -> None:
        if self._broken:
            return
        # Blank with spaces what the new text does not cover, where there is no erase sequence.
        erase = "\r" if self._dumb else "\r\033[K"
        pad = " " * max(self._shown - len(text), 0) if self._dumb else ""
        out = erase + text + pad
        try:
            self._stream.write(out + end)
            self._stream.flush()
        except (OSError, ValueError):
            # The terminal went away (closed window, dropped SSH session): the run goes on and
            # its results still reach --output-file; the line is not drawn again.
            self._broken = True

    def _width(self) -> int:
        # Asked at every redraw: the operator may resize the window mid-run.
        try:
            return os.get_terminal_size(self._stream.fileno()).columns or 80
        except (OSError, ValueError):
            return 80

    # ---- log lines ----

    @contextlib.contextmanager
    def logs_above(self) -> Iterator[None]:
        """While active, a log record written to our stream first erases the progress line.

        Without it a log line would be glued to the end of the progress line, and the next
        redraw's erase would wipe the log line's tail; the next tick redraws below it instead.
        """

        def guard(record: logging.LogRecord) -> bool:
            if self._shown:
                self.clear()
                self._redraw_now = True
            return True

        handlers = [h for h in logging.getLogger().handlers if getattr(h, "stream", None) is self._stream]
        for h in handlers:
            h.addFilter(guard)
        try:
            yield
        finally:
            for h in handlers:
                h.removeFilter(guard)
