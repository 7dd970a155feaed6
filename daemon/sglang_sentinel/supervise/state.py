"""The server's lifecycle states and the record of every transition."""

from __future__ import annotations

import asyncio
import enum
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from sglang_sentinel.log import get_logger

__all__ = ["ServerState", "StateChange", "StateListener", "StateMachine"]

_log = get_logger(__name__)


class ServerState(enum.StrEnum):
    STOPPED = "stopped"  # not running (or, external mode: not answering at all)
    STARTING = "starting"  # launched, port still refusing connections (weights loading)
    WARMING = "warming"  # port open, /health answers 503 (warm-up)
    READY = "ready"  # /health 200 and checks passing
    # A multi-node group's rank >= 1: process up and joined (its log), no API (supervise/member.py).
    RUNNING = "running"
    UNHEALTHY = "unhealthy"  # was ready, a check is failing now
    RESTARTING = "restarting"  # stopped on purpose or crashed; waiting out the backoff
    FAILED = "failed"  # crash loop or unrecoverable start failure; needs a manual reset


@dataclass(frozen=True, slots=True)
class StateChange:
    old: ServerState
    new: ServerState
    reason: str
    timestamp: float  # wall clock, seconds since the epoch


StateListener = Callable[[StateChange], None]


class StateMachine:
    """Current state, transition counts and listeners. Every transition is logged."""

    def __init__(self) -> None:
        self._state = ServerState.STOPPED
        self._since = time.time()
        self._listeners: list[StateListener] = []
        self.transitions: Counter[tuple[str, str]] = Counter()
        self._waiters: list[tuple[frozenset[ServerState], asyncio.Future[ServerState]]] = []

    @property
    def state(self) -> ServerState:
        return self._state

    @property
    def since(self) -> float:
        """Wall-clock time of the last transition."""
        return self._since

    def subscribe(self, listener: StateListener) -> Callable[[], None]:
        """Call ``listener`` on every transition (synchronously; keep it quick). Returns an unsubscribe."""
        self._listeners.append(listener)

        def unsubscribe() -> None:
            if listener in self._listeners:
                self._listeners.remove(listener)

        return unsubscribe

    def set(self, new: ServerState, reason: str) -> None:
        old = self._state
        if new is old:
            return
        self._state = new
        self._since = time.time()
        self.transitions[(old.value, new.value)] += 1
        change = StateChange(old, new, reason, self._since)
        level = _log.warning if new in (ServerState.UNHEALTHY, ServerState.FAILED) else _log.info
        level("server_state_changed", old=old.value, new=new.value, reason=reason)
        for listener in list(self._listeners):
            try:
                listener(change)
            except Exception:
                _log.exception("state_listener_failed", listener=repr(listener))
        for states, fut in list(self._waiters):
            if new in states and not fut.done():
                fut.set_result(new)

    async def wait_for(self, *states: ServerState, timeout_s: float | None = None) -> ServerState:
        """Wait until the state is one of ``states``; raises TimeoutError."""
        if self._state in states:
            return self._state
        fut: asyncio.Future[ServerState] = asyncio.get_running_loop().create_future()
        entry = (frozenset(states), fut)
        self._waiters.append(entry)
        try:
            # Not wait_for: on Python 3.11 it drops a cancellation that races with the state change.
            async with asyncio.timeout(timeout_s):
                return await fut
        finally:
            self._waiters.remove(entry)
