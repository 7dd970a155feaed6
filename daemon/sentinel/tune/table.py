"""The terminal table of a tune document: one line per configuration, then the verdict."""

from __future__ import annotations

from typing import Any

from sentinel.tune.compare import DEFAULT_NOISE_FLOOR

__all__ = ["format_table"]

_WIDTH_CONFIG = 44
_WIDTH_REASON = 70


def _spread(s: dict[str, Any] | None, fmt: str) -> str:
    if not s:
        return "-"
    half = (s["high"] - s["low"]) / 2
    return f"{s['mean']:{fmt}} ±{half:{fmt}}"


def _num(v: float | None, fmt: str) -> str:
    return "-" if v is None else format(v, fmt)


def _cut(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def format_table(doc: dict[str, Any]) -> str:
    head = ("id", "config", "status", "tok/s ± spread", "p99 TTFT s", "knee", "SLO rps", "reason")
    rows = [head]
    for t in doc["trials"]:
        s = t.get("summary") or {}
        mark = "*" if t["id"] == doc.get("winner") else (" " if t["id"] != doc.get("baseline") else "b")
        rows.append(
            (
                f"{t['id']}{mark}",
                _cut(t.get("label") or "", _WIDTH_CONFIG),
                t["status"],
                _spread(s.get("throughput_tok_s"), ".1f")
                + (f" (n={s['throughput_tok_s']['n']})" if s.get("throughput_tok_s") else ""),
                _num((s.get("ttft_p99_s") or {}).get("mean"), ".3f"),
                _num(s.get("knee_concurrency"), ".0f"),
                _num(s.get("slo_capacity_rps"), ".2f"),
                _cut(t.get("reason") or "", _WIDTH_REASON),
            )
        )
    widths = [max(len(r[i]) for r in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths, strict=True)).rstrip() for row in rows]
    b = doc["budget"]
    lines.append("")
    floor = f"±{DEFAULT_NOISE_FLOOR:.0%}"
    lines.append(
        f"b = baseline, * = winner; spread = min/max over n repeats ({floor} for a single measurement)"
    )
    lines.append(f"trial time {b['spent_time_s']:.1f} s, tokens {b['spent_tokens']}")
    if doc.get("stop_reason"):
        lines.append(f"stopped early: {doc['stop_reason']}")
    if doc.get("winner"):
        lines.append(f"winner: {doc['winner']}: {doc['winner_reason']}")
        lines.append("paste into the config:")
        lines.append(doc["winner_toml"].rstrip())
    else:
        lines.append(f"no winner: {doc.get('winner_reason')}")
    return "\n".join(lines)
