"""One server-wide figure from SGLang's per-rank scheduler series, whatever labels the server adds.

SGLang writes its scheduler gauges and counters (``sglang:num_running_reqs``,
``sglang:num_queue_reqs``, ``sglang:token_usage``, ``sglang:realtime_tokens_total`` …) once per
scheduler process, labelled with that process's ranks. Three launch options change how many
series one figure is spread over (see ``sglang_sentinel.sglang.versions``):

- ``--enable-priority-scheduling`` (0.5.23; observability/metrics_collector.py
  ``_log_gauge_queue_count``): the queue gauges are written once as the total under
  ``priority=""`` and once more per priority under ``priority="<n>"``. Summing every series counts
  each request twice; the total is the ``priority=""`` series.
- ``--enable-metrics-for-all-schedulers`` (0.5.9 scheduler_metrics_mixin.py L100, 0.5.23
  metrics_collector.py ``init_new``): every TP rank writes, not only attention-TP rank 0. The
  scheduler state is per data-parallel replica, so TP ranks (and the EP / PP ranks that share the
  replica's requests) carry duplicates of one figure.
- DP attention / ``--dp-size``: a ``dp_rank`` label per replica, each with its own requests.

So: keep the ``priority=""`` series when the label is present, group the rest by their labels
without the duplicate-carrying rank labels, take one series per group and sum over groups (the
replicas). Within a group the lowest ``tp_rank`` wins: that is the replica's attention-TP rank 0,
the one SGLang always writes (the others only under the flag, each at its own moment, so they can
lag); series without ``tp_rank`` fall back to the largest value.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

__all__ = ["DUPLICATE_RANK_LABELS", "LoadsTotals", "loads_totals", "server_total"]

#: Labels that differ between the scheduler processes of one data-parallel replica.
DUPLICATE_RANK_LABELS = frozenset({"tp_rank", "pp_rank", "moe_ep_rank", "attn_cp_rank", "attn_tp_rank"})

Sample = tuple[Mapping[str, str], float]


def server_total(samples: Iterable[Sample], across_replicas: Literal["sum", "max"] = "sum") -> float | None:
    """The server-wide value of one SGLang scheduler series; ``None`` when no finite sample.

    ``across_replicas="max"`` for ratios (``token_usage``: the fullest replica retracts first).
    """
    finite = [(labels, value) for labels, value in samples if math.isfinite(value)]
    if any("priority" in labels for labels, _ in finite):
        totals = [(labels, value) for labels, value in finite if labels.get("priority", "") == ""]
        # A server that printed only per-priority series (never seen, but then they are disjoint).
        finite = totals if totals else finite
        by_priority = not totals
    else:
        by_priority = False
    groups: dict[tuple[tuple[str, str], ...], tuple[float, float]] = {}
    for labels, value in finite:
        key = tuple(
            sorted(
                (k, v)
                for k, v in labels.items()
                if k not in DUPLICATE_RANK_LABELS and (by_priority or k != "priority")
            )
        )
        rank = labels.get("tp_rank", "")
        # Lower sorts first: -tp_rank for labelled series, then the value for unlabelled ones.
        order = -float(rank) if rank.isdigit() else -math.inf
        candidate = (order, value)
        previous = groups.get(key)
        groups[key] = candidate if previous is None else max(previous, candidate)
    if not groups:
        return None
    values = [value for _, value in groups.values()]
    return max(values) if across_replicas == "max" else sum(values)


@dataclass(frozen=True, slots=True)
class LoadsTotals:
    """Server-wide figures of one ``GET /v1/loads`` reply."""

    running: float
    waiting: float
    #: The fullest DP rank's KV usage; ``None`` when no entry reports it.
    token_usage: float | None
    #: ``aggregate`` (≤ 0.5.9 computed it server-side) or ``loads`` (summed here: 0.5.23 has no
    #: ``aggregate``; entrypoints/v1_loads.py).
    source: Literal["aggregate", "loads"]


def _number(value: object, what: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ValueError(f"/v1/loads: {what} is not a number")
    return float(value)


def loads_totals(document: object) -> LoadsTotals:
    """Totals of a ``/v1/loads`` JSON document. Raises ``ValueError`` naming the bad field."""
    if not isinstance(document, Mapping):
        raise ValueError("/v1/loads: not a JSON object")
    aggregate = document.get("aggregate")
    loads = document.get("loads")
    usage: float | None = None
    entries: list[Mapping[str, object]] = []
    if isinstance(loads, list):
        for entry in loads:
            if not isinstance(entry, Mapping):
                raise ValueError("/v1/loads: a loads entry is not an object")
            entries.append(entry)
        usages = [
            _number(e["token_usage"], "token_usage") for e in entries if e.get("token_usage") is not None
        ]
        usage = max(usages) if usages else None
    if isinstance(aggregate, Mapping) and "total_running_reqs" in aggregate:
        running = _number(aggregate.get("total_running_reqs"), "aggregate.total_running_reqs")
        waiting = _number(aggregate.get("total_waiting_reqs", 0), "aggregate.total_waiting_reqs")
        return LoadsTotals(running, waiting, usage, "aggregate")
    if entries:
        running = sum(_number(e.get("num_running_reqs"), "num_running_reqs") for e in entries)
        waiting = sum(_number(e.get("num_waiting_reqs", 0), "num_waiting_reqs") for e in entries)
        return LoadsTotals(running, waiting, usage, "loads")
    raise ValueError("/v1/loads: neither aggregate nor loads present")
