"""Event-loop lag: how late the loop wakes a timer. The client's own health signal.

A task sleeps `interval` again and again and records how much later than asked it woke.
While the loop is busy (parsing, a blocking call somewhere), every timer and every socket read
waits as long, so these delays bound the error on every timestamp the run takes. Cost: one
wake-up per interval (about 100 per second by default), negligible next to the streams.
"""

from __future__ import annotations

import asyncio
import contextlib
import time

__all__ = ["LoopLagMonitor"]


class LoopLagMonitor:
    def __init__(self, interval: float = 0.01, max_samples: int = 1_000_000) -> None:
        self.interval = interval
        self.max_samples = max_samples  # about 2.8 h at 100/s; then it keeps the first ones
        self.lags: list[float] = []
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._probe(), name="sentinel-load-loop-lag")

    def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            self._task = None

    async def _probe(self) -> None:
        perf = time.perf_counter
        lags = self.lags
        with contextlib.suppress(asyncio.CancelledError):
            while True:
                planned = perf() + self.interval
                await asyncio.sleep(self.interval)
                if len(lags) < self.max_samples:
                    lags.append(max(perf() - planned, 0.0))
