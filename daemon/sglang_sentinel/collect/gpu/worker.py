"""A thread that runs one job at a time and can be abandoned while it is stuck.

``concurrent.futures.ThreadPoolExecutor`` joins its threads at interpreter exit, so one NVML call
wedged in the driver would keep the daemon from ever exiting. These are daemon threads: a stuck
job keeps its thread (at most one per GPU, since a busy worker takes no new job) and the process
can still stop.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

__all__ = ["Worker"]

_STOP = object()


class Worker:
    def __init__(self, name: str) -> None:
        self.name = name
        self._jobs: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._current: Future[Any] | None = None
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    @property
    def busy(self) -> bool:
        """True while the last job submitted has not finished (it may be wedged)."""
        return self._current is not None and not self._current.done()

    def submit(self, fn: Callable[[], Any]) -> Future[Any] | None:
        """Queue ``fn``; None when the previous job is still running (nothing is queued then)."""
        if self.busy:
            return None
        future: Future[Any] = Future()
        self._current = future
        self._jobs.put((fn, future))
        return future

    def stop(self, timeout: float) -> bool:
        """Ask the thread to end; True when it did within ``timeout`` (False: abandoned)."""
        self._jobs.put(_STOP)
        self._thread.join(timeout)
        return not self._thread.is_alive()

    def _run(self) -> None:
        while True:
            item = self._jobs.get()
            if item is _STOP:
                return
            fn, future = item
            if not future.set_running_or_notify_cancel():
                continue
            try:
                result = fn()
            except BaseException as exc:
                future.set_exception(exc)
            else:
                future.set_result(result)
