"""Task helpers of the supervisor: cancellation that cannot be lost, waiting on either of two.

Python 3.11's ``asyncio.wait_for`` can drop a cancellation; the supervisor's ``stop()`` must
never hang on a task that lost one, so cancellation here is repeated until the task has ended.
"""

from __future__ import annotations

import asyncio
from typing import Any

from sglang_sentinel.log import get_logger

__all__ = ["cancel_all", "cancel_and_wait", "either"]

_log = get_logger(__name__)

# How long a cancelled task gets before it is cancelled again.
_RECANCEL_AFTER = 5.0


async def cancel_and_wait(task: asyncio.Task[Any]) -> None:
    """Cancel ``task`` and wait until it has ended.

    Python 3.11's ``asyncio.wait_for`` returns the result and drops a cancellation that arrives
    just as the awaited thing completes (this package uses ``asyncio.timeout`` for that reason,
    libraries may not); a task that lost its cancel would be awaited forever (a hung ``stop()``),
    so the cancel is repeated until the task ends.
    """
    if task.done():
        return
    while not task.done():
        task.cancel()
        await asyncio.wait([task], timeout=_RECANCEL_AFTER)
    if not task.cancelled() and (exc := task.exception()) is not None:
        _log.error("task_failed_while_cancelled", task=task.get_name(), error=repr(exc))


def either(a: asyncio.Future[Any], b: asyncio.Future[Any]) -> list[asyncio.Future[Any]]:
    return [a, b]


async def cancel_all(tasks: list[asyncio.Task[None]]) -> None:
    for t in tasks:
        t.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)
    tasks.clear()
