"""Honest comparison: a figure with its spread, and a winner only beyond the spread.

The spread of a figure is the min/max over its repeated measurements (``low``/``high``, ``n``
repeats): with the three or so repeats a tune can afford, an interval estimate would rest on a
variance it cannot know, while min/max claims nothing it did not see. One measurement has no
spread of its own; it borrows ``noise_floor`` (a relative half-width, default 5%: what repeated
calibrations of an unchanged simulated server moved by) so that a single lucky step cannot win.

Two configurations differ significantly when their intervals do not overlap: the slower one's
``high`` is below the faster one's ``low``. Otherwise: "no significant difference", and the
baseline (or, between two others, the one measured first, i.e. the cheaper default) is kept.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

__all__ = ["DEFAULT_NOISE_FLOOR", "Spread", "Verdict", "judge", "spread_of"]

DEFAULT_NOISE_FLOOR = 0.05


@dataclass(frozen=True, slots=True)
class Spread:
    mean: float
    low: float
    high: float
    n: int

    def as_dict(self) -> dict[str, Any]:
        return {"mean": self.mean, "low": self.low, "high": self.high, "n": self.n}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Spread:
        return cls(float(data["mean"]), float(data["low"]), float(data["high"]), int(data["n"]))

    def text(self, fmt: str = ".1f") -> str:
        return f"{self.mean:{fmt}} [{self.low:{fmt}}, {self.high:{fmt}}]"


def spread_of(values: Sequence[float], noise_floor: float = DEFAULT_NOISE_FLOOR) -> Spread | None:
    """min/max of the repeats; a single value gets +-noise_floor (relative). None for none."""
    if not values:
        return None
    mean = sum(values) / len(values)
    low, high = min(values), max(values)
    if len(values) == 1:
        low, high = mean * (1 - noise_floor), mean * (1 + noise_floor)
    return Spread(mean, low, high, len(values))


@dataclass(frozen=True, slots=True)
class Verdict:
    significant: bool
    better: str  # the id that wins (the kept one when not significant)
    reason: str


def judge(
    a_id: str, a: Spread, b_id: str, b: Spread, *, preferred: str | None = None, unit: str = "tok/s"
) -> Verdict:
    """Which of two configurations is faster (higher is better), and whether beyond the spread.

    ``preferred`` (the baseline, else the first) is kept when the intervals overlap.
    """
    fast_id, fast, slow_id, slow = (a_id, a, b_id, b) if a.mean >= b.mean else (b_id, b, a_id, a)
    if slow.high < fast.low:
        return Verdict(
            True,
            fast_id,
            f"{fast_id} output throughput {fast.text()} {unit} beats {slow_id} {slow.text()} "
            "beyond the spread",
        )
    keep = preferred if preferred in (a_id, b_id) else a_id
    other = b_id if keep == a_id else a_id
    return Verdict(
        False,
        keep,
        f"no significant difference: {a_id} {a.text()} and {b_id} {b.text()} {unit} overlap; "
        f"keeping {keep}"
        + (" (the baseline)" if keep == preferred else " (measured first)")
        + f" over {other}",
    )
