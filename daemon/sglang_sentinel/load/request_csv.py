"""``sentinel bench --output-csv``: one row per measured request, base units, a header row.

For a spreadsheet or pandas, where the JSONL's per-request arrays (`--output-details`) are
awkward. Warm-up requests are left out, as in the result block and the JSONL, so the rows are
exactly the run's measured requests (completed + failed + cancelled). Times are seconds;
timestamps are Unix seconds (UTC) with microsecond resolution; an event that never happened
(no first token, never sent) is an empty cell, never 0. docs/bench.md has the column table.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterable
from pathlib import Path

from sglang_sentinel.load.records import RequestRecord
from sglang_sentinel.load.result import RunResult

__all__ = ["COLUMNS", "csv_rows", "write_csv"]


def _t(x: float | None) -> str:
    return "" if x is None else f"{x:.6f}"


def _n(x: int | None) -> str:
    return "" if x is None else str(x)


def _tpot(r: RequestRecord) -> float | None:
    # Defined as in the figures (sglang_sentinel.load.figures): successful, more than one token.
    if not r.success or r.output_len <= 1 or r.latency is None or r.ttft is None:
        return None
    return (r.latency - r.ttft) / (r.output_len - 1)


def _itl_mean(r: RequestRecord) -> float | None:
    return sum(r.itl) / len(r.itl) if r.itl else None


# (header, value of a record given the run's Unix start). The order is the file's column order.
_Column = tuple[str, Callable[[RequestRecord, float], str]]
COLUMNS: tuple[_Column, ...] = (
    ("index", lambda r, t0: str(r.index)),
    ("rid", lambda r, t0: r.rid),
    ("planned_at", lambda r, t0: _t(t0 + r.planned)),
    ("started_at", lambda r, t0: _t(t0 + r.sent) if r.dispatched else ""),
    ("status", lambda r, t0: "ok" if r.success else (r.failure or "failed")),
    ("http_status", lambda r, t0: _n(r.http_status)),
    ("error", lambda r, t0: r.error or ""),
    ("planned_input_tokens", lambda r, t0: str(r.prompt_len)),
    ("input_tokens", lambda r, t0: _n(r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len)),
    ("cached_tokens", lambda r, t0: _n(r.cached_tokens)),
    ("planned_output_tokens", lambda r, t0: str(r.planned_output_len)),
    ("output_tokens", lambda r, t0: str(r.output_len)),
    ("reasoning_tokens", lambda r, t0: str(r.reasoning_tokens)),
    ("ttft_s", lambda r, t0: _t(r.ttft)),
    ("ttfc_s", lambda r, t0: _t(r.ttfc)),
    ("e2e_s", lambda r, t0: _t(r.latency)),
    ("tpot_s", lambda r, t0: _t(_tpot(r))),
    ("itl_mean_s", lambda r, t0: _t(_itl_mean(r))),
    ("itl_max_s", lambda r, t0: _t(max(r.itl) if r.itl else None)),
    ("chunks", lambda r, t0: str(len(r.chunk_times))),
    ("finish_reason", lambda r, t0: r.finish_reason or ""),
    ("queue_wait_s", lambda r, t0: _t(r.queue_wait) if r.dispatched else ""),
    ("schedule_lag_s", lambda r, t0: _t(r.schedule_lag) if r.dispatched else ""),
)


def csv_rows(result: RunResult) -> Iterable[list[str]]:
    """The header, then one row per measured request in request order."""
    yield [name for name, _ in COLUMNS]
    t0 = result.started_at
    for r in sorted(result.measured, key=lambda r: r.index):
        yield [value(r, t0) for _, value in COLUMNS]


def write_csv(result: RunResult, path: Path) -> None:
    """Write the whole file at once (a run's records are in memory anyway); raises OSError."""
    buf = io.StringIO()
    csv.writer(buf, lineterminator="\n").writerows(csv_rows(result))
    path.write_text(buf.getvalue(), encoding="utf-8", newline="")
