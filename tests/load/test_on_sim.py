"""The load engine against `sentinel sim` (subprocess, loopback, --speed 100): figures vs ground truth."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.cli import main
from sglang_sentinel.load import (
    ArrivalProcess,
    Backend,
    FailureReason,
    LoadSpec,
    RandomDataset,
    RunResult,
    run_load,
)
from support.peaks import guaranteed_peak
from support.waits import until

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]


def _truth(sim: Any, result: RunResult) -> dict[str, dict[str, Any]]:
    records = sim.control("/requests")["requests"]
    return {r["rid"]: r for r in records}


async def test_native_counts_match_ground_truth(sim_factory: Any) -> None:
    sim = sim_factory("--skip-server-warmup")
    spec = LoadSpec(
        base_url=sim.base_url,
        dataset=RandomDataset(64, 32, 0.0),
        num_requests=24,
        max_concurrency=8,
        warmup_requests=1,
        seed=4,
    )
    result = await run_load(spec)
    m = result.metrics
    assert m.completed == 24, result.measured[0].error
    truth = _truth(sim, result)
    for rec in result.measured:
        tr = truth[rec.rid]
        assert rec.output_len == tr["completion_tokens"] == rec.planned_output_len
        assert rec.prompt_tokens == tr["prompt_tokens"] == rec.prompt_len
        assert rec.ttft is not None
        # Our TTFT starts before the server receives the request and ends after it produced
        # the token, so it can only be longer (same host clock for both).
        assert rec.ttft >= tr["ttft_s"] - 0.002
        assert sum(rec.chunk_tokens) == rec.output_len
        assert len(rec.itl) == rec.output_len - rec.chunk_tokens[0]
    assert m.total_output_tokens == sum(truth[r.rid]["completion_tokens"] for r in result.measured)
    spans = [(r.sent, r.end) for r in result.measured]
    assert guaranteed_peak(spans, 8) <= m.peak_in_flight <= 8  # 8 on an idle box
    assert m.max_concurrent_requests >= 8


async def test_chat_reasoning_and_usage_on_sim(sim_factory: Any) -> None:
    sim = sim_factory("--skip-server-warmup")
    spec = LoadSpec(
        base_url=sim.base_url,
        backend=Backend.OPENAI_CHAT,
        dataset=RandomDataset(32, 96, 1.0),
        num_requests=4,
        warmup_requests=0,
    )
    result = await run_load(spec)
    assert result.metrics.completed == 4, result.measured[0].error
    assert result.model == "glm-5"
    truth = _truth(sim, result)
    for rec in result.measured:
        assert rec.output_len == truth[rec.rid]["completion_tokens"] == 96
        assert rec.prompt_tokens == truth[rec.rid]["prompt_tokens"]
        assert rec.reasoning_tokens > 0  # GLM-5 thinks first
        assert rec.ttft is not None
        if rec.content_tokens:
            assert rec.ttfc is not None
            # Events that came in one read share its stamp (a client behind its server reads
            # several at once): later only where each event had a read of its own.
            assert rec.ttfc >= rec.ttft
            if not rec.shared_read_events:
                assert rec.ttfc > rec.ttft
    m = result.metrics
    assert m.reasoning_tokens + m.content_tokens >= m.total_output_tokens - 4  # </think> has no text


async def test_completions_and_non_stream_on_sim(sim_factory: Any) -> None:
    sim = sim_factory("--skip-server-warmup")
    for backend in (Backend.OPENAI_COMPLETIONS, Backend.SGLANG):
        for stream in (True, False):
            spec = LoadSpec(
                base_url=sim.base_url,
                backend=backend,
                dataset=RandomDataset(16, 12, 1.0),
                num_requests=2,
                warmup_requests=0,
                stream=stream,
            )
            result = await run_load(spec)
            assert result.metrics.completed == 2, (backend, stream, result.measured[0].error)
            assert result.metrics.total_output_tokens == 24


async def test_mtp_multi_token_chunks(sim_factory: Any) -> None:
    sim = sim_factory("--skip-server-warmup", "--profile", "glm5-nvfp4-8x-rtxpro6000-mtp")
    spec = LoadSpec(
        base_url=sim.base_url, dataset=RandomDataset(32, 64, 1.0), num_requests=4, warmup_requests=0
    )
    result = await run_load(spec)
    m = result.metrics
    assert m.completed == 4
    assert m.tokens_per_chunk.mean > 1.5  # accept length ~2.4
    assert m.total_output_tokens == 4 * 64
    assert m.itl.count == sum(r.output_len - r.chunk_tokens[0] for r in result.measured)


async def test_faults_are_counted_by_reason(sim_factory: Any) -> None:
    sim = sim_factory("--skip-server-warmup")
    spec = LoadSpec(
        base_url=sim.base_url, dataset=RandomDataset(16, 16, 1.0), num_requests=8, warmup_requests=0
    )
    for fault, reason in (
        ("error_chunk:rate=0.5", FailureReason.ERROR_CHUNK),
        ("malformed_sse:rate=0.5", FailureReason.MALFORMED),
        ("http_503:rate=0.5", "http_503"),
    ):
        sim.control("/faults", "DELETE")
        sim.control("/faults", "POST", {"spec": fault})
        result = await run_load(spec)
        assert result.metrics.failures == {reason: 4}, fault
        assert result.metrics.completed == 4
    sim.control("/faults", "DELETE")


async def test_api_key_on_sim(sim_factory: Any) -> None:
    sim = sim_factory("--skip-server-warmup", "--api-key", "k-123")
    spec = LoadSpec(
        base_url=sim.base_url, dataset=RandomDataset(8, 4, 1.0), num_requests=2, warmup_requests=0
    )
    denied = await run_load(spec)
    assert denied.metrics.failures == {"http_401": 2}
    from dataclasses import replace

    allowed = await run_load(replace(spec, api_key="k-123"))
    assert allowed.metrics.completed == 2


async def test_cancel_aborts_server_side(sim_factory: Any) -> None:
    sim = sim_factory("--skip-server-warmup", "--speed", "5")
    spec = LoadSpec(
        base_url=sim.base_url,
        dataset=RandomDataset(16, 2000, 1.0),
        arrival=ArrivalProcess.CLOSED,
        max_concurrency=4,
        num_requests=None,
        duration_s=60.0,
        warmup_requests=0,
    )
    cancel = asyncio.Event()
    task = asyncio.create_task(run_load(spec, cancel=cancel))
    # The four in the server's batch (2000 tokens at speed 5: 32 s each, nowhere near done).
    await until(lambda: sim.control("/state")["engine"]["running"] == 4, what="four requests running")
    cancel.set()
    result = await asyncio.wait_for(task, 10.0)
    assert result.cancelled
    assert result.metrics.cancelled == 4
    # The server saw the clients go away and aborted them.
    await until(lambda: sim.control("/state")["engine"]["running"] == 0, what="the server's aborts")


async def test_bench_cli_on_sim(sim_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    sim = sim_factory("--skip-server-warmup")
    out = tmp_path / "r.jsonl"
    argv = ["bench", "--log-level", "error", "--base-url", sim.base_url, "--num-prompts", "16",
            "--random-input-len", "64", "--random-output-len", "32", "--request-rate", "200",
            "--output-file", str(out)]  # fmt: skip
    assert await asyncio.to_thread(main, argv) == 0
    text = capsys.readouterr().out
    assert "Traffic request rate:                    200.0" in text
    record = json.loads(out.read_text())
    assert record["completed"] == 16
    assert record["request_rate"] == 200.0
    assert record["arrival"] == "poisson"
