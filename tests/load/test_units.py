"""Pure pieces of the load engine: statistics, metric definitions, arrivals, datasets, spec, SSE framing."""

from __future__ import annotations

import itertools
import json
import math
import random
from pathlib import Path

import pytest

from sglang_sentinel.load import (
    ArrivalProcess,
    Backend,
    FailureReason,
    JsonlDataset,
    LoadSpec,
    RandomDataset,
    RequestRecord,
    SharedPrefixDataset,
    SpecError,
    compute_metrics,
)
from sglang_sentinel.load.arrivals import planned_offsets
from sglang_sentinel.load.backends import NativeParser, StreamFailure
from sglang_sentinel.load.datasets import PromptSource, load_jsonl
from sglang_sentinel.load.engine import _duration
from sglang_sentinel.load.sink import split_events
from sglang_sentinel.load.stats import percentile, summarize

# ---------------------------------------------------------------- stats (numpy's conventions)


def test_percentile_matches_numpy_linear() -> None:
    # Reference values computed with numpy.percentile(..., method="linear").
    xs = [1.0, 2.0, 3.0, 4.0]
    assert percentile(xs, 50) == 2.5
    assert percentile(xs, 99) == pytest.approx(3.97)
    assert percentile(xs, 90) == pytest.approx(3.7)
    assert percentile([7.0], 99) == 7.0


def test_summarize_population_std_and_empty_is_zero() -> None:
    s = summarize([2.0, 4.0, 4.0, 4.0, 5.0, 5.0, 7.0, 9.0])
    assert s.mean == 5.0
    assert s.std == 2.0  # np.std, ddof=0
    assert s.median == 4.5
    assert s.max == 9.0
    empty = summarize([])
    assert (empty.count, empty.mean, empty.p99) == (0, 0.0, 0.0)


# ---------------------------------------------------------------- metric definitions


def _rec(
    i: int, sent: float, ttft: float, gaps: list[float], tokens: list[int] | None = None
) -> RequestRecord:
    r = RequestRecord(index=i, warmup=False, planned=sent, ready=sent, sent=sent, dispatched=True)
    tokens = tokens or [1] * (len(gaps) + 1)
    times = [ttft]
    for g in gaps:
        times.append(times[-1] + g)
    r.chunk_times, r.chunk_tokens = times, tokens
    r.ttft = ttft
    r.latency = times[-1]
    r.output_len = sum(tokens)
    r.prompt_len = 10
    for t_prev, t, n in zip(times, times[1:], tokens[1:], strict=False):
        r.itl.extend([(t - t_prev) / n] * n)
    r.success = True
    return r


def test_bench_serving_definitions() -> None:
    a = _rec(0, 0.0, 0.5, [0.1, 0.1, 0.1])  # 4 tokens, E2E 0.8
    b = _rec(1, 1.0, 0.2, [0.2, 0.2], tokens=[1, 2, 2])  # MTP: 5 tokens, E2E 0.6
    failed = RequestRecord(index=2, warmup=False, planned=0.5, sent=0.5, dispatched=True)
    failed.failure, failed.latency = "http_503", 0.01
    warm = _rec(3, 0.0, 9.0, [9.0])
    warm.warmup = True
    m = compute_metrics([a, b, failed, warm], duration=2.0)
    assert m.completed == 2
    assert m.failed == 1
    assert m.failures == {"http_503": 1}
    assert m.total_output_tokens == 9
    assert m.output_throughput == 4.5
    assert m.request_throughput == 1.0
    assert m.total_throughput == (20 + 9) / 2.0
    assert m.ttft.mean == pytest.approx(0.35)
    # TPOT = (E2E - TTFT) / (out - 1), per request.
    assert m.tpot.mean == pytest.approx(((0.8 - 0.5) / 3 + (0.6 - 0.2) / 4) / 2)
    # ITL pooled: 3 entries of 0.1 and 2+2 entries of 0.1 (a 0.2 gap spread over 2 tokens).
    assert m.itl.count == 7
    assert m.itl.mean == pytest.approx(0.1)
    assert m.concurrency == pytest.approx((0.8 + 0.6) / 2.0)
    assert m.tokens_per_chunk.mean == pytest.approx(9 / 7)
    # decode rate: (out - first chunk's tokens) / (last chunk - first chunk)
    assert m.decode_rate.median == pytest.approx(10.0)  # a: 3 / 0.3, b: 4 / 0.4
    assert m.max_concurrent_requests == 1  # a: 0..0.8 -> bucket 0; b: 1.0..1.6 -> bucket 1


def test_peak_buckets_like_bench_serving() -> None:
    # Starts/ends in whole-second buckets from the earliest start; inclusive on both ends.
    a = _rec(0, 0.0, 0.15, [0.1] * 9)  # 0.0 .. 1.05 -> buckets 0, 1
    b = _rec(1, 0.95, 0.01, [0.01])  # 0.95 .. 0.97 -> bucket 0
    m = compute_metrics([a, b], duration=1.5)
    assert m.max_concurrent_requests == 2
    assert m.peak_in_flight == 2
    # Tokens per 1-s bucket: a has 10 at 0.15..1.05 (9 in bucket 0, 1 in bucket 1), b two in bucket 0.
    assert m.max_output_tokens_per_s == 11.0


def test_steady_state_window_and_cancelled_not_failed() -> None:
    recs = [_rec(i, 0.1 * i, 0.05, [0.05] * 19) for i in range(4)]  # each 1.0 s long, staggered
    cancelled = RequestRecord(index=9, warmup=False, planned=0.0)
    cancelled.failure = FailureReason.CANCELLED
    m = compute_metrics([*recs, cancelled], duration=1.3, target_concurrency=4, steady_state_fraction=1.0)
    assert m.cancelled == 1
    assert m.failed == 0
    ss = m.steady_state
    assert ss is not None
    assert ss.start == pytest.approx(0.3)  # the 4th request is sent
    assert ss.end == pytest.approx(1.0)  # the 1st one ends
    assert ss.output_throughput > 0


def test_client_bound_flag_and_achieved_rate() -> None:
    recs = [_rec(i, float(i), 0.1, [0.1]) for i in range(5)]
    for r in recs[2:]:
        r.sent += 0.05  # 50 ms late
    m = compute_metrics(recs, duration=5.0, max_schedule_lag=0.01, loop_lags=[0.001] * 10, max_loop_lag=0.02)
    assert m.client_bound
    assert "send delay" in m.client_bound_reasons[0]
    assert "3 of 5 sends late" in m.client_bound_reasons[0]
    assert m.achieved_request_rate == pytest.approx(4 / 4.05)
    fine = compute_metrics(recs[:2], duration=5.0, max_schedule_lag=0.01)
    assert not fine.client_bound


def test_one_hiccup_in_a_small_run_is_not_client_bound() -> None:
    """A 64-prompt run's p99 is its largest lag: one GC pause on a busy host must not mark it
    client-bound (that would silence the throughput-drop alert on every run)."""
    recs = [_rec(i, i * 0.0625, 0.1, [0.1]) for i in range(64)]
    recs[40].sent += 0.08
    recs[41].sent += 0.08
    m = compute_metrics(recs, duration=5.0, max_schedule_lag=0.01, loop_lags=[0.001] * 99 + [0.5])
    assert m.schedule_lag.p99 > 0.01  # the p99 alone would say "client-bound"
    assert not m.client_bound, m.client_bound_reasons


def test_sends_queued_behind_each_other_are_not_a_client_delay() -> None:
    # A burst of 200, sent back to back 0.5 ms apart: the last waits 100 ms (schedule lag),
    # but the client never sat on a sendable request, so the run is not client-bound.
    recs = [_rec(i, 0.0005 * i, 0.1, [0.1]) for i in range(200)]
    for r in recs:
        r.planned = r.ready = 0.0
    m = compute_metrics(recs, duration=1.0, max_schedule_lag=0.01)
    assert m.schedule_lag.p99 > 0.09
    assert m.send_delay.p99 == pytest.approx(0.0005)
    assert not m.client_bound
    # The same burst with the client stalled for 30 ms before each of ten sends is.
    for k in range(10):
        for r in recs[20 * k + 10 :]:
            r.sent += 0.03
    stalled = compute_metrics(recs, duration=1.0, max_schedule_lag=0.01)
    assert stalled.send_delay.max == pytest.approx(0.0305)
    assert stalled.client_bound


def test_loop_lag_flags_only_user_space_stamps() -> None:
    recs = [_rec(i, float(i), 0.1, [0.1]) for i in range(5)]
    lags = [0.05] * 100
    kernel = compute_metrics(recs, duration=5.0, loop_lags=lags, max_loop_lag=0.02, kernel_timestamps=True)
    assert not kernel.client_bound
    user = compute_metrics(recs, duration=5.0, loop_lags=lags, max_loop_lag=0.02, kernel_timestamps=False)
    assert user.client_bound
    assert "event-loop lag" in user.client_bound_reasons[0]


def _closed_loop_burst(n: int, concurrency: int, send_s: float, e2e_s: float) -> list[RequestRecord]:
    """A closed loop's records as an idle client makes them: `concurrency` requests sendable at
    t=0 and sent back to back `send_s` apart, then each freed slot's next request sent
    `send_s` after the slot freed."""
    recs: list[RequestRecord] = []
    free = [k * send_s for k in range(concurrency)]  # when each slot's next request is sendable
    last_sent = -math.inf
    for i in range(n):
        slot = i % concurrency
        ready = 0.0 if i < concurrency else free[slot]
        sent = max(ready, last_sent) + send_s
        r = RequestRecord(index=i, warmup=False, planned=ready, ready=ready, sent=sent, dispatched=True)
        r.ttft, r.latency = 0.05, e2e_s
        r.chunk_times, r.chunk_tokens = [0.05, e2e_s], [1, 15]
        r.output_len, r.prompt_len, r.success = 16, 64, True
        free[slot] = sent + e2e_s
        last_sent = sent
        recs.append(r)
    return recs


def test_an_idle_clients_high_concurrency_run_is_not_client_bound() -> None:
    # The figures of an idle client's 384-request, 128-stream closed loop (0.3 ms per send, the
    # live run's order of magnitude), with a loop kept busy by 128 streams (30 ms ticks): the
    # last of the 128 first sends waits ~38 ms, over the 10 ms threshold, but only behind other
    # sends; with kernel stamps the loop's lag is in no response time.
    recs = _closed_loop_burst(384, 128, 0.0003, 0.4)
    limit = LoadSpec(base_url="http://x").max_schedule_lag_s  # the documented default
    lags = [0.03] * 100
    m = compute_metrics(
        recs, duration=2.0, loop_lags=lags, kernel_timestamps=True, max_schedule_lag=limit, max_loop_lag=0.02
    )
    assert m.schedule_lag.p99 > limit  # the old verdict would flag it
    assert m.send_delay.max < limit
    assert not m.client_bound, m.client_bound_reasons
    # The same run where the client sat 30 ms on each of a few sendable requests is flagged.
    for k in range(1, 6):
        for r in recs[64 * k :]:
            r.sent += 0.03
    stalled = compute_metrics(recs, duration=2.0, kernel_timestamps=True, max_schedule_lag=limit)
    assert stalled.client_bound
    assert "send delay" in stalled.client_bound_reasons[0]


# ---------------------------------------------------------------- arrivals


def test_poisson_draws_free_gaps_by_default_as_bench_serving() -> None:
    spec = LoadSpec(arrival=ArrivalProcess.POISSON, request_rate=20.0, num_requests=2000, seed=5)
    offsets = list(planned_offsets(spec))
    assert len(offsets) == 2000
    assert offsets[0] == 0.0
    rng = random.Random(5)
    t, want = 0.0, []
    for _ in range(2000):
        want.append(t)
        t += rng.expovariate(20.0)
    assert offsets == want  # unscaled exponential draws
    assert offsets[-1] != pytest.approx(1999 / 20.0, rel=1e-6)


def test_poisson_is_seeded_normalised_and_absolute() -> None:
    spec = LoadSpec(
        arrival=ArrivalProcess.POISSON, request_rate=20.0, num_requests=2000, seed=5, exact_rate=True
    )
    offsets = list(planned_offsets(spec))
    assert len(offsets) == 2000
    assert offsets[0] == 0.0
    assert offsets[-1] == pytest.approx(1999 / 20.0)  # mean gap exactly 1/rate
    assert offsets == list(planned_offsets(spec))  # same seed, same schedule
    gaps = [b - a for a, b in itertools.pairwise(offsets)]
    cv = summarize(gaps).std / summarize(gaps).mean
    assert 0.9 < cv < 1.1  # exponential gaps: coefficient of variation ~1
    other = list(
        planned_offsets(
            LoadSpec(
                arrival=ArrivalProcess.POISSON, request_rate=20.0, num_requests=2000, seed=6, exact_rate=True
            )
        )
    )
    assert other != offsets


def test_constant_burst_and_duration_bound_offsets() -> None:
    const = planned_offsets(LoadSpec(arrival=ArrivalProcess.CONSTANT, request_rate=4.0, num_requests=3))
    assert [next(const) for _ in range(3)] == [0.0, 0.25, 0.5]
    burst = planned_offsets(LoadSpec(arrival=ArrivalProcess.BURST, num_requests=3))
    assert [next(burst) for _ in range(3)] == [0.0, 0.0, 0.0]
    endless = planned_offsets(
        LoadSpec(arrival=ArrivalProcess.POISSON, request_rate=5.0, num_requests=None, duration_s=10.0)
    )
    assert len([next(endless) for _ in range(100)]) == 100


# ---------------------------------------------------------------- datasets


def test_random_lengths_follow_range_ratio() -> None:
    src = PromptSource(LoadSpec(dataset=RandomDataset(100, 50, 0.0), seed=3))
    prompts = [next(src) for _ in range(400)]
    assert all(1 <= p.prompt_len <= 100 and len(p.content) == p.prompt_len for p in prompts)
    assert all(1 <= p.output_len <= 50 for p in prompts)
    assert min(p.prompt_len for p in prompts) < 10
    assert max(p.prompt_len for p in prompts) > 90
    fixed = PromptSource(LoadSpec(dataset=RandomDataset(64, 8, 1.0)))
    assert {(len(next(fixed).content), 8) for _ in range(20)} == {(64, 8)}
    half = PromptSource(LoadSpec(dataset=RandomDataset(100, 100, 0.5)))
    assert all(50 <= next(half).prompt_len <= 100 for _ in range(100))
    again = PromptSource(LoadSpec(dataset=RandomDataset(100, 50, 0.0), seed=3))
    assert [next(again).content for _ in range(5)] == [p.content for p in prompts[:5]]


def test_text_backends_get_words_and_warmup_differs_from_measured() -> None:
    spec = LoadSpec(backend=Backend.OPENAI_CHAT, dataset=RandomDataset(30, 5, 1.0))
    src = PromptSource(spec)
    first = next(src)
    assert isinstance(first.content, str)
    assert len(first.content.split()) == 30
    warm = PromptSource(spec).warmup(2)
    assert warm[0].content != first.content
    assert warm[0].output_len == 5


def test_shared_prefix_groups() -> None:
    ds = SharedPrefixDataset(input_len=10, output_len=3, cache_hit_ratio=0.6, num_groups=2)
    assert ds.prefix_len == 6
    src = PromptSource(LoadSpec(dataset=ds))
    p = [next(src) for _ in range(4)]
    assert [x.group for x in p] == [0, 1, 0, 1]
    assert p[0].content[:6] == p[2].content[:6]
    assert p[0].content[:6] != p[1].content[:6]
    assert all(len(x.content) == 10 for x in p)
    assert len(PromptSource(LoadSpec(dataset=ds)).warmup(1)) == 1


@pytest.mark.parametrize(
    ("line", "backend", "message"),
    [
        ("{not json", Backend.SGLANG, "not JSON"),
        ('{"input_ids": [1, 2]}', Backend.OPENAI_CHAT, "need the native backend"),
        ('{"messages": [{"role": "user", "content": "x"}]}', Backend.SGLANG, "need the chat backend"),
        ('{"prompt": "x", "output_len": 0}', Backend.SGLANG, "output_len must be a positive integer"),
        ('{"other": 1}', Backend.SGLANG, "needs a non-empty"),
        ("[1, 2]", Backend.SGLANG, "expected a JSON object"),
    ],
)
def test_jsonl_errors_name_the_line(tmp_path: Path, line: str, backend: Backend, message: str) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"prompt": "ok"}\n' + line + "\n")
    with pytest.raises(SpecError, match=rf"d\.jsonl:2: .*{message}"):
        load_jsonl(JsonlDataset(path), backend)


def test_jsonl_empty_file(tmp_path: Path) -> None:
    path = tmp_path / "empty.jsonl"
    path.write_text("\n\n")
    with pytest.raises(SpecError, match="has no prompts"):
        load_jsonl(JsonlDataset(path), Backend.SGLANG)


# ---------------------------------------------------------------- spec


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"arrival": ArrivalProcess.CLOSED}, "need max_concurrency"),
        ({"arrival": ArrivalProcess.POISSON}, "finite request_rate"),
        ({"arrival": ArrivalProcess.CONSTANT, "request_rate": -1.0}, "finite request_rate"),
        ({"num_requests": None}, "needs a bound"),
        ({"num_requests": 0}, "num_requests must be >= 1"),
        ({"base_url": "127.0.0.1:30000"}, "must start with http"),
        ({"headers": {"X-A": "b\r\nInjected: 1"}}, "line break"),
        ({"max_concurrency": 0}, "max_concurrency must be >= 1"),
        ({"duration_s": math.inf}, "duration_s"),
    ],
)
def test_spec_validation(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(SpecError, match=message):
        LoadSpec(**kwargs)  # type: ignore[arg-type]


def test_spec_is_frozen_and_hides_the_key() -> None:
    spec = LoadSpec(api_key="secret-123", headers={"X-A": "1"}, base_url="http://h:1/")
    assert spec.base_url == "http://h:1"
    assert "secret-123" not in repr(spec)
    with pytest.raises(TypeError):
        spec.headers["X-B"] = "2"  # type: ignore[index]
    assert Backend.parse("vllm-chat") is Backend.OPENAI_CHAT
    with pytest.raises(SpecError, match="unknown backend"):
        Backend.parse("tgi")


# ---------------------------------------------------------------- SSE framing and the native fast path


def test_split_events_handles_partial_multi_crlf_comments_and_multiline() -> None:
    events, rest = split_events(b'data: {"a":1}\n\ndata: {"b"')
    assert events == [b'{"a":1}']
    assert rest == b'data: {"b"'
    events, rest = split_events(rest + b":2}\n\n: keep-alive\n\nevent: x\ndata: l1\ndata: l2\n\n")
    assert events == [b'{"b":2}', b"l1\nl2"]
    assert rest == b""
    events, _ = split_events(b"data:[DONE]\r\n\r\n")
    assert events == [b"[DONE]"]


def _native_events(n: int, per_chunk: int = 1, spaced: bool = False) -> list[bytes]:
    out, done = [], 0
    sep = (", ", ": ") if spaced else (",", ":")
    while done < n:
        done = min(n, done + per_chunk)
        fr = {"type": "length", "length": n} if done == n else None
        meta = {
            "id": "r",
            "finish_reason": fr,
            "prompt_tokens": 7,
            "completion_tokens": done,
            "cached_tokens": 3,
        }
        out.append(
            json.dumps({"text": "x" * done, "output_ids": [], "meta_info": meta}, separators=sep).encode()
        )
    return out


@pytest.mark.parametrize("spaced", [False, True])
def test_native_fast_path_equals_full_decode(spaced: bool) -> None:
    events = _native_events(10, per_chunk=3, spaced=spaced)
    fast = RequestRecord(index=0, warmup=False, planned=0.0)
    full = RequestRecord(index=0, warmup=False, planned=0.0)
    pf, pj = NativeParser(fast, keep_text=False), NativeParser(full, keep_text=True)
    for k, ev in enumerate(events):
        pf.feed_bytes(ev, 0.1 * (k + 1))
        pj.feed_bytes(ev, 0.1 * (k + 1))  # keep_text forces full decoding
    pf.finish()
    pj.finish()
    for attr in (
        "ttft",
        "chunk_times",
        "chunk_tokens",
        "itl",
        "output_len",
        "prompt_tokens",
        "cached_tokens",
    ):
        assert getattr(fast, attr) == getattr(full, attr), attr
    assert fast.finish_reason == full.finish_reason == "length"
    assert pf.finished
    assert full.text == "x" * 10


def test_native_abort_in_last_event_is_seen_by_the_fast_path() -> None:
    events = _native_events(4)
    events[-1] = events[-1].replace(b'{"type":"length","length":4}', b'{"type":"abort","message":"oom"}')
    rec = RequestRecord(index=0, warmup=False, planned=0.0)
    parser = NativeParser(rec, keep_text=False)
    for k, ev in enumerate(events):
        parser.feed_bytes(ev, float(k))
    with pytest.raises(StreamFailure, match="oom") as info:
        parser.finish()
    assert info.value.reason == FailureReason.ABORTED


def test_native_textless_event_carries_tokens_forward() -> None:
    rec = RequestRecord(index=0, warmup=False, planned=0.0)
    parser = NativeParser(rec, keep_text=False)
    parser.feed_bytes(b'{"text":"a","meta_info":{"completion_tokens":1,"finish_reason":null}}', 0.1)
    parser.feed_bytes(b'{"text":"","meta_info":{"completion_tokens":2,"finish_reason":null}}', 0.2)
    parser.feed_bytes(b'{"text":"abc","meta_info":{"completion_tokens":3,"finish_reason":null}}', 0.3)
    parser.finish()
    assert rec.chunk_tokens == [1, 2]
    assert rec.itl == pytest.approx([0.1, 0.1])


def test_duration_ends_at_the_last_response_not_at_the_clients_backlog() -> None:
    recs = []
    for i, (sent, latency) in enumerate([(0.0, 1.0), (0.5, 2.0)]):
        r = RequestRecord(index=i, warmup=False, planned=0.0, sent=sent, dispatched=True)
        r.latency = latency
        recs.append(r)
    warm = RequestRecord(index=0, warmup=True, planned=0.0, sent=-3.0, dispatched=True)
    warm.latency = 9.0
    assert _duration([warm, *recs], now=3.0, cancelled=False) == 2.5
    recs[1].failure = FailureReason.CANCELLED
    assert _duration(recs, now=3.0, cancelled=False) == 3.0  # unfinished: the run lasted until now
    recs[1].failure = None
    assert _duration(recs, now=3.0, cancelled=True) == 3.0
