"""The in-flight peak a load run is bound to reach, for tests that run against a real (simulated)
server on a box that may be busy.

A run whose first ``cap`` requests may all be sent at once (a closed loop of ``cap``, a burst) has
``cap`` requests in flight right after the cap-th send, less those already answered by then:
none on an idle box, so the peak is exactly ``cap`` there; but a starved client can take longer
to put its requests on the wire than a fast server takes to answer the first. The peak is at
least that figure and never above ``cap``; a test asserting ``peak == cap`` failed for the box's
load, not for the code. (Whether the first ``cap`` were sendable at once is the engine's own
record: ``ready == 0``, checked by the tests that have the records.)
"""

from __future__ import annotations

from collections.abc import Iterable


def guaranteed_peak(spans: Iterable[tuple[float, float | None]], cap: int) -> int:
    """``cap`` (or the number of requests, if fewer) less the requests answered by the cap-th
    send; ``spans`` are (sent, ended) pairs on one clock, ended None for one never answered."""
    ordered = sorted(spans, key=lambda span: span[0])
    cap = min(cap, len(ordered))
    if cap == 0:
        return 0
    last_send = ordered[cap - 1][0]
    # Ends at the very time of a send count first, as the run's own in-flight steps order them.
    answered = sum(1 for _, end in ordered if end is not None and end <= last_send)
    return cap - answered
