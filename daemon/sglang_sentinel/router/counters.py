"""The router's error counters, summed from its metrics port into what an operator alerts on.

smg 1.13.0 labels its retry counters by ``worker_type`` and ``endpoint`` only, and its upstream
responses by ``router_type``, ``status_code`` and ``error_code``: neither names a worker, so both
sums are router-wide. The one per-worker failure count is the circuit breaker's
(``smg_worker_cb_outcomes_total{worker, outcome="failure"}``: 5xx answers and failed connections).
Parsing only; a malformed value raises ``ValueError`` like the rest of :mod:`sglang_sentinel.router`.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric

__all__ = ["UPSTREAM_SOURCES", "RouterCounters", "parse_counters"]

# error_code is empty when the worker itself answered; the gateway fills it in for the answers it
# made up (call_upstream_connection_failed, no_available_workers, ...).
UPSTREAM_SOURCES = ("worker", "gateway")


@dataclass(frozen=True, slots=True)
class RouterCounters:
    retries_exhausted: float = 0.0
    upstream_5xx: dict[str, float] = field(default_factory=lambda: dict.fromkeys(UPSTREAM_SOURCES, 0.0))
    worker_failures: dict[str, float] = field(default_factory=dict)  # worker URL -> breaker failures


def _count(value: float) -> float:
    # A counter is a finite count >= 0: a router's NaN, infinity or negative value is malformed
    # (ValueError, counted as a failed read like any other), never exported.
    if not math.isfinite(value) or value < 0:
        raise ValueError(f"router counter value {value!r} is not a count")
    return value


def parse_counters(families: Iterable[Metric]) -> RouterCounters:
    """Sum the smg counter families (already parsed from the metrics text) sentinel exports."""
    exhausted = 0.0
    upstream = dict.fromkeys(UPSTREAM_SOURCES, 0.0)
    failures: dict[str, float] = {}
    for family in families:
        # The text parser names a counter family without _total; its samples keep it.
        if family.name == "smg_worker_retries_exhausted":
            exhausted += sum(_count(s.value) for s in family.samples if s.name.endswith("_total"))
        elif family.name == "smg_router_upstream_responses":
            for s in family.samples:
                if s.name.endswith("_total") and s.labels.get("status_code", "").startswith("5"):
                    upstream["gateway" if s.labels.get("error_code") else "worker"] += _count(s.value)
        elif family.name == "smg_worker_cb_outcomes":
            for s in family.samples:
                worker = s.labels.get("worker")
                if worker and s.name.endswith("_total") and s.labels.get("outcome") == "failure":
                    failures[worker] = failures.get(worker, 0.0) + _count(s.value)
    return RouterCounters(exhausted, upstream, failures)
