"""When to restart: exponential backoff with jitter, and the crash-loop limit."""

from __future__ import annotations

import random
from collections import deque

from sglang_sentinel.supervise.settings import RestartSettings

__all__ = ["RestartPolicy"]


class RestartPolicy:
    """Decides the delay before each restart and when to give up (crash loop → failed state).

    The backoff grows with restarts that were not separated by ``stable_after`` seconds of
    readiness; the crash-loop limit counts every restart within ``window``.
    """

    def __init__(self, settings: RestartSettings, rng: random.Random | None = None) -> None:
        self._s = settings
        self._rng = rng or random.Random()
        self._times: deque[float] = deque()
        self._attempt = 0

    @property
    def attempt(self) -> int:
        """Consecutive restarts without a stable ready period."""
        return self._attempt

    def reset(self) -> None:
        self._times.clear()
        self._attempt = 0

    def mark_stable(self) -> None:
        self._attempt = 0

    def restarts_in_window(self, now: float) -> int:
        while self._times and now - self._times[0] > self._s.window:
            self._times.popleft()
        return len(self._times)

    def snapshot(self, now: float, wall_now: float) -> dict[str, object]:
        """The history as wall-clock timestamps, to survive a restart of sentinel itself."""
        self.restarts_in_window(now)
        return {"restarts": [wall_now - (now - t) for t in self._times], "attempt": self._attempt}

    def restore(self, data: dict[str, object], now: float, wall_now: float) -> None:
        """Load a :meth:`snapshot`; entries that are malformed or outside the window are dropped."""
        restarts = data.get("restarts")
        attempt = data.get("attempt")
        if isinstance(restarts, list):
            times = [now - (wall_now - float(t)) for t in restarts if isinstance(t, int | float)]
            self._times = deque(sorted(t for t in times if 0 <= now - t <= self._s.window))
        if isinstance(attempt, int) and attempt >= 0:
            self._attempt = attempt

    def next_delay(self, now: float) -> float | None:
        """Record a restart; the delay before it, or None for a crash loop (stop restarting)."""
        if self.restarts_in_window(now) >= self._s.max_restarts:
            return None
        self._times.append(now)
        self._attempt += 1
        base = self._s.backoff_initial * self._s.backoff_multiplier ** (self._attempt - 1)
        base = min(base, self._s.backoff_max)
        # Jitter keeps several sentinels (or a sentinel and systemd) from restarting in lock-step.
        factor = 1.0 + self._rng.uniform(-self._s.jitter, self._s.jitter)
        return max(0.0, base * factor)
