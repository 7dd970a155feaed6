"""The hourly budget of synthetic tokens: a run is admitted only if it fits, so it is never exceeded.

Accounting unit: prompt + generated tokens, the cost the server pays. A run reserves its upper
bound before it starts (with ``ignore_eos`` the bound is exact); when it ends the reservation is
replaced by what it really spent. An entry counts against the budget from its start until one
hour after its *end*, so every one-hour window of real spending is covered, however long a run
lasts. Proof sketch: a new entry is admitted only if it fits beside everything that can still
overlap an hour with it, and entries only ever shrink.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from sglang_sentinel.schedule.ledger import BudgetLedger

__all__ = ["WINDOW_SECONDS", "Reservation", "TokenBudget"]

WINDOW_SECONDS = 3600.0


@dataclass
class Reservation:
    id: int
    start: float
    tokens: int
    # None while the run is going on; such an entry never expires.
    end: float | None = None
    key: str = ""  # the ledger's id ("" without a ledger)


class TokenBudget:
    def __init__(
        self,
        tokens_per_hour: int,
        clock: Callable[[], float] = time.time,
        ledger: BudgetLedger | None = None,
    ) -> None:
        self.tokens_per_hour = tokens_per_hour
        self._clock = clock
        self.ledger = ledger
        self._entries: dict[int, Reservation] = {}
        self._ids = itertools.count(1)

    def _expire(self, now: float) -> None:
        for key in [
            k for k, e in self._entries.items() if e.end is not None and e.end + WINDOW_SECONDS <= now
        ]:
            del self._entries[key]

    def spent(self, now: float | None = None) -> int:
        """Tokens that still count against the budget (finished within the hour, or running).

        Does not modify the ledger, so the exporter's scrape thread may call it at any time.
        """
        now = self._clock() if now is None else now
        # list(): one atomic copy under the GIL, even while the event loop adds an entry.
        entries = list(self._entries.values())
        return sum(e.tokens for e in entries if e.end is None or e.end + WINDOW_SECONDS > now)

    def remaining(self, now: float | None = None) -> int:
        return max(0, self.tokens_per_hour - self.spent(now))

    def reserve(self, tokens: int) -> Reservation | None:
        """Admit a run costing at most ``tokens``, or None when it does not fit."""
        now = self._clock()
        self._expire(now)
        if tokens < 0 or tokens > self.remaining(now):
            return None
        entry = Reservation(next(self._ids), now, tokens)
        if self.ledger is not None:
            entry.key = self.ledger.new_id()
            # Durable before a single request goes out; a disk that refuses means no run (a hard
            # bound that cannot be recorded is not one).
            if not self.ledger.reserve(entry.key, now, tokens):
                return None
        self._entries[entry.id] = entry
        return entry

    def settle(self, reservation: Reservation, actual_tokens: int) -> None:
        """The run ended having spent ``actual_tokens`` (clamped to the reservation)."""
        entry = self._entries.get(reservation.id)
        if entry is None:
            return
        entry.tokens = max(0, min(actual_tokens, entry.tokens))
        entry.end = self._clock()
        if self.ledger is not None and entry.key:
            self.ledger.settle(entry.key, entry.end, entry.tokens)
            if self.ledger.needs_compaction:
                self._expire(entry.end)
                self.ledger.compact(
                    [(e.key, e.start, e.end, e.tokens) for e in self._entries.values() if e.key]
                )

    def restore_ledger(self) -> float | None:
        """Reload the ledger (a killed run's reservation counts in full until an hour after now).

        Returns when the ledger began: runs of the history that started before it are not in it.
        """
        if self.ledger is None:
            return None
        now = self._clock()
        for key, start, end, tokens in self.ledger.load(now):
            if tokens > 0 and (end is None or end + WINDOW_SECONDS > now):
                entry = Reservation(next(self._ids), start, tokens, end, key)
                self._entries[entry.id] = entry
        self.ledger.compact([(e.key, e.start, e.end, e.tokens) for e in self._entries.values() if e.key])
        return self.ledger.created

    def restore(self, spent: Iterable[tuple[float, float, int]]) -> None:
        """Reload past spending ``(start, end, tokens)`` (from the run history) after a restart."""
        for start, end, tokens in spent:
            if tokens > 0:
                entry = Reservation(next(self._ids), start, tokens, end)
                self._entries[entry.id] = entry
        self._expire(self._clock())

    def set_limit(self, tokens_per_hour: int) -> None:
        """A new limit (config reload). Past spending keeps counting against it."""
        self.tokens_per_hour = tokens_per_hour
