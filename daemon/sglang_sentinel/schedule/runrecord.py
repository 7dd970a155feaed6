"""What a finished run leaves behind: its series, its history record, its log line.

Kept apart from the scheduler's job and slot logic: this is pure accounting (no awaits, no
decisions), the part of a run that tests and the status page read back.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sglang_sentinel.load.records import LoadCounters
from sglang_sentinel.log import get_logger
from sglang_sentinel.schedule.metrics import ScheduleMetrics
from sglang_sentinel.schedule.plan import RunPlan, RunReport

__all__ = ["RunContext", "account_run", "iso", "report_from_counters"]

_log = get_logger(__name__)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


@dataclass(frozen=True, slots=True)
class RunContext:
    """The circumstances of one run, fixed before it started."""

    started: float
    finished: float
    epoch: float  # the server life's ready time
    launch_hash: str | None
    reference: bool  # eligible for the reference series (full size, outside the restart window)
    foreign: int | None  # foreign requests seen by the polite check before the run
    budget_tokens: int  # what the budget was charged
    # Why the run's own observations cannot be trusted, or None: "time_gap" (sentinel was away
    # during it: SIGSTOP, a VM freeze, a blocked loop; its clocks ran, it did not watch).
    untrusted: str | None = None


def account_run(
    metrics: ScheduleMetrics,
    plan: RunPlan,
    report: RunReport | None,
    outcome: str,
    abort_reason: str | None,
    ctx: RunContext,
) -> dict[str, Any]:
    """Count the run in its series and return its history record (also logged)."""
    profile = plan.profile
    m = metrics
    m.runs.labels(profile, outcome).inc()
    if abort_reason is not None:
        m.aborts.labels(profile, abort_reason).inc()
    if report is not None:
        for key, count in report.requests.items():
            if count:
                m.requests.labels(profile, key).inc(count)
        m.output_tokens.labels(profile).inc(report.output_tokens)
        m.input_tokens.labels(profile).inc(report.input_tokens)
    # A run during which sentinel was away is recorded with its figures but is no reference: its
    # clocks ran while nobody read the answers, so its throughput says nothing about the server.
    # (A client-bound run stays one, flagged by sentinel_load_client_bound, which the alerts read.)
    untrusted = ctx.untrusted
    eligible = ctx.reference and outcome == "completed" and report is not None and report.figures is not None
    is_reference = eligible and untrusted is None
    excluded_reason: str | None = None
    if outcome == "completed" and not is_reference:
        if not plan.full_size:
            excluded_reason = "shrunk"
        elif not ctx.reference:
            excluded_reason = "restart_window"
        else:
            excluded_reason = untrusted or "restart_window"
        m.excluded.labels(profile, excluded_reason).inc()
    energy = report.energy if report is not None else None
    if energy is not None and energy.get("joules_per_output_token") is None and energy.get("reason"):
        m.energy_unavailable.labels(profile, str(energy["reason"])).inc()
    if is_reference and report is not None and report.figures is not None:
        m.set_figures(profile, report.figures)
        m.observe(profile, report.timings)
        if energy is not None:
            m.set_energy(profile, energy)
    record: dict[str, Any] = {
        "kind": "run",
        "profile": profile,
        "outcome": outcome,
        "abort_reason": abort_reason,
        "started_at": ctx.started,
        "finished_at": ctx.finished,
        "started_at_iso": iso(ctx.started),
        "reference": is_reference,
        "scale": round(plan.scale, 4),
        "num_prompts": plan.num_prompts,
        "request_rate": plan.request_rate,
        "foreign_requests": ctx.foreign,
        "server_epoch": ctx.epoch,
        "launch_hash": ctx.launch_hash,
        "budget_tokens": ctx.budget_tokens,
        # Why a completed run is not a reference (shrunk, restart_window, time_gap).
        "excluded_reason": excluded_reason,
        "untrusted": untrusted,
    }
    failures = report.failures if report is not None else {}
    notes = report.notes if report is not None else []
    if report is not None:
        record.update(
            requests=report.requests,
            input_tokens=report.input_tokens,
            output_tokens=report.output_tokens,
            summary=report.summary,
        )
    if energy is not None:
        record["energy"] = energy
    if failures or notes:
        record.update(failure_reasons=failures, notes=notes)
    # A run that failed or was aborted is something an operator must see, with its cause.
    level = _log.info if outcome in ("completed", "cancelled") else _log.warning
    level(
        "load_run_end",
        profile=profile,
        outcome=outcome,
        abort_reason=abort_reason,
        reference=is_reference,
        **({"untrusted": untrusted} if untrusted else {}),
        seconds=round(ctx.finished - ctx.started, 3),
        output_throughput=(report.summary.get("output_throughput") if report else None),
        joules_per_output_token=(energy or {}).get("joules_per_output_token"),
        # The load generator, not the server, limited the run: its figures stay off the
        # throughput-drop alert (sentinel_load_client_bound), and the reasons say why.
        client_bound=bool(report.summary.get("client_bound")) if report else False,
        client_bound_reasons=(report.summary.get("client_bound_reasons") or []) if report else [],
        **({"failure_reasons": failures} if failures else {}),
        **({"notes": notes} if notes else {}),
    )
    return record


def report_from_counters(counters: LoadCounters, note: str | None = None) -> RunReport:
    """What an interrupted run can still say: its live counters (no per-request figures)."""
    requests = {"success": counters.completed, "failed": counters.failed}
    if counters.in_flight:
        requests["cancelled"] = counters.in_flight
    return RunReport(
        requests=requests,
        input_tokens=0,
        output_tokens=counters.output_tokens,
        figures=None,
        cancelled=True,
        exact_tokens=False,
        notes=[note] if note else [],
    )
