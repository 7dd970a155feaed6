"""The engine against a fake SGLang server: protocols, failures by reason, bounds, cancellation."""

from __future__ import annotations

import asyncio
import json
import math
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.load import (
    ArrivalProcess,
    Backend,
    FailureReason,
    JsonlDataset,
    LoadCounters,
    LoadSpec,
    RandomDataset,
    RequestRecord,
    SharedPrefixDataset,
    format_result_block,
    run_load,
)
from support.peaks import guaranteed_peak

pytestmark = pytest.mark.asyncio


def _spec(base_url: str, **kw: Any) -> LoadSpec:
    defaults: dict[str, Any] = {
        "base_url": base_url,
        "dataset": RandomDataset(input_len=16, output_len=8, range_ratio=1.0),
        "num_requests": 6,
        "warmup_requests": 0,
        "request_timeout_s": 10.0,
    }
    defaults.update(kw)
    return LoadSpec(**defaults)


async def test_native_stream_exact_counts_and_per_token_itl(fake_sglang: Any) -> None:
    fake = await fake_sglang(token_delay=0.002, tokens_per_chunk=3)
    result = await run_load(_spec(fake.base_url, dataset=RandomDataset(32, 10, 1.0)))
    m = result.metrics
    assert m.completed == 6
    assert m.failed == 0
    assert m.total_output_tokens == 60
    assert m.total_input_tokens == 6 * 32
    # Exact prompt length: token ids, one per requested token.
    assert all(len(body["input_ids"]) == 32 for body in fake.requests)
    assert all(
        body["sampling_params"] == {"temperature": 0.0, "max_new_tokens": 10, "ignore_eos": True}
        for body in fake.requests
    )
    rec = result.records[0]
    # 10 tokens in chunks of 3,3,3,1 -> the first chunk opens TTFT, the other 7 tokens get ITL entries.
    assert rec.chunk_tokens == [3, 3, 3, 1]
    assert len(rec.itl) == 7
    assert rec.itl[0] == rec.itl[1] == rec.itl[2]  # one gap spread over the chunk's 3 tokens
    assert m.tokens_per_chunk.mean == pytest.approx(2.5)
    assert m.tpot.count == 6


async def test_chat_reasoning_ttft_ttfc_and_usage(fake_sglang: Any) -> None:
    fake = await fake_sglang(token_delay=0.003, reasoning_tokens=4)
    spec = _spec(fake.base_url, backend=Backend.OPENAI_CHAT, num_requests=3)
    result = await run_load(spec)
    m = result.metrics
    assert m.completed == 3, result.records[0].error
    assert result.model == "fake-model"
    body = fake.requests[0]
    assert body["model"] == "fake-model"
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["max_completion_tokens"] == 8
    rec = result.records[0]
    assert rec.ttft is not None
    assert rec.ttfc is not None
    # Four reasoning chunks before the first content token: later, unless a busy client read
    # them all at once (events of one read share its stamp).
    assert rec.ttfc >= rec.ttft
    if not rec.shared_read_events:
        assert rec.ttfc > rec.ttft
    assert rec.reasoning_tokens == 4
    assert rec.content_tokens == 4
    assert m.reasoning_tokens == 12
    assert m.content_tokens == 12
    assert rec.output_len == 8


async def test_chat_without_continuous_usage_counts_chunks_then_usage(fake_sglang: Any) -> None:
    fake = await fake_sglang(tokens_per_chunk=2, continuous_usage=False)
    result = await run_load(_spec(fake.base_url, backend=Backend.OPENAI_CHAT, num_requests=2))
    rec = result.records[0]
    assert rec.success
    assert rec.chunk_tokens == [1, 1, 1, 1]  # one per chunk: the server did not say more
    assert rec.output_len == 8  # the final usage chunk is the truth


async def test_completions_backend(fake_sglang: Any) -> None:
    fake = await fake_sglang(tokens_per_chunk=2)
    result = await run_load(_spec(fake.base_url, backend=Backend.OPENAI_COMPLETIONS, num_requests=2))
    assert result.metrics.completed == 2
    assert fake.requests[0]["max_tokens"] == 8
    assert result.records[0].output_len == 8


@pytest.mark.parametrize("backend", list(Backend))
async def test_non_stream_ttft_equals_latency(fake_sglang: Any, backend: Backend) -> None:
    fake = await fake_sglang()
    result = await run_load(_spec(fake.base_url, backend=backend, stream=False, num_requests=2))
    rec = result.records[0]
    assert rec.success, rec.error
    assert rec.ttft == rec.latency
    assert rec.output_len == 8


@pytest.mark.parametrize(
    ("mode", "reason"),
    [
        ("error_chunk", FailureReason.ERROR_CHUNK),
        ("malformed", FailureReason.MALFORMED),
        ("disconnect", FailureReason.DISCONNECTED),
        ("short", FailureReason.SHORT_OUTPUT),
        ("abort", FailureReason.ABORTED),
        ("no_done", FailureReason.DISCONNECTED),
    ],
)
async def test_native_failures_by_reason(fake_sglang: Any, mode: str, reason: str) -> None:
    fake = await fake_sglang(fail_mode=mode, fail_every=2)
    result = await run_load(_spec(fake.base_url, num_requests=4, max_concurrency=1))
    m = result.metrics
    if mode == "no_done":
        # A finish_reason without [DONE] is a complete answer; only a truncated stream fails.
        assert m.completed == 4
        return
    assert m.completed == 2
    assert m.failures == {reason: 2}
    failed = [r for r in result.records if not r.success]
    assert all(r.error for r in failed)


async def test_chat_error_chunk(fake_sglang: Any) -> None:
    fake = await fake_sglang(fail_mode="error_chunk")
    result = await run_load(_spec(fake.base_url, backend=Backend.OPENAI_CHAT, num_requests=2))
    assert result.metrics.failures == {FailureReason.ERROR_CHUNK: 2}
    assert "boom" in (result.records[0].error or "")


async def test_http_error_and_auth(fake_sglang: Any) -> None:
    fake = await fake_sglang(api_key="s3cret")
    result = await run_load(_spec(fake.base_url, num_requests=2))
    assert result.metrics.failures == {"http_401": 2}
    ok = await run_load(_spec(fake.base_url, num_requests=2, api_key="s3cret"))
    assert ok.metrics.completed == 2
    assert "s3cret" not in repr(ok.spec)

    bad = await fake_sglang(status=404)
    res = await run_load(_spec(bad.base_url, num_requests=1, backend=Backend.OPENAI_CHAT, model="x"))
    assert res.metrics.failures == {"http_404": 1}
    assert res.records[0].error == "HTTP 404: model 'x' not found"


async def test_unreachable_server_is_a_counted_failure() -> None:
    spec = _spec("http://127.0.0.1:9", num_requests=3, warmup_requests=1)
    result = await run_load(spec)
    assert result.warmup_failed
    assert result.metrics.completed == 0
    warm = result.records[0]
    assert warm.warmup
    assert warm.failure == FailureReason.CONNECT
    assert "cannot connect" in (warm.error or "")


async def test_timeout(fake_sglang: Any) -> None:
    fake = await fake_sglang(first_delay=2.0)
    result = await run_load(_spec(fake.base_url, num_requests=2, request_timeout_s=0.2))
    assert result.metrics.failures == {FailureReason.TIMEOUT: 2}


async def test_crlf_events(fake_sglang: Any) -> None:
    fake = await fake_sglang(crlf=True, tokens_per_chunk=2)
    result = await run_load(_spec(fake.base_url, num_requests=2))
    assert result.metrics.completed == 2


async def test_warmup_excluded_and_capped(fake_sglang: Any) -> None:
    fake = await fake_sglang()
    result = await run_load(
        _spec(fake.base_url, num_requests=3, warmup_requests=2, dataset=RandomDataset(8, 64, 1.0))
    )
    warm = [r for r in result.records if r.warmup]
    assert len(warm) == 2
    assert all(r.success for r in warm)
    assert [b["sampling_params"]["max_new_tokens"] for b in fake.requests[:2]] == [32, 32]
    assert result.metrics.completed == 3
    assert result.metrics.total_output_tokens == 3 * 64


async def test_max_concurrency_caps_in_flight(fake_sglang: Any) -> None:
    fake = await fake_sglang(token_delay=0.005)
    counters = LoadCounters()
    seen: list[int] = []

    def on_record(rec: RequestRecord) -> None:
        seen.append(counters.in_flight)

    result = await run_load(
        _spec(fake.base_url, num_requests=12, max_concurrency=3), counters=counters, on_record=on_record
    )
    spans = [(r.sent, r.end) for r in result.measured if r.dispatched]
    assert guaranteed_peak(spans, 3) <= result.metrics.peak_in_flight <= 3  # 3 on an idle box
    assert max(seen) <= 3
    assert counters.completed == 12
    assert counters.in_flight == 0
    assert result.metrics.queue_wait.max > 0  # later requests waited at the gate


async def test_closed_loop_duration_bound(fake_sglang: Any) -> None:
    fake = await fake_sglang(token_delay=0.002)
    spec = _spec(
        fake.base_url, arrival=ArrivalProcess.CLOSED, max_concurrency=4, num_requests=None, duration_s=0.5
    )
    result = await run_load(spec)
    m = result.metrics
    assert m.completed >= 8
    spans = [(r.sent, r.end) for r in result.measured if r.dispatched]
    assert guaranteed_peak(spans, 4) <= m.peak_in_flight <= 4  # 4 on an idle box
    assert m.steady_state is not None
    assert m.steady_state.target_concurrency == 4
    assert 0.45 < m.duration < 2.0


async def test_cancel_returns_partial_results(fake_sglang: Any) -> None:
    fake = await fake_sglang(token_delay=0.01, tokens_per_chunk=1)
    cancel = asyncio.Event()
    spec = _spec(
        fake.base_url,
        arrival=ArrivalProcess.CONSTANT,
        request_rate=50.0,
        num_requests=1000,
        dataset=RandomDataset(8, 20, 1.0),
    )
    counters = LoadCounters()
    task = asyncio.create_task(run_load(spec, counters=counters, cancel=cancel))
    async with asyncio.timeout(10.0):  # the run's clock starts after the pool is warm: wait on it
        while counters.completed <= 5:  # noqa: ASYNC110 - counters are plain ints, polled
            await asyncio.sleep(0.02)
    cancel.set()
    result = await asyncio.wait_for(task, 5.0)
    assert result.cancelled
    m = result.metrics
    assert m.completed > 5
    assert m.cancelled > 0
    assert FailureReason.CANCELLED not in m.failures
    assert len(result.records) < 1000


async def test_jsonl_dataset(fake_sglang: Any, tmp_path: Path) -> None:
    path = tmp_path / "prompts.jsonl"
    lines = [{"prompt": "hello there", "output_len": 5}, {"messages": [{"role": "user", "content": "hi"}]}]
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    fake = await fake_sglang()
    spec = _spec(
        fake.base_url, backend=Backend.OPENAI_CHAT, dataset=JsonlDataset(path, output_len=7), num_requests=3
    )
    result = await run_load(spec)
    assert result.metrics.completed == 3
    assert fake.requests[0]["messages"] == [{"role": "user", "content": "hello there"}]
    assert fake.requests[1]["messages"] == [{"role": "user", "content": "hi"}]
    assert [b["max_completion_tokens"] for b in fake.requests] == [5, 7, 5]


async def test_shared_prefix_prompts_and_cache_ratio(fake_sglang: Any) -> None:
    fake = await fake_sglang(cached_tokens=50)
    ds = SharedPrefixDataset(input_len=100, output_len=4, cache_hit_ratio=0.5, num_groups=2)
    result = await run_load(_spec(fake.base_url, dataset=ds, num_requests=4, warmup_requests=1))
    bodies = fake.requests
    assert len(bodies) == 2 + 4  # warm-up covers every group
    measured = [b["input_ids"] for b in bodies[2:]]
    assert measured[0][:50] == measured[2][:50] != measured[1][:50]
    assert measured[0][50:] != measured[2][50:]
    assert result.metrics.cache_hit_ratio == pytest.approx(0.5)


async def test_result_block_and_json(fake_sglang: Any) -> None:
    fake = await fake_sglang(token_delay=0.001)
    result = await run_load(_spec(fake.base_url, num_requests=4, max_concurrency=2))
    block = format_result_block(result)
    assert "============ Serving Benchmark Result ============" in block
    assert "{:<40} {:<10}".format("Successful requests:", 4) in block
    assert "{:<40} {:<10}".format("Max request concurrency:", 2) in block
    d = result.to_dict(details=True)
    json.dumps(d)  # serialisable (no inf, no dataclasses)
    for key in (
        "completed",
        "output_throughput",
        "mean_ttft_ms",
        "p99_itl_ms",
        "concurrency",
        "max_output_tokens_per_s",
        "max_concurrent_requests",
        "input_lens",
        "itls",
        "errors",
    ):
        assert key in d
    assert d["completed"] == 4
    assert d["request_rate"] == "inf"
    assert not math.isnan(d["duration"])


async def test_stream_request_answered_with_plain_json(fake_sglang: Any) -> None:
    fake = await fake_sglang(fail_mode="json_body")
    result = await run_load(_spec(fake.base_url, num_requests=1))
    assert result.metrics.failures == {FailureReason.MALFORMED: 1}
    assert "expected an event stream" in (result.records[0].error or "")


async def test_events_read_together_are_counted_as_sharing_a_read(fake_sglang: Any) -> None:
    # No delay between tokens: the server writes a whole response at once, so the client reads
    # several events per read, and each of those after the first carries the read's time.
    fake = await fake_sglang(token_delay=0.0)
    result = await run_load(_spec(fake.base_url, dataset=RandomDataset(16, 40, 1.0), num_requests=3))
    m = result.metrics
    assert m.completed == 3
    assert m.shared_read_events == sum(r.shared_read_events for r in result.measured) > 0
    events = sum(len(r.chunk_times) for r in result.measured)
    assert m.shared_read_ratio == pytest.approx(m.shared_read_events / events)
    out = result.to_dict()
    assert out["shared_read_events"] == m.shared_read_events
    assert out["timestamps"] in ("kernel", "user")
    assert "Events sharing a read (%):" in format_result_block(result)


@pytest.mark.parametrize("how", ["event", "task"])
async def test_a_stop_during_warmup_leaves_no_unretrieved_exception(fake_sglang: Any, how: str) -> None:
    # The daemon stops a run either way: the cancel event (breaker, shutdown) or cancelling the
    # task. Neither may leave a gather holding an exception nobody reads (asyncio logs
    # "_GatheringFuture exception was never retrieved" at error level when it is collected).
    import gc

    fake = await fake_sglang(first_delay=5.0)
    loop = asyncio.get_running_loop()
    reported: list[dict[str, Any]] = []
    previous = loop.get_exception_handler()
    loop.set_exception_handler(lambda _loop, context: reported.append(context))
    try:
        cancel = asyncio.Event()
        counters = LoadCounters()
        task = asyncio.create_task(
            run_load(_spec(fake.base_url, warmup_requests=4), counters=counters, cancel=cancel)
        )
        async with asyncio.timeout(5.0):
            while len(fake.requests) < 4:  # noqa: ASYNC110 - the fake records as requests arrive
                await asyncio.sleep(0.01)
        assert counters.warmup
        if how == "event":
            cancel.set()
            result = await asyncio.wait_for(task, 5.0)
            assert result.cancelled
        else:
            task.cancel()
            with pytest.raises(asyncio.CancelledError):
                await asyncio.wait_for(task, 5.0)
        for _ in range(3):
            await asyncio.sleep(0)
            gc.collect()
    finally:
        loop.set_exception_handler(previous)
    assert [c.get("message") for c in reported] == []
