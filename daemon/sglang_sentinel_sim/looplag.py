"""The simulator's own event-loop lag, so that load benchmarks can tell a lagging simulator from a
lagging client.

A task asks to wake every ``interval_s`` and records how late it woke: the time that anything else
ready on the loop (a forward's chunk writes, a ``/metrics`` render, request parsing) held it up.
That is the delay any request arriving or any chunk due at that moment also saw on the server
side. Real seconds (``--speed`` does not scale it).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from typing import Any

__all__ = ["LoopLag"]


class LoopLag:
    def __init__(self, interval_s: float = 0.01, window: int = 1000) -> None:
        self.interval_s = interval_s
        # The most recent `window` samples (10 s at the default interval) for the percentiles.
        self._recent: deque[float] = deque(maxlen=window)
        self.samples = 0
        self.max_s = 0.0
        self.last_s = 0.0

    async def run(self) -> None:
        """Sample until cancelled."""
        interval = self.interval_s
        clock = time.monotonic
        while True:
            due = clock() + interval
            await asyncio.sleep(interval)
            self.observe(max(0.0, clock() - due))

    def observe(self, lag_s: float) -> None:
        self.last_s = lag_s
        self.samples += 1
        self._recent.append(lag_s)
        if lag_s > self.max_s:
            self.max_s = lag_s

    def reset(self) -> None:
        """Forget the maximum and the window (``POST /reset`` starts a new measurement)."""
        self._recent.clear()
        self.samples = 0
        self.max_s = 0.0
        self.last_s = 0.0

    def to_json(self) -> dict[str, Any]:
        recent = sorted(self._recent)

        def pct(q: float) -> float:
            return recent[min(len(recent) - 1, int(q * len(recent)))] if recent else 0.0

        return {
            "interval_s": self.interval_s,
            "samples": self.samples,
            "last_s": self.last_s,
            "max_s": self.max_s,
            "window_samples": len(recent),
            "p50_s": pct(0.5),
            "p99_s": pct(0.99),
        }
