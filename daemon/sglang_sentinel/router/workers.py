"""The router's worker pool from ``/workers`` and its breaker states from its metrics port.

Parsing only: the input is whatever the router (or something pretending to be one) sent, so a
malformed reply raises ``ValueError`` naming what was wrong, never ``KeyError``/``TypeError``.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.router.counters import RouterCounters

__all__ = [
    "BREAKER_STATES",
    "RouterSnapshot",
    "WorkerView",
    "breakers_of",
    "parse_breakers",
    "parse_workers",
]

# smg_worker_cb_state's values (its HELP text: "0=closed, 1=open, 2=half_open").
BREAKER_STATES = {0: "closed", 1: "open", 2: "half_open"}


@dataclass(frozen=True, slots=True)
class WorkerView:
    url: str
    healthy: bool
    status: str  # the router's own word: ready, not_ready, failed, ...
    # None: the router's metrics port was not read (or does not list this worker).
    breaker: str | None = None

    @property
    def routable(self) -> bool:
        # Half-open lets a trial request through, but the router does not route traffic there:
        # only a closed breaker counts.
        return self.healthy and self.breaker in (None, "closed")

    @property
    def state(self) -> str:
        """One of routable / breaker_open / unhealthy: the pool splits into these, no overlap."""
        if not self.healthy:
            return "unhealthy"
        return "routable" if self.routable else "breaker_open"


WORKER_STATES = ("routable", "breaker_open", "unhealthy")


@dataclass(frozen=True, slots=True)
class RouterSnapshot:
    """One read of a router: immutable, shared with the scrape threads as is."""

    ready: bool  # /readiness 200
    workers: tuple[WorkerView, ...]
    breakers_read: bool  # the metrics port answered
    timestamp: float  # wall clock of the read
    # The router's error counters; None when its metrics port was not read.
    counters: RouterCounters | None = None

    def routable(self, url: str) -> bool:
        return any(w.url == url and w.routable for w in self.workers)

    def counts(self) -> dict[str, int]:
        out = dict.fromkeys(WORKER_STATES, 0)
        for w in self.workers:
            out[w.state] += 1
        return out


def parse_workers(data: Any) -> list[tuple[str, bool, str]]:
    """(url, is_healthy, status) of each worker in a ``GET /workers`` reply."""
    if not isinstance(data, dict) or not isinstance(data.get("workers"), list):
        raise ValueError("/workers: expected an object with a 'workers' list")
    out = []
    for i, w in enumerate(data["workers"]):
        if not isinstance(w, dict):
            raise ValueError(f"/workers: workers[{i}] is not an object")
        url, healthy = w.get("url"), w.get("is_healthy")
        if not isinstance(url, str) or not url:
            raise ValueError(f"/workers: workers[{i}].url missing or not a string")
        if not isinstance(healthy, bool):
            raise ValueError(f"/workers: workers[{i}].is_healthy missing or not a boolean")
        status = w.get("status")
        out.append((url, healthy, status if isinstance(status, str) else "unknown"))
    return out


def parse_breakers(text: str) -> dict[str, str]:
    """worker URL -> breaker state, from the router's ``/metrics`` text (smg_worker_cb_state)."""
    return breakers_of(text_string_to_metric_families(text))


def breakers_of(families: Iterable[Metric]) -> dict[str, str]:
    """:func:`parse_breakers` of families already parsed (the reader parses the text once)."""
    out: dict[str, str] = {}
    for family in families:
        if family.name != "smg_worker_cb_state":
            continue
        for s in family.samples:
            worker = s.labels.get("worker")
            if worker:
                out[worker] = BREAKER_STATES.get(int(s.value), "unknown")
    return out
