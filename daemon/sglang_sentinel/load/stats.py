"""Summary statistics with numpy's conventions, without numpy.

bench_serving computes its figures with numpy: `np.mean`, `np.median`, `np.std` (population,
ddof=0) and `np.percentile` (linear interpolation between closest ranks). The same conventions
are used here so that our figures are comparable digit for digit; like bench_serving, an empty
sample summarises to zeros.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Sequence
from dataclasses import asdict, dataclass

__all__ = ["Summary", "percentile", "summarize"]


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """`np.percentile(values, q)` (method "linear") of an already sorted, non-empty sequence."""
    n = len(sorted_values)
    if n == 1:
        return float(sorted_values[0])
    rank = (q / 100.0) * (n - 1)
    lo = math.floor(rank)
    hi = min(lo + 1, n - 1)
    frac = rank - lo
    return float(sorted_values[lo] + (sorted_values[hi] - sorted_values[lo]) * frac)


@dataclass(frozen=True, slots=True)
class Summary:
    """Distribution of one quantity, in its base unit (seconds, tokens, tokens/s...)."""

    count: int
    mean: float
    median: float
    std: float
    p90: float
    p95: float
    p99: float
    max: float

    def as_dict(self) -> dict[str, float | int]:
        return asdict(self)


_EMPTY = Summary(0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


def summarize(values: Sequence[float]) -> Summary:
    if not values:
        return _EMPTY
    ordered = sorted(values)
    n = len(ordered)
    mean = math.fsum(ordered) / n
    # E[x^2] - mean^2 with exact (fsum) sums: one C-level pass; clamped against rounding.
    var = max(math.fsum(map(operator.mul, ordered, ordered)) / n - mean * mean, 0.0)
    return Summary(
        count=n,
        mean=mean,
        median=percentile(ordered, 50.0),
        std=math.sqrt(var),
        p90=percentile(ordered, 90.0),
        p95=percentile(ordered, 95.0),
        p99=percentile(ordered, 99.0),
        max=float(ordered[-1]),
    )
