"""The noise rule: spreads, significance, and who is kept within noise."""

from __future__ import annotations

import pytest

from sglang_sentinel.tune.compare import Spread, judge, spread_of
from sglang_sentinel.tune.halving import halve, pareto, summarize


def test_spread_is_min_max_and_a_single_value_borrows_the_noise_floor() -> None:
    assert spread_of([200.0, 210.0, 205.0]) == Spread(205.0, 200.0, 210.0, 3)
    one = spread_of([100.0], noise_floor=0.05)
    assert one is not None
    assert one.low == pytest.approx(95.0)
    assert one.high == pytest.approx(105.0)
    assert one.n == 1
    assert spread_of([]) is None


def test_a_winner_only_beyond_the_spread() -> None:
    fast, slow = Spread(231.0, 226.1, 235.8, 3), Spread(208.2, 204.0, 212.1, 3)
    v = judge("t01", slow, "t04", fast, preferred="t01")
    assert v.significant
    assert v.better == "t04"
    assert "beyond the spread" in v.reason


def test_overlap_keeps_the_baseline_even_when_its_mean_is_lower() -> None:
    base, other = Spread(208.0, 200.0, 216.0, 3), Spread(212.0, 205.0, 219.0, 3)
    v = judge("t01", base, "t02", other, preferred="t01")
    assert not v.significant
    assert v.better == "t01"
    assert v.reason.startswith("no significant difference")
    assert "baseline" in v.reason
    # Neither is the baseline: the first (measured first, the cheaper default) is kept.
    assert judge("t03", other, "t04", base, preferred="t01").better == "t03"


def _trial(tid: str, tp: float, ttft: float, spread: float = 0.05) -> dict[str, object]:
    return {
        "id": tid,
        "status": "measured",
        "summary": {
            "throughput_tok_s": {"mean": tp, "low": tp * (1 - spread), "high": tp * (1 + spread), "n": 1},
            "ttft_p99_s": {"mean": ttft, "low": ttft, "high": ttft, "n": 1},
        },
    }


def test_halving_keeps_the_faster_half_and_says_why_the_rest_went() -> None:
    # All within each other's noise: plain halving.
    trials = [_trial(f"t{i}", tp, 1.0) for i, tp in enumerate((100, 104, 102, 106, 98))]
    kept, dropped = halve(trials, 2.0, 1, 0)
    assert kept == ["t3", "t1", "t2"]
    assert set(dropped) == {"t0", "t4"}
    assert "round 0" in dropped["t0"]
    assert "t2 102.0" in dropped["t0"]
    assert "top 3 of 5 kept" in dropped["t0"]
    kept, dropped = halve(trials[:2], 2.0, 2, 1)  # never below the finalists
    assert len(kept) == 2
    assert not dropped


def test_finalists_apart_beyond_the_spread_end_the_halving_at_once() -> None:
    trials = [_trial(f"t{i}", tp, 1.0) for i, tp in enumerate((100, 300, 200, 400, 50, 390))]
    kept, dropped = halve(trials, 2.0, 2, 0)
    assert kept == ["t3", "t5"]  # 390 [370.5, 409.5] is far above 300 [285, 315]
    assert set(dropped) == {"t0", "t1", "t2", "t4"}
    assert "beyond the spread" in dropped["t1"]


def test_pareto_front_of_throughput_and_p99_ttft() -> None:
    trials = [_trial("a", 300, 2.0), _trial("b", 200, 1.0), _trial("c", 150, 1.5), _trial("d", 300, 2.5)]
    assert pareto(trials) == ["a", "b"]


def test_summary_uses_the_best_kind_measured() -> None:
    rounds = [
        {"kind": "short", "throughput_tok_s": 100.0, "ttft_p99_s": 1.0, "knee_concurrency": 8},
        {"kind": "full", "throughput_tok_s": 190.0, "ttft_p99_s": 1.1, "knee_concurrency": 16},
        {"kind": "full", "throughput_tok_s": 210.0, "ttft_p99_s": 1.3, "knee_concurrency": 24},
        {"kind": "reference", "throughput_tok_s": 50.0},
    ]
    s = summarize(rounds)
    assert s is not None
    assert s["kind"] == "full"
    assert s["throughput_tok_s"] == {"mean": 200.0, "low": 190.0, "high": 210.0, "n": 2}
    assert s["knee_concurrency"] == 24
    assert summarize([{"kind": "reference", "throughput_tok_s": 5.0}]) is None
