"""When the canaries confirm garbage: tell whoever measured the server meanwhile.

A server answering garbage keeps /health at 200, so the runs made while it was broken look fine.
Once a canary has failed on its *answer* (wrong_answer, garbage_*) ``failures`` times in a row, the
listeners get the start of the doubt: the wall-clock time of the last passing canary round (or
the server's ready time when none passed). A timeout or a 503 says nothing about the answers and
does not count.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

from sglang_sentinel.log import get_logger
from sglang_sentinel.supervise.probes import ProbeResult

__all__ = ["GarbageListener", "GarbageWatch"]

_log = get_logger(__name__)

# (since, reason); the return value is ignored.
GarbageListener = Callable[[float, str], object]


class GarbageWatch:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self._listeners: list[GarbageListener] = []
        self._fails: Counter[str] = Counter()
        self._pass_at: float | None = None
        self._confirmed = False  # told already; the next pass starts a new doubt

    def add_listener(self, listener: GarbageListener) -> None:
        self._listeners.append(listener)

    def new_life(self) -> None:
        """A new server process: its garbage is a new confirmation (the fallback counts them per
        life); the last pass stays the start of the doubt."""
        self._fails.clear()
        self._confirmed = False

    def observe(self, result: ProbeResult, now: float, ready_at: float | None) -> None:
        """One canary result (``now``: wall clock)."""
        if result.ok:
            self._fails[result.probe] = 0
            if not any(self._fails.values()):
                self._pass_at = now
                self._confirmed = False
            return
        about_answer = result.reason == "wrong_answer" or result.reason.startswith("garbage")
        if not result.conclusive or not about_answer:
            return
        self._fails[result.probe] += 1
        if self._fails[result.probe] < self.failures or self._confirmed:
            return
        self._confirmed = True
        since = self._pass_at if self._pass_at is not None else (ready_at or 0.0)
        reason = f"{result.probe}: {result.reason}"
        _log.warning("canary_garbage_confirmed", probe=result.probe, reason=result.reason, since=since)
        for listener in list(self._listeners):
            try:
                listener(since, reason)
            except Exception:
                _log.exception("canary_garbage_listener_failed", listener=repr(listener))
