"""The token budget's spending on disk, written *before* the tokens are spent.

``runs.jsonl`` records a run when it ends; a daemon SIGKILLed mid-run left nothing, and the next
life spent the same hour again (10 kills: 34,477 tokens against a 15,000/h budget, measured before
this ledger). The ledger
``budget.jsonl`` in the state directory gets one fsync'd line when a reservation is made (before
the first request is sent) and one when it is settled. At start every reservation that was never
settled counts in full, as if it ended at the restart: the killed run spent at most its
reservation, and no later than now, so the hour is covered from above.

Lines: ``{"created": t}`` first (kept through compaction: runs that started before it are not in
the ledger and still come from ``runs.jsonl``), then per reservation
``{"id": "...", "start": t, "tokens": n}`` and later ``{"id": "...", "end": t, "tokens": n}``.
A torn last line (killed mid-append) is skipped: its reservation was not returned to the caller,
so no request was sent under it. The file is rewritten (atomically) with the entries that still
count when it grows past a bound.
"""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path
from typing import Any

from sglang_sentinel.atomic import atomic_write_bytes
from sglang_sentinel.log import get_logger

__all__ = ["LEDGER_FILE", "BudgetLedger", "LedgerEntry"]

LEDGER_FILE = "budget.jsonl"
_COMPACT_LINES = 2000

_log = get_logger(__name__)

# (id, start, end or None, tokens)
LedgerEntry = tuple[str, float, float | None, int]


class BudgetLedger:
    def __init__(self, path: Path) -> None:
        self.path = path
        self._lines = 0
        self.write_failures = 0
        self.created: float | None = None  # known after load()

    def new_id(self) -> str:
        return secrets.token_hex(8)

    def _append(self, record: dict[str, Any]) -> bool:
        line = (json.dumps(record, separators=(",", ":")) + "\n").encode()
        try:
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
            try:
                os.write(fd, line)
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as exc:
            self.write_failures += 1
            _log.error("budget_ledger_write_failed", path=str(self.path), error=exc.strerror or str(exc))
            return False
        self._lines += 1
        return True

    def reserve(self, entry_id: str, start: float, tokens: int) -> bool:
        """Durably record a reservation; False when the disk refused (the caller must not spend)."""
        if self.created is None:
            if not self._append({"created": start}):
                return False
            self.created = start
        return self._append({"id": entry_id, "start": start, "tokens": tokens})

    def settle(self, entry_id: str, end: float, tokens: int) -> None:
        self._append({"id": entry_id, "end": end, "tokens": tokens})

    def load(self, now: float) -> list[LedgerEntry]:
        """Every entry on disk; unsettled ones end at ``now`` with their full reservation."""
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as exc:
            _log.error("budget_ledger_read_failed", path=str(self.path), error=exc.strerror or str(exc))
            return []
        starts: dict[str, tuple[float, int]] = {}
        ends: dict[str, tuple[float, int]] = {}
        lines = raw.split(b"\n")
        self._lines = len(lines)
        for line in lines:
            try:
                rec = json.loads(line)
                if "created" in rec:
                    self.created = float(rec["created"])
                    continue
                entry_id, tokens = str(rec["id"]), int(rec["tokens"])
                if "start" in rec:
                    starts[entry_id] = (float(rec["start"]), tokens)
                else:
                    ends[entry_id] = (float(rec["end"]), tokens)
            except (ValueError, KeyError, TypeError):
                continue  # a torn last line, or a blank one
        out: list[LedgerEntry] = []
        for entry_id, (start, reserved) in starts.items():
            if entry_id in ends:
                end, tokens = ends[entry_id]
                out.append((entry_id, start, end, min(tokens, reserved)))
            else:
                out.append((entry_id, start, max(now, start), reserved))  # never settled: killed
        return out

    def compact(self, keep: list[LedgerEntry]) -> None:
        """Rewrite with ``keep`` only (settled form), atomically; best effort."""
        head = b"" if self.created is None else (json.dumps({"created": self.created}) + "\n").encode()
        data = head + b"".join(
            (json.dumps({"id": i, "start": s, "tokens": t}, separators=(",", ":")) + "\n").encode()
            + (
                (json.dumps({"id": i, "end": e, "tokens": t}, separators=(",", ":")) + "\n").encode()
                if e is not None
                else b""
            )
            for i, s, e, t in keep
        )
        try:
            atomic_write_bytes(self.path, data)
            self._lines = len(keep) * 2
        except OSError as exc:
            _log.warning("budget_ledger_compact_failed", path=str(self.path), error=exc.strerror or str(exc))

    @property
    def needs_compaction(self) -> bool:
        return self._lines > _COMPACT_LINES
