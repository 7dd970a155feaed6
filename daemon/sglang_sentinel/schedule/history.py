"""The scheduler's records: every firing's outcome in ``runs.jsonl``, every server epoch in
``restarts.jsonl``, the last 50 of each in memory for the status page, all read back at start.

Apart from the scheduler because it is bookkeeping, not scheduling: which records belong to this
target, what a server epoch record holds, and what a restart restores (the budget's spending and
the epoch already seen) are the same whatever fires the runs.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable
from typing import Any

from sglang_sentinel.log import get_logger
from sglang_sentinel.schedule.budget import TokenBudget
from sglang_sentinel.schedule.metrics import ScheduleMetrics
from sglang_sentinel.schedule.revoke import reference_figures, revoke_reference
from sglang_sentinel.schedule.runrecord import iso
from sglang_sentinel.statedir import StateDir

__all__ = ["RESTARTS_FILE", "RUNS_FILE", "RunHistory"]

_log = get_logger(__name__)

RUNS_FILE = "runs.jsonl"
RESTARTS_FILE = "restarts.jsonl"


class RunHistory:
    """Run and epoch records of one target, on disk (the state directory) and the newest in memory."""

    def __init__(self, state: StateDir, *, target_url: str | None, served_model: str) -> None:
        """``target_url``: written into every run record; records of another server (a state
        directory reused for another target) are ignored at restore."""
        self.state = state
        self.target_url = target_url
        self.served_model = served_model
        self.recent: deque[dict[str, Any]] = deque(maxlen=50)
        self.restarts: deque[dict[str, Any]] = deque(maxlen=50)

    def add_run(self, record: dict[str, Any], keep: int) -> None:
        """A firing's record (run, skip, exclusive work): in memory, and on disk (``keep`` lines)."""
        self.recent.append(record)
        if self.target_url is not None:
            record["server_url"] = self.target_url
            record["served_model"] = self.served_model
        self.state.append(RUNS_FILE, record, keep)

    def add_epoch(
        self, epoch: float, *, launch_hash: str | None, seen_at: float, warm: bool, keep: int
    ) -> None:
        """A server epoch (ready time) seen for the first time."""
        record = {
            "ready_at": epoch,
            "ready_at_iso": iso(epoch),
            "launch_hash": launch_hash,
            "seen_at": seen_at,
            # Already serving when first seen (sentinel restarted, the server did not).
            "observed_running": warm,
        }
        self.restarts.append(record)
        self.state.append(RESTARTS_FILE, record, keep)
        _log.info("server_epoch", ready_at=iso(epoch), launch_hash=launch_hash, observed_running=warm)

    def _own_runs(self, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """The records of this target. Only the URL is compared: a relaunch with another config is
        still the same server's hour of budget. Records without one (written before targets were
        recorded) are kept: the budget is a safety bound, and counting too much is the safe side."""
        if self.target_url is None:
            return runs
        own = [r for r in runs if r.get("server_url") in (None, self.target_url)]
        if len(own) != len(runs):
            _log.warning(
                "state_records_ignored",
                file=RUNS_FILE,
                kept=len(own),
                ignored=len(runs) - len(own),
                reason=f"recorded for another server than {self.target_url}",
            )
        return own

    def restore(
        self,
        budget: TokenBudget,
        *,
        runs_limit: int,
        restarts_limit: int,
        metrics: ScheduleMetrics | None = None,
        profiles: Iterable[str] = (),
    ) -> float | None:
        """Reload the run and restart history: budget spending and the status page survive a restart,
        and with ``metrics``, each of ``profiles`` gets its newest reference run's last-run series
        back, marked restored (:meth:`restore_figures`).

        Returns the ready time of the last epoch recorded (None: none recorded)."""
        runs = self._own_runs(self.state.history(RUNS_FILE, limit=runs_limit))
        if metrics is not None:
            self.restore_figures(runs, metrics, profiles)
        ledger_since = budget.restore_ledger()
        spent = []
        for record in runs:
            tokens = record.get("budget_tokens")
            start, end = record.get("started_at"), record.get("finished_at")
            if not (
                isinstance(tokens, int) and isinstance(start, int | float) and isinstance(end, int | float)
            ):
                continue
            if ledger_since is None or start < ledger_since:  # else the ledger has it already
                spent.append((float(start), float(end), tokens))
        budget.restore(spent)
        self.recent.extend(runs[-self.recent.maxlen :] if self.recent.maxlen else runs)
        restarts = self.state.history(RESTARTS_FILE, limit=restarts_limit)
        self.restarts.extend(restarts[-50:])
        if restarts and isinstance(restarts[-1].get("ready_at"), int | float):
            return float(restarts[-1]["ready_at"])
        return None

    @staticmethod
    def restore_figures(
        runs: list[dict[str, Any]], metrics: ScheduleMetrics, profiles: Iterable[str]
    ) -> None:
        """The last-run series of each profile from its newest reference run in ``runs``.

        Without this a restarted sentinel exported no last-run timestamp until a run completed, so
        "no reference run for hours" (ReferenceRunsStale) was blind exactly when runs kept failing
        after a restart. A profile with no reference run on record stays absent (a fresh install
        has no staleness to report); a profile no longer configured is not brought back."""
        wanted = set(profiles)
        newest: dict[str, dict[str, Any]] = {}
        for record in runs:
            profile = record.get("profile")
            if (
                isinstance(profile, str)
                and profile in wanted
                and record.get("kind", "run") == "run"
                and record.get("reference") is True
            ):
                newest[profile] = record
        for profile, record in sorted(newest.items()):
            figures = reference_figures(record)
            if figures is None:
                continue
            metrics.set_figures(profile, figures, restored=True)
            energy = record.get("energy")
            if isinstance(energy, dict):
                metrics.set_energy(profile, energy)
            _log.info("last_run_restored", profile=profile, finished_at=iso(figures.finished_at))

    def revoke_reference(self, metrics: ScheduleMetrics, since: float, reason: str) -> int:
        """Runs that finished since ``since`` leave the reference series (schedule/revoke.py)."""
        return revoke_reference(self.state, RUNS_FILE, metrics, self.recent, since, reason)
