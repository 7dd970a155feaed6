"""A wait *for* a condition, with a deadline far beyond any busy box's delay.

tests/README.md's rule: a test waits for what it needs, never a fixed time, and the deadline is
only there so that a broken build fails instead of hanging. Hand-written loops of "100 tries of
50 ms" kept that shape but not the margin: five seconds is what a simulator's start or a reaped
process can take on the 2-core CI box under the whole suite, and a test that then asserted, or
went on as if the condition held, failed for the box's load and not for the code. One helper, so
that the deadline is chosen once.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

# Far beyond any wait a correct build needs on a loaded box; only a broken one reaches it.
DEADLINE_S = 60.0
_POLL_S = 0.02


async def until(cond: Callable[[], object], timeout_s: float = DEADLINE_S, what: str = "") -> None:
    """Return once ``cond()`` is true; AssertionError naming ``what`` after ``timeout_s``."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what or cond}")
        await asyncio.sleep(_POLL_S)


def until_sync(cond: Callable[[], object], timeout_s: float = DEADLINE_S, what: str = "") -> None:
    """``until`` for a test with no event loop (the condition is met by other threads)."""
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s:g} s waiting for {what or cond}")
        time.sleep(_POLL_S)
