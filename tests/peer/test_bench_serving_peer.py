"""SGLang's own bench_serving (0.5.9, unchanged) against `sentinel sim` (the drop-in claim).

Opt-in: ``pytest --run-peer tests/peer`` after ``benchmarks/peer_setup.sh``. Every request must
succeed with both backends, token totals must equal the simulator's ground truth, and the timing
figures must agree within tolerances sized for a shared, noisy machine (the benchmark
``benchmarks/bench_serving_vs_sim.py`` prints the full table with tighter checks).

Arrivals are Poisson (not all at once): a burst of simultaneous starts measures the client's own
start-up cost (bench_serving opens one aiohttp session per request), not the server.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
sys.path.insert(0, str(BENCHMARKS))

from bench_serving_vs_sim import CASES, CaseResult, Row, Sim, run_case  # noqa: E402
from peer_cpu import PeerNotReady, peer_python, peer_tokenizer  # noqa: E402

pytestmark = [pytest.mark.peer, pytest.mark.slow]

SPEED = 2.0
NUM_PROMPTS = 24
LEN = 128
RATE = 16.0  # req/s real = 8 req/s of server time


@pytest.fixture(scope="module")
def peer_ready() -> None:
    try:
        peer_python()
        peer_tokenizer()
    except PeerNotReady as exc:  # opted in with --run-peer, so a missing peer is a failure
        pytest.fail(str(exc))


def row(result: CaseResult, metric: str) -> Row:
    for r in result.rows:
        if r.metric == metric:
            return r
    raise AssertionError(f"{result.case.name}: no row {metric!r}: {[r.metric for r in result.rows]}")


def within(r: Row, rel: float, abs_: float = 0.0) -> bool:
    assert r.client is not None
    assert r.truth is not None
    return abs(r.client - r.truth) <= abs_ + rel * abs(r.truth)


def describe(result: CaseResult) -> str:
    lines = [f"{r.metric}: bench_serving={r.client} truth={r.truth}" for r in result.rows]
    return "\n".join(lines) + f"\nstderr tail: {result.run.stderr[-1500:]}"


@pytest.mark.parametrize("case_name", ["sglang-ids", "sglang-text", "chat", "chat-thinking"])
def test_bench_serving_agrees_with_ground_truth(
    peer_ready: None, sim_factory: Callable[..., Any], case_name: str
) -> None:
    sim = sim_factory("--speed", str(SPEED))
    case = CASES[case_name]
    result = run_case(
        Sim(sim.base_url, sim.control_url),
        case,
        num_prompts=NUM_PROMPTS,
        input_len=LEN,
        output_len=LEN,
        range_ratio=0.0,
        request_rate=RATE,
        max_concurrency=None,
        seed=1,
    )
    info = describe(result)
    assert result.run.returncode == 0, info
    assert result.run.completed == NUM_PROMPTS, info
    assert result.run.failures == [], info
    assert result.truth["completed"] == NUM_PROMPTS, info
    assert result.truth["by_status"] == {"ok": NUM_PROMPTS}, info
    assert row(result, "total output tokens").ok, info
    if case.exact_input:
        assert row(result, "total input tokens").ok, info
    assert within(row(result, "output throughput (tok/s)"), 0.05), info
    assert within(row(result, "request throughput (req/s)"), 0.05), info
    assert within(row(result, "concurrency"), 0.05), info
    assert within(row(result, "mean E2E (ms)"), 0.05, 20.0), info
    if case.comparable_ttft:
        assert within(row(result, "mean TTFT (ms)"), 0.10, 25.0), info
        assert within(row(result, "mean decode span E2E-TTFT (ms)"), 0.05, 5.0), info
        assert within(row(result, "mean TPOT (ms)"), 0.10, 1.0), info
    if case.exact_input:
        assert row(result, "client-added TTFT min (ms)").ok, info
