"""Taking runs back out of the reference series once a canary has confirmed garbage answers.

A server that answers garbage keeps /health at 200 and its token counts right, so the runs made
while it was broken complete and look like fine reference points, until the canary catches it.
Then every run that was still going after the last passing canary is suspect: its record in
``runs.jsonl`` is rewritten ``reference: false`` with ``reference_revoked`` naming the cause, it is
counted in ``sentinel_load_runs_excluded_total{reason="canary_failed"}``, and the profile's
last-run gauges go back to the newest run still standing (absent if none).

The request-latency histograms are cumulative and cannot take samples back; they keep them (a
canary failure is also a restart, which the dashboards mark).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from sglang_sentinel.atomic import atomic_write_bytes
from sglang_sentinel.log import get_logger
from sglang_sentinel.schedule.metrics import RunFigures, ScheduleMetrics
from sglang_sentinel.statedir import StateDir

__all__ = ["reference_figures", "revoke_reference"]

_log = get_logger(__name__)


def _suspect(record: dict[str, Any], since: float) -> bool:
    finished = record.get("finished_at")
    return (
        record.get("kind", "run") == "run"
        and record.get("reference") is True
        and isinstance(finished, int | float)
        and finished >= since
    )


def reference_figures(record: dict[str, Any]) -> RunFigures | None:
    """The last-run figures a run record holds (None: it holds none, or not all of them)."""
    summary = record.get("summary") or {}
    try:
        return RunFigures(
            float(summary["output_throughput"]),
            float(summary["total_throughput"]),
            float(summary["concurrency_mean"]),
            float(summary["concurrency_peak"]),
            bool(summary.get("client_bound", False)),
            float(record["finished_at"]),
        )
    except (KeyError, TypeError, ValueError):
        return None


def revoke_reference(
    state: StateDir,
    runs_file: str,
    metrics: ScheduleMetrics,
    recent: Iterable[dict[str, Any]],
    since: float,
    reason: str,
) -> int:
    """Mark reference runs that finished at or after ``since`` as not reference; how many."""
    records = state.history(runs_file)
    revoked = [r for r in records if _suspect(r, since)]
    if not revoked:
        return 0
    keys = {(r.get("profile"), r.get("started_at")) for r in revoked}
    for r in revoked:
        r["reference"] = False
        r["reference_revoked"] = reason
    # The scheduler's in-memory copies (the status page's "recent" list) say the same.
    for r in recent:
        if (r.get("profile"), r.get("started_at")) in keys and r.get("reference") is True:
            r["reference"] = False
            r["reference_revoked"] = reason
    lines = b"".join(
        json.dumps(r, sort_keys=True, default=str, separators=(",", ":")).encode() + b"\n" for r in records
    )
    try:
        # Same thread as every append (the event loop): no append can land between read and write.
        atomic_write_bytes(state.path / runs_file, lines)
    except OSError as exc:
        state.write_failures += 1
        _log.error("state_write_failed", file=runs_file, error=str(exc))
    for profile in sorted({str(r.get("profile")) for r in revoked}):
        n = sum(1 for r in revoked if r.get("profile") == profile)
        metrics.excluded.labels(profile, "canary_failed").inc(n)
        standing = [r for r in records if r.get("profile") == profile and r.get("reference") is True]
        figures = reference_figures(standing[-1]) if standing else None
        if figures is not None:
            metrics.set_figures(profile, figures)
        else:
            metrics.clear_figures(profile)
    _log.warning("reference_runs_revoked", runs=len(revoked), since=since, reason=reason)
    return len(revoked)
