"""Planned send times, as offsets (seconds) from one absolute start.

Planning every send against the same start is what keeps the rate from drifting: a late
wake-up delays one request, not all that follow (bench_serving sleeps a relative gap after
each dispatch, so its delays accumulate).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator

from sentinel.load.spec import ArrivalProcess, LoadSpec

__all__ = ["planned_offsets"]


def _poisson(rate: float, seed: int, count: int | None) -> Iterator[float]:
    rng = random.Random(seed)
    if count is None:
        t = 0.0
        while True:
            yield t
            t += rng.expovariate(rate)
    # With a fixed count, the gaps are rescaled so that they average exactly 1/rate. This
    # keeps the spacing of a Poisson process (it is the process conditioned on its count over
    # the run's span: uniform order statistics), while the achieved rate no longer carries
    # the ±1/sqrt(N) sampling error of N free draws (±2.2% at N=2000), which would otherwise
    # hide the client's own accuracy. vLLM's bench normalises its offsets the same way.
    gaps = [rng.expovariate(rate) for _ in range(count - 1)]
    total = sum(gaps)
    scale = ((count - 1) / rate) / total if total > 0 else 1.0
    t = 0.0
    yield t
    for g in gaps:
        t += g * scale
        yield t


def planned_offsets(spec: LoadSpec) -> Iterator[float]:
    """Offsets for the measured phase; endless when the run is bounded by duration only.

    CLOSED and BURST plan every request at 0: a closed loop's sends are then released by the
    concurrency gate (a freed slot), which the engine records as the time it could be sent.
    """
    if spec.arrival is ArrivalProcess.POISSON:
        return _poisson(spec.request_rate, spec.seed, spec.num_requests)
    if spec.arrival is ArrivalProcess.CONSTANT:
        gap = 1.0 / spec.request_rate
        return (i * gap for i in itertools.count())
    return itertools.repeat(0.0)
