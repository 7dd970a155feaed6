"""Successive halving over the trials, and the per-trial summary it ranks by.

Round 0 measures every configuration that passed the correctness gate with a short calibration.
After each round the ``ceil(n / factor)`` fastest (by the mean of their short measurements) stay,
never fewer than ``finalists``; the others are ``eliminated`` with the figure that dropped them.
When the best ``finalists`` are already apart from all the others beyond the spread (the slowest
of them has its ``low`` above the next one's ``high``), only they stay: a further round would pay
a server restart per survivor to confirm what the measurements already show; likewise a kept
one whose ``high`` is below the ``low`` of the slowest of the best ``finalists`` goes. Survivors
go straight to the finals once they are at most ``max_full`` (a full calibration decides among
them better than another short one would).
Survivors of a round are measured again (another short calibration after a fresh start: the
restart-to-restart variation is part of the noise a deployment sees) until at most
``finalists`` remain; those get the full calibration and the reference profile.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from sglang_sentinel.tune.compare import DEFAULT_NOISE_FLOOR, Spread, spread_of

__all__ = ["KIND_ORDER", "halve", "pareto", "summarize", "summary_kind", "throughput_of"]

# Rounds of a better kind make the summary; a short round's ceiling is not a full one's.
KIND_ORDER = ("full", "short")


def summary_kind(rounds: Sequence[dict[str, Any]]) -> str | None:
    kinds = {r.get("kind") for r in rounds if r.get("throughput_tok_s") is not None}
    return next((k for k in KIND_ORDER if k in kinds), None)


def summarize(
    rounds: Sequence[dict[str, Any]], noise_floor: float = DEFAULT_NOISE_FLOOR, kind: str | None = None
) -> dict[str, Any] | None:
    """The document's ``summary``: spreads over the rounds of the best kind measured (see above),
    or of ``kind`` alone (None where no round of it measured a throughput)."""
    kind = kind or summary_kind(rounds)
    if kind is None:
        return None
    used = [r for r in rounds if r.get("kind") == kind and r.get("throughput_tok_s") is not None]
    if not used:
        return None

    def spread(key: str) -> dict[str, Any] | None:
        values = [float(r[key]) for r in used if r.get(key) is not None]
        s = spread_of(values, noise_floor)
        return s.as_dict() if s is not None else None

    last = used[-1]
    return {
        "kind": kind,
        "throughput_tok_s": spread("throughput_tok_s"),
        "ttft_p99_s": spread("ttft_p99_s"),
        "tpot_p50_s": spread("tpot_p50_s"),
        "knee_concurrency": last.get("knee_concurrency"),
        "slo_capacity_rps": last.get("slo_capacity_rps"),
    }


def throughput_of(trial: dict[str, Any]) -> Spread | None:
    summary = trial.get("summary") or {}
    data = summary.get("throughput_tok_s")
    return Spread.from_dict(data) if data else None


def halve(
    trials: Sequence[dict[str, Any]], factor: float, floor: int, round_no: int
) -> tuple[list[str], dict[str, str]]:
    """(ids kept, id -> elimination reason) after ``round_no``; ``trials`` are the survivors."""
    ranked = sorted(
        (t for t in trials if throughput_of(t) is not None),
        key=lambda t: -throughput_of(t).mean,  # type: ignore[union-attr]
    )
    keep_n = max(floor, math.ceil(len(ranked) / factor))
    clear = False
    slow: list[dict[str, Any]] = []
    if len(ranked) > floor:
        # The best `floor` already stand apart from the rest beyond the spread: more rounds would
        # pay server restarts to confirm what the measurements already say.
        last_in, first_out = throughput_of(ranked[floor - 1]), throughput_of(ranked[floor])
        assert last_in is not None
        assert first_out is not None
        if first_out.high < last_in.low:
            keep_n, clear = floor, True
    kept, dropped = ranked[:keep_n], ranked[keep_n:]
    if not clear and len(ranked) >= floor:
        # Within the kept half, those beyond the spread below the slowest of the best `floor` are
        # out too: they cannot reach the finals on this evidence.
        edge = throughput_of(ranked[floor - 1])
        assert edge is not None
        slow = [t for t in kept[floor:] if throughput_of(t).high < edge.low]  # type: ignore[union-attr]
        kept = [t for t in kept if t not in slow]
        dropped = slow + dropped
    if not kept:
        return [], {}
    cut = kept[-1]
    cut_tp = throughput_of(cut)
    assert cut_tp is not None
    reasons = {}
    for t in dropped:
        tp = throughput_of(t)
        assert tp is not None
        how = "beyond the spread" if clear or t in slow else f"top {keep_n} of {len(ranked)} kept"
        reasons[t["id"]] = (
            f"round {round_no}: output throughput {tp.text()} tok/s below the slowest kept "
            f"{cut['id']} {cut_tp.text()} tok/s ({how})"
        )
    return [t["id"] for t in kept], reasons


def pareto(trials: Sequence[dict[str, Any]], kind: str | None = None) -> list[str]:
    """Trials (with a summary) not dominated on (higher throughput, lower p99 TTFT), fastest first;
    with ``kind``, on the figures of that measure alone (``figures``: never a full calibration's
    point against another trial's probe)."""
    points = []
    for t in trials:
        s = ((t.get("figures") or {}).get(kind) if kind else t.get("summary")) or {}
        tp, ttft = s.get("throughput_tok_s"), s.get("ttft_p99_s")
        if t.get("status") in ("measured", "eliminated") and tp and ttft:
            points.append((t["id"], tp["mean"], ttft["mean"]))
    front = [
        p
        for p in points
        if not any(q[1] >= p[1] and q[2] <= p[2] and (q[1] > p[1] or q[2] < p[2]) for q in points)
    ]
    return [p[0] for p in sorted(front, key=lambda p: -p[1])]
