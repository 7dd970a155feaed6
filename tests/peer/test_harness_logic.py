"""The bench_serving-vs-sim comparison logic on canned inputs (no peer venv, no simulator needed)."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from bench_serving_vs_sim import CASES, Row, client_added_ttft_ms, compare  # noqa: E402
from peer_cpu import BenchServingRun  # noqa: E402


def bench(result: dict[str, Any] | None, returncode: int = 0) -> BenchServingRun:
    return BenchServingRun(
        backend="sglang",
        argv=(),
        returncode=returncode,
        result=result,
        stdout="",
        stderr="",
        started_at=0.0,
        wall_s=1.0,
        process_cpu_s=1.0,
        benchmark_cpu_s=0.5,
        benchmark_wall_s=1.0,
        run_cpu_s=0.25,
        run_wall_s=0.5,
    )


RESULT = {
    "completed": 2,
    "duration": 10.1,
    "total_input_tokens": 30,
    "total_output_tokens": 300,
    "request_throughput": 0.198,
    "output_throughput": 29.7,
    "total_throughput": 32.67,
    "concurrency": 1.5,
    "max_concurrent_requests": 2,
    "mean_ttft_ms": 110.0,
    "median_ttft_ms": 110.0,
    "p99_ttft_ms": 119.8,
    "mean_e2e_latency_ms": 7600.0,
    "median_e2e_latency_ms": 7600.0,
    "p99_e2e_latency_ms": 9990.0,
    "mean_tpot_ms": 50.5,
    "input_lens": [10, 20],
    "output_lens": [100, 200],
    "ttfts": [0.105, 0.115],
    "errors": ["", ""],
}
TRUTH = {
    "completed": 2,
    "by_status": {"ok": 2},
    "duration_s": 10.0,
    "total_input_tokens": 30,
    "total_output_tokens": 300,
    "request_throughput": 0.2,
    "output_throughput": 30.0,
    "total_throughput": 33.0,
    "mean_concurrency": 1.5,
    "peak_concurrency_1s_buckets": 2,
    "mean_ttft_s": 0.1,
    "median_ttft_s": 0.1,
    "p99_ttft_s": 0.11,
    "mean_e2e_s": 7.59,
    "median_e2e_s": 7.59,
    "p99_e2e_s": 9.98,
    "mean_tpot_s": 0.0503,
}
RECORDS = [
    {"status": "ok", "prompt_tokens": 10, "completion_tokens": 100, "ttft_s": 0.1},
    {"status": "ok", "prompt_tokens": 20, "completion_tokens": 200, "ttft_s": 0.11},
]


def by_metric(rows: list[Row]) -> dict[str, Row]:
    return {r.metric: r for r in rows}


def test_agreeing_run_passes_every_check() -> None:
    rows = by_metric(compare(CASES["sglang-ids"], bench(RESULT), TRUTH, RECORDS, num_prompts=2))
    failed = [m for m, r in rows.items() if r.ok is False]
    assert failed == []
    assert rows["client-added TTFT min (ms)"].client == pytest.approx(5.0)
    assert rows["total input tokens"].ok is True
    assert rows["output throughput (tok/s)"].diff_pct is not None
    assert abs(rows["output throughput (tok/s)"].diff_pct - (-1.0)) < 1e-9


def test_token_mismatch_and_failures_are_caught() -> None:
    bad = {**RESULT, "total_output_tokens": 299, "errors": ["", "ClientPayloadError"], "completed": 1}
    rows = by_metric(compare(CASES["sglang-ids"], bench(bad), TRUTH, RECORDS, num_prompts=2))
    assert rows["total output tokens"].ok is False
    assert rows["failed requests"].ok is False
    assert rows["successful requests"].ok is False


def test_client_seeing_tokens_before_the_engine_is_flagged() -> None:
    early = {**RESULT, "ttfts": [0.09, 0.115]}
    rows = by_metric(compare(CASES["sglang-ids"], bench(early), TRUTH, RECORDS, num_prompts=2))
    assert rows["client-added TTFT min (ms)"].ok is False


def test_text_prompts_do_not_check_input_tokens_or_match_requests() -> None:
    rows = by_metric(
        compare(CASES["sglang-text"], bench({**RESULT, "total_input_tokens": 45}), TRUTH, RECORDS, 2)
    )
    assert rows["total input tokens"].ok is None
    assert "client-added TTFT min (ms)" not in rows


def test_thinking_chat_does_not_check_ttft() -> None:
    rows = by_metric(
        compare(CASES["chat-thinking"], bench({**RESULT, "mean_ttft_ms": 0.0}), TRUTH, RECORDS, 2)
    )
    assert rows["mean TTFT (ms)"].ok is None
    assert rows["output throughput (tok/s)"].ok is True


def test_crashed_peer_yields_only_failure_rows() -> None:
    rows = compare(CASES["chat"], bench(None, returncode=1), TRUTH, RECORDS, num_prompts=2)
    assert [r.metric for r in rows] == ["successful requests", "failed requests", "truth completed"]
    assert rows[0].ok is False


def test_ambiguous_length_pairs_are_not_matched() -> None:
    records = [*RECORDS, {"status": "ok", "prompt_tokens": 10, "completion_tokens": 100, "ttft_s": 0.2}]
    assert client_added_ttft_ms(RESULT, records) == pytest.approx([5.0])
