"""What the supervisor shows the rest of the daemon: one immutable value, replaced whole.

The supervisor's own fields change on the event loop; scrapes (prometheus_client's threads), the
status page, ``/status.json`` and the scheduler's server view read only the latest
:class:`SupervisorSnapshot`, published by the loop once each state change, probe result,
preflight, crash or restart has been applied (the log-line counters: at most a second after a
line). A reader gets one consistent moment and never races the loop, the promise the collector
registry asks of every source.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, TypeVar

from sglang_sentinel.supervise.state import ServerState

if TYPE_CHECKING:
    from sglang_sentinel.sglang.versions import Version
    from sglang_sentinel.supervise.classify import Crash
    from sglang_sentinel.supervise.preflight import PreflightResult
    from sglang_sentinel.supervise.probes import ProbeResult

__all__ = ["FallbackView", "SupervisorSnapshot", "frozen"]

_K = TypeVar("_K")
_V = TypeVar("_V")


def frozen(mapping: Mapping[_K, _V]) -> Mapping[_K, _V]:
    """A read-only copy: a snapshot must not change after it was published."""
    return MappingProxyType(dict(mapping))


@dataclass(frozen=True, slots=True)
class FallbackView:
    """What the snapshot shows of the fallback (supervise/fallback.py), immutable; defined here
    so that the snapshot does not import the module that builds it."""

    enabled: bool
    source: str  # "configured" or "fallback": which command the current life runs
    configured_hash: str
    running_hash: str
    since: float | None  # wall clock of the fallback decision
    reason: str  # a FALLBACK_REASONS value ("" while configured)
    example: str  # what the configured launch answered (or its crash line)
    origin: str  # "history" or "table: <row key>"
    differences: tuple[str, ...]  # configured → fallback, one line per flag
    running_argv: tuple[str, ...]  # secrets masked
    fallbacks: Mapping[str, int]
    known_good: int  # records on this host
    unreadable: int  # known-good files or records set aside
    recent_failures: int  # correctness failures of the running launch within the window
    exhausted: str = ""  # why no fallback was possible (or "fallback failing too"), "" otherwise
    # The last launches: {"at", "argv_hash", "source", "argv"}, newest last.
    lives: tuple[Mapping[str, Any], ...] = ()
    # Saved decisions that no longer applied, by why (fallback.DISCARD_REASONS).
    discarded: Mapping[str, int] = field(default_factory=lambda: frozen({}))


@dataclass(frozen=True, slots=True)
class SupervisorSnapshot:
    mode: str
    profile: str
    config_hash: str
    sglang_version: Version | None
    state: ServerState
    since: float  # wall clock of the last state transition
    up: bool  # the last /health probe answered 200
    epoch: float | None  # when the current server became ready; None while it is not
    ready_timestamp: float | None  # when the current (or last) server became ready
    start_duration: float | None  # launch (or first sight) → ready, of the last start
    last_crash: Crash | None
    restarts: Mapping[str, int]
    crashes: Mapping[str, int]
    transitions: Mapping[tuple[str, str], int]
    probes: Mapping[str, ProbeResult]  # the last conclusive result of each probe
    # Probe -> conclusive failures in a row, for probes at their check's ``failures`` on this server.
    confirmed: Mapping[str, int]
    probe_failures: Mapping[tuple[str, str], int]  # (probe, reason)
    preflight: tuple[PreflightResult, ...]
    log_lines_total: int
    next_retry_at: float | None = None  # wall clock of the next start while RESTARTING
    # Who holds the server's port while a start waits for it (portowner.py); "" otherwise.
    port_holders: str = ""
    # Our stops that SIGTERM did not end within stop_timeout (the group SIGKILLed).
    stop_kills: int = 0
    # The fallback's state (supervise/fallback.py): which command runs, and why.
    fallback: FallbackView | None = None

    @property
    def ready_epoch(self) -> float | None:
        """The epoch while the server is ready (and only then)."""
        return self.epoch if self.state is ServerState.READY else None

    @property
    def started_warm(self) -> bool:
        """Found already serving: only a server sentinel did not start can be, and the supervisor
        knows a time-to-ready only when it saw the start (launched it, or saw the port refused)."""
        return self.mode != "child" and self.start_duration is None
