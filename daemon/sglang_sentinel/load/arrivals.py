"""Planned send times, as offsets (seconds) from one absolute start.

Planning every send against the same start is what keeps the rate from drifting: a late
wake-up delays one request, not all that follow (bench_serving sleeps a relative gap after
each dispatch, so its delays accumulate).
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Iterator, Sequence

from sglang_sentinel.load.spec import ArrivalProcess, LoadSpec

__all__ = ["planned_offsets"]


def _poisson(rate: float, seed: int, count: int | None, exact: bool) -> Iterator[float]:
    rng = random.Random(seed)
    if count is not None and exact:
        yield from _rescaled(rng, rate, count)
        return
    # Free draws, as bench_serving: the achieved rate carries the sampling error of N
    # exponential gaps (about ±1/sqrt(N): ±2.2 % at N=2000).
    t = 0.0
    for i in itertools.count():
        if count is not None and i >= count:
            return
        yield t
        t += rng.expovariate(rate)


def _rescaled(rng: random.Random, rate: float, count: int) -> Iterator[float]:
    # `exact_rate`: the gaps are rescaled so that they average exactly 1/rate. This keeps the
    # spacing of a Poisson process (it is the process conditioned on its count over the run's
    # span: uniform order statistics) without the ±1/sqrt(N) error, which would otherwise hide
    # the client's own accuracy. vLLM's bench normalises its offsets the same way. Opt-in:
    # users comparing against bench_serving get its process unless they ask.
    gaps = [rng.expovariate(rate) for _ in range(count - 1)]
    total = sum(gaps)
    scale = ((count - 1) / rate) / total if total > 0 else 1.0
    t = 0.0
    yield t
    for g in gaps:
        t += g * scale
        yield t


def planned_offsets(spec: LoadSpec, trace: Sequence[float] = ()) -> Iterator[float]:
    """Offsets for the measured phase; endless when the run is bounded by duration only.

    TRACE replays `trace`, the dataset's own offsets (`PromptSource.trace_offsets`), read before
    the clock starts.

    CLOSED and BURST plan every request at 0: a closed loop's sends are then released by the
    concurrency gate (a freed slot), which the engine records as the time it could be sent.
    """
    if spec.arrival is ArrivalProcess.POISSON:
        return _poisson(spec.request_rate, spec.seed, spec.num_requests, spec.exact_rate)
    if spec.arrival is ArrivalProcess.TRACE:
        return iter(trace)
    if spec.arrival is ArrivalProcess.CONSTANT:
        gap = 1.0 / spec.request_rate
        return (i * gap for i in itertools.count())
    return itertools.repeat(0.0)
