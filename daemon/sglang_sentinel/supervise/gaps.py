"""Time the daemon did not live through: a heartbeat that notices when the event loop was away.

A SIGSTOPped sentinel (a debugger, ``kill -STOP``, a frozen cgroup), a VM paused by its host or an
event loop blocked for seconds all look the same from inside: ``time.monotonic()`` jumped and
nothing was observed in between. CLOCK_MONOTONIC keeps running while a process is stopped (only a
suspend of the whole machine stops it, and then every window stops with it), so comparing clocks
cannot tell; what can is a tick that comes much later than it was scheduled.

Checks use :meth:`GapWatch.gap_since`: a probe that was in flight across a gap is inconclusive (its
timeout expired while nobody was reading the answer), and the stall window restarts after a gap, so
a stall verdict needs ``stall_after`` seconds of time the daemon actually observed.
"""

from __future__ import annotations

import asyncio
import time

from sglang_sentinel.log import get_logger

__all__ = ["GapWatch"]

_log = get_logger(__name__)


class GapWatch:
    """Event loop only. ``run()`` is the heartbeat task; without it no gap is ever reported."""

    def __init__(self, period_s: float = 0.5, threshold_s: float = 5.0) -> None:
        # A 5 s late tick: far beyond scheduling noise on a loaded host, far below any check window.
        self.period_s = period_s
        self.threshold_s = threshold_s
        self._last_tick = time.monotonic()
        self._last_gap_end: float | None = None
        self._last_gap_seconds = 0.0
        self._running = False
        self.gaps_total = 0
        self.gap_seconds_total = 0.0

    def _late(self, now: float) -> float:
        if not self._running:
            return 0.0  # no heartbeat, no verdict
        return now - self._last_tick - self.period_s

    def gap_since(self, t: float) -> bool:
        """Whether a gap ended after monotonic time ``t``, or one is under way (heartbeat not back yet)."""
        now = time.monotonic()
        if self._late(now) > self.threshold_s:
            return True
        return self._last_gap_end is not None and self._last_gap_end >= t

    def away_total(self) -> float:
        """Seconds spent in gaps so far, the one under way included: subtract two readings to
        take the absences out of a window (the startup deadline)."""
        late = self._late(time.monotonic())
        return self.gap_seconds_total + (late if late > self.threshold_s else 0.0)

    def tick(self) -> float | None:
        """One heartbeat; the length of the gap it ended, if any."""
        now = time.monotonic()
        late = self._late(now)
        self._last_tick = now
        if late <= self.threshold_s:
            return None
        self._last_gap_end = now
        self._last_gap_seconds = late
        self.gaps_total += 1
        self.gap_seconds_total += late
        _log.warning("daemon_time_gap", seconds=round(late, 1), note="checks re-observe before acting")
        return late

    async def run(self) -> None:
        self._last_tick = time.monotonic()
        self._running = True
        try:
            while True:
                await asyncio.sleep(self.period_s)
                self.tick()
        finally:
            self._running = False
