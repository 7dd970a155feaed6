"""Calibration results on disk, and the comparison of a new result with its baseline.

One JSON file per result in ``<state_dir>/calibration/``, named by its start time so that the
newest sorts last. Writes are atomic (temporary file in the same directory, fsync, rename): a
crash or a full disk mid-write leaves the previous files intact, never a truncated newest one.
History is bounded (oldest removed first). A file that no longer validates (hand-edited, from a
future schema) is skipped with a log line, never fatal: the daemon must keep calibrating.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import ValidationError

from sglang_sentinel.atomic import atomic_write_bytes
from sglang_sentinel.calibrate.model import SCHEMA_VERSION, CalibrationResult, Comparison, Target
from sglang_sentinel.log import get_logger

__all__ = ["REGRESSION_FIGURES", "ResultStore", "StoreError", "compare", "load_result"]

_PREFIX = "calibration-"
_SUFFIX = ".json"

_log = get_logger(__name__)

# Figures whose drop below the baseline is a regression. Knee and SLO concurrency are reported as
# changes only: they move in whole steps of the search, so a one-step move is not news.
REGRESSION_FIGURES = (
    "saturation_output_throughput",
    "saturation_total_throughput",
    "max_rate_within_slo",
    "goodput",
)
_CHANGE_FIGURES = (*REGRESSION_FIGURES, "knee_concurrency", "max_concurrency_within_slo")


class StoreError(Exception):
    """The state directory cannot be used (not creatable, not writable)."""


def load_result(path: Path) -> CalibrationResult:
    """Read one result file; ValueError with a one-line reason when it cannot be used."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise ValueError(f"{path}: {exc.strerror or exc}") from None
    try:
        result = CalibrationResult.model_validate_json(raw)
    except ValidationError as exc:
        first = exc.errors(include_url=False)[0]
        where = ".".join(str(p) for p in first["loc"]) or "(top level)"
        raise ValueError(f"{path}: not a calibration result ({where}: {first['msg']})") from None
    if result.schema_version != SCHEMA_VERSION:
        raise ValueError(f"{path}: schema version {result.schema_version}, expected {SCHEMA_VERSION}")
    return result


class ResultStore:
    """The results in ``directory``; with ``target``, only that server's (the others are skipped
    by :meth:`results`/:meth:`latest` and counted by :meth:`foreign`), and saved results without
    a target get it."""

    def __init__(self, directory: Path, history: int = 50, target: Target | None = None) -> None:
        self.directory = directory
        self.history_limit = history
        self.target = target

    def _own(self, result: CalibrationResult) -> bool:
        return self.ignored_reason(result) is None

    def ignored_reason(self, result: CalibrationResult) -> str | None:
        """Why ``result`` is not this store's target's, or None when it is. A field of the store's
        target left "" matches any value (a sweep knows the URL, not the daemon's launch hash)."""
        if self.target is None:
            return None
        if result.target is None:
            return "no target recorded"
        for field in ("url", "served_model", "launch_hash"):
            wanted = getattr(self.target, field)
            if wanted and getattr(result.target, field) != wanted:
                return f"another {field}"
        return None

    def foreign(self) -> dict[str, int]:
        """Readable results of other targets, counted by the reason they are not ours."""
        counts: dict[str, int] = {}
        for result in self._all():
            reason = self.ignored_reason(result)
            if reason is not None:
                counts[reason] = counts.get(reason, 0) + 1
        return counts

    def _files(self) -> list[Path]:
        if not self.directory.is_dir():
            return []
        return sorted(
            p for p in self.directory.iterdir() if p.name.startswith(_PREFIX) and p.name.endswith(_SUFFIX)
        )

    def save(self, result: CalibrationResult) -> Path:
        if result.target is None and self.target is not None:
            result = result.model_copy(update={"target": self.target})
        try:
            self.directory.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise StoreError(f"cannot create {self.directory}: {exc.strerror or exc}") from None
        stamp = result.started_at.strftime("%Y%m%dT%H%M%S.%fZ")
        path = self.directory / f"{_PREFIX}{stamp}{_SUFFIX}"
        try:
            atomic_write_bytes(path, result.model_dump_json(indent=1).encode())
        except OSError as exc:
            raise StoreError(f"cannot write {path}: {exc.strerror or exc}") from None
        self._prune()
        return path

    def _prune(self) -> None:
        files = self._files()
        for old in files[: max(0, len(files) - self.history_limit)]:
            try:
                old.unlink()
            except OSError as exc:
                _log.warning("calibration_prune_failed", path=str(old), error=str(exc))

    def _all(self) -> list[CalibrationResult]:
        out = []
        for path in self._files():
            try:
                out.append(load_result(path))
            except ValueError as exc:
                _log.warning("calibration_result_unreadable", reason=str(exc))
        return out

    def results(self) -> list[CalibrationResult]:
        """Every readable result of this store's target, oldest first."""
        return [r for r in self._all() if self._own(r)]

    def latest(self, *, conclusive: bool = False) -> CalibrationResult | None:
        """The newest readable result of this target (what an incremental run is seeded from); with
        ``conclusive``, the newest that says something about capacity (what is shown and served as
        "the latest": a cancelled or inconclusive sweep never is)."""
        for path in reversed(self._files()):
            try:
                result = load_result(path)
            except ValueError as exc:
                _log.warning("calibration_result_unreadable", reason=str(exc))
                continue
            if self._own(result) and (not conclusive or result.conclusive):
                return result
        return None


def compare(current: CalibrationResult, baseline: CalibrationResult, threshold: float) -> Comparison | None:
    """Relative change of each headline figure; drops beyond ``threshold`` are regressions.

    None when the two are not comparable (another server or another workload).
    """
    a, b = current.workload, baseline.workload
    if (a.base_url, a.backend, a.input_len, a.output_len, a.range_ratio) != (
        b.base_url,
        b.backend,
        b.input_len,
        b.output_len,
        b.range_ratio,
    ):
        return None
    changes: dict[str, float] = {}
    regressions: list[str] = []
    for key in _CHANGE_FIGURES:
        now = getattr(current, key).value
        then = getattr(baseline, key).value
        if now is None or then is None or then <= 0:
            continue
        change = (now - then) / then
        changes[key] = change
        if key in REGRESSION_FIGURES and change < -threshold:
            regressions.append(f"{key.replace('_', ' ')} fell {-change:.0%}: {then:.4g} -> {now:.4g}")
    return Comparison(
        baseline_started_at=baseline.started_at, changes=changes, regressions=tuple(regressions)
    )
