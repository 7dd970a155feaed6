"""Run figures from request records: the one place where each metric is defined.

Definitions (successful, non-warm-up requests only unless noted):

bench_serving's (v0.5.9 `calculate_metrics`), kept identical so the two tools can be diffed:
- duration: first planned send of the measured phase -> last response end (any outcome).
- request throughput = completed / duration.
- input token throughput = Σ prompt tokens / duration. Prompt tokens are the server's
  `prompt_tokens` when it reports them, else the planned (dataset) length; with the native
  backend's `input_ids` the two are equal.
- output token throughput = Σ output tokens / duration; output tokens are the server's
  `completion_tokens` (native `meta_info`, OpenAI `usage`), else the counted tokens.
- total token throughput = (Σ input + Σ output) / duration.
- TTFT = first token-bearing chunk - send time (chat: reasoning or content, as bench_serving
  v0.5.12+ counts it). E2E = last byte of the response - send time.
- TPOT = (E2E - TTFT) / (output tokens - 1), per request, only when output tokens > 1.
- ITL = pooled list over requests; each chunk after the first contributes its gap to the
  previous chunk spread evenly over the tokens it carries (gap / n, n times), which is what
  bench_serving does for the native backend. For chat/completions this is per token when the
  server reports per-chunk usage, else one entry per chunk (bench_serving's chat behaviour).
- concurrency = Σ E2E / duration (mean requests in flight).
- peak concurrent requests: a request counts in every whole-second bucket from int(start) to
  int(end) inclusive, buckets from the earliest start; the max bucket.
- peak output token throughput: tokens counted in whole-second buckets from the earliest start;
  the max bucket. (bench_serving places tokens at start + TTFT + cumsum(ITL), which puts a
  multi-token first chunk's extra tokens later; we place each chunk's tokens at its arrival.)
- Statistics: numpy conventions (see `stats`).

- goodput (`--goodput ttft:MS tpot:MS e2el:MS`, bench_serving 0.5.23 `calculate_goodput`): a
  request is good when it succeeded and met every given SLO (observed <= SLO; a one-token
  response's TPOT counts as 0); request goodput = good / duration; SLO attainment = good / all
  measured requests (failed ones included), and per SLO the share that met it.

Ours:
- TTFC: time to first content token (after any reasoning), chat only.
- tokens per chunk: pooled over all token-bearing chunks (> 1 with multi-token prediction).
- decode rate: per request, (output tokens - first chunk's tokens) / (last chunk - first chunk),
  in tokens/s; needs two chunks.
- reasoning / content tokens: per-chunk token counts attributed to the delta kind.
- peak in flight: exact maximum of the in-flight step function (all outcomes).
- steady state: the window from the first moment in-flight reaches `steady_state_fraction` x
  target concurrency to the last moment it is still there; throughput = output tokens that
  arrived inside it / its length. Target = max_concurrency, else num_requests for bursts, else
  the peak in flight.
- achieved request rate = (sent - 1) / (last send - first send), measured phase.
- schedule lag = actual send - the time the request could be sent (client delay only);
  queue wait = admission wait at the max_concurrency gate; loop lag = event-loop wake-up delay.
- cache hit ratio = Σ cached_tokens / Σ prompt tokens, where the server reports cached tokens.
- send delay: the part of a request's schedule lag that the client spent NOT sending: actual
  send - max(the time it could be sent, the previous send of the run). Requests that became
  sendable together (a burst, a closed loop's batch of freed slots) go out one after another,
  and the k-th waits k sends (~0.1-0.4 ms each here) in any client: that wait is schedule lag
  but not a delay of the client's making, so it is not counted here.
- client_bound (the verdict: the client delayed work): p99 send delay above `max_schedule_lag`
  (default 10 ms: a request held that long by a busy or starved client shifts the server's
  load by more than one decode step of a loaded SGLang, ~10-50 ms), or, only when reads are
  stamped in user space, p99 loop lag above `max_loop_lag` (default 20 ms): there every
  response time carries the loop's queueing. With kernel receive stamps the loop's lag is not
  in any response time, and its effect on sends is what the send delay measures, so a busy
  loop alone (high concurrency on an idle client) does not flag the run.
  Either needs at least MIN_LATE_SAMPLES samples over its threshold: in a small run the p99 is
  the largest sample, and one hiccup of a busy host is not a client bottleneck.
- shared-read events: events that arrived in the same socket read as an earlier event, so carry
  that read's time (their ITL is the read's). Zero for a client that keeps up; reported, with
  their share of all events, as a check on ITL's resolution.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from sglang_sentinel.load.records import FailureReason, RequestRecord
from sglang_sentinel.load.stats import Summary, summarize

__all__ = [
    "Goodput",
    "RunMetrics",
    "SteadyState",
    "compute_metrics",
    "concurrency_buckets",
    "in_flight_steps",
    "token_buckets",
]


@dataclass(frozen=True, slots=True)
class SteadyState:
    start: float  # run clock
    end: float
    target_concurrency: int
    output_throughput: float  # tokens/s inside the window
    request_throughput: float  # completions/s inside the window


@dataclass(frozen=True, slots=True)
class RunMetrics:
    completed: int
    failed: int
    cancelled: int
    failures: dict[str, int]
    duration: float
    total_input_tokens: int
    total_output_tokens: int
    request_throughput: float
    input_throughput: float
    output_throughput: float
    total_throughput: float
    ttft: Summary
    ttfc: Summary
    tpot: Summary
    itl: Summary
    e2e: Summary
    concurrency: float
    max_output_tokens_per_s: float
    max_concurrent_requests: int
    peak_in_flight: int
    tokens_per_chunk: Summary
    decode_rate: Summary
    reasoning_tokens: int
    content_tokens: int
    steady_state: SteadyState | None
    achieved_request_rate: float | None
    schedule_lag: Summary
    send_delay: Summary
    queue_wait: Summary
    loop_lag: Summary
    cache_hit_ratio: float | None
    client_bound: bool
    client_bound_reasons: tuple[str, ...]
    # Σ RequestRecord.shared_read_events over successful requests, and its share of their events.
    shared_read_events: int = 0
    shared_read_ratio: float = 0.0
    goodput: Goodput | None = None


@dataclass(frozen=True, slots=True)
class Goodput:
    slos_ms: dict[str, float]
    request_goodput: float  # good requests/s
    slo_attainment: float  # good / measured requests
    attainment_by_metric: dict[str, float]


def _goodput(measured: Sequence[RequestRecord], slos_ms: dict[str, float], duration: float) -> Goodput | None:
    if not slos_ms:
        return None
    good = 0
    met_count = dict.fromkeys(slos_ms, 0)
    for r in measured:
        if not r.success or r.ttft is None or r.latency is None:
            continue
        tpot = (r.latency - r.ttft) / (r.output_len - 1) if r.output_len > 1 else 0.0
        observed = {"ttft": r.ttft * 1e3, "tpot": tpot * 1e3, "e2el": r.latency * 1e3}
        met = [k for k, slo in slos_ms.items() if observed[k] <= slo]
        for k in met:
            met_count[k] += 1
        if len(met) == len(slos_ms):
            good += 1
    n = len(measured)
    return Goodput(
        slos_ms=dict(slos_ms),
        request_goodput=good / duration if duration > 0 else 0.0,
        slo_attainment=good / n if n else 0.0,
        attainment_by_metric={k: (c / n if n else 0.0) for k, c in met_count.items()},
    )


# The client-bound verdict (it keeps a run out of the throughput-drop alert) needs the p99 lag over
# its threshold *and* at least this many late samples. In a small run (the 64-prompt reference run)
# the p99 of the schedule lag is its largest sample or next to it, so one GC pause or scheduler
# tick on a busy host would mark every run client-bound and silence the alert for good; a client
# that really is the bottleneck delays many sends, not one or two. Large runs are unaffected
# (1% of 1000 sends is already 10).
MIN_LATE_SAMPLES = 3


def _late(values: Sequence[float], limit: float) -> int:
    return sum(1 for v in values if v > limit)


def in_flight_steps(records: Sequence[RequestRecord]) -> list[tuple[float, int]]:
    """(time, in-flight after this time) at every send/end, time-ordered; ends before sends."""
    events: list[tuple[float, int]] = []
    for r in records:
        if not r.dispatched:
            continue
        end = r.end
        events.append((r.sent, 1))
        events.append((end if end is not None else r.sent, -1))
    events.sort(key=lambda e: (e[0], e[1]))
    level = 0
    steps: list[tuple[float, int]] = []
    for t, delta in events:
        level += delta
        steps.append((t, level))
    return steps


def _steady_state(
    records: Sequence[RequestRecord],
    ok: Sequence[RequestRecord],
    steps: list[tuple[float, int]],
    target: int | None,
    fraction: float,
) -> SteadyState | None:
    if not steps:
        return None
    peak = max(level for _, level in steps)
    if target is None:
        target = peak
    threshold = max(fraction * target, 1.0)
    start: float | None = None
    end: float | None = None
    for i, (t, level) in enumerate(steps):
        if level >= threshold:
            if start is None:
                start = t
            end = steps[i + 1][0] if i + 1 < len(steps) else t
    if start is None or end is None or end - start <= 0.0:
        return None
    tokens = 0
    done = 0
    for r in ok:
        for ct, n in zip(r.chunk_times, r.chunk_tokens, strict=True):
            if start <= r.sent + ct <= end:
                tokens += n
        e = r.end
        if e is not None and start <= e <= end:
            done += 1
    span = end - start
    return SteadyState(start, end, target, tokens / span, done / span)


def token_buckets(ok: Sequence[RequestRecord]) -> tuple[float, list[int]]:
    """Output tokens per whole second from the earliest send of ``ok``: (that send, counts).

    Each chunk's tokens count in the second it arrived (the peak output throughput's buckets,
    and the bench report's throughput-over-time plot)."""
    if not ok:
        return 0.0, []
    first = min(r.sent for r in ok)
    last = max(r.sent + (r.latency or 0.0) for r in ok)
    n_buckets = math.ceil(last - first) + 1
    tokens = [0] * n_buckets
    for r in ok:
        for ct, n in zip(r.chunk_times, r.chunk_tokens, strict=True):
            b = int(r.sent + ct - first)
            if 0 <= b < n_buckets:
                tokens[b] += n
    return first, tokens


def concurrency_buckets(ok: Sequence[RequestRecord], first: float, n_buckets: int) -> list[int]:
    """Requests running at some point of each whole second from ``first`` (token_buckets' seconds):
    bench_serving's concurrent_requests_per_second (peak concurrent requests, --plot-throughput)."""
    conc = [0] * n_buckets
    for r in ok:
        lo = int(r.sent - first)
        hi = int(r.sent + (r.latency or 0.0) - first)
        for b in range(lo, min(hi + 1, n_buckets)):
            conc[b] += 1
    return conc


def _bucket_peaks(ok: Sequence[RequestRecord]) -> tuple[float, int]:
    if not ok:
        return 0.0, 0
    first, tokens = token_buckets(ok)
    return float(max(tokens)), max(concurrency_buckets(ok, first, len(tokens)))


def _send_delays(dispatched: Sequence[RequestRecord]) -> list[float]:
    """Per request: sent - max(ready, the run's previous send), see the module docstring."""
    out: list[float] = []
    prev = -math.inf
    for r in sorted(dispatched, key=lambda r: r.sent):
        out.append(max(r.sent - max(r.ready, prev), 0.0))
        prev = r.sent
    return out


def compute_metrics(
    records: Sequence[RequestRecord],
    *,
    duration: float,
    loop_lags: Sequence[float] = (),
    kernel_timestamps: bool = False,
    goodput_slos_ms: dict[str, float] | None = None,
    target_concurrency: int | None = None,
    steady_state_fraction: float = 0.9,
    max_schedule_lag: float = math.inf,
    max_loop_lag: float = math.inf,
) -> RunMetrics:
    """Figures for the measured (non-warm-up) records of one run; see the module docstring."""
    measured = [r for r in records if not r.warmup]
    ok = [r for r in measured if r.success]
    failures = Counter(r.failure for r in measured if not r.success and r.failure)
    cancelled = failures.pop(FailureReason.CANCELLED, 0)
    dur = duration if duration > 0 else math.nan

    total_in = sum(r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len for r in ok)
    total_out = sum(r.output_len for r in ok)
    ttfts = [r.ttft for r in ok if r.ttft is not None]
    ttfcs = [r.ttfc for r in ok if r.ttfc is not None]
    e2es = [r.latency for r in ok if r.latency is not None]
    tpots = [
        (r.latency - r.ttft) / (r.output_len - 1)
        for r in ok
        if r.output_len > 1 and r.latency is not None and r.ttft is not None
    ]
    itls = [gap for r in ok for gap in r.itl]
    per_chunk = [float(n) for r in ok for n in r.chunk_tokens]
    rates = []
    for r in ok:
        if len(r.chunk_times) >= 2:
            span = r.chunk_times[-1] - r.chunk_times[0]
            if span > 0:
                rates.append((r.output_len - r.chunk_tokens[0]) / span)

    peak_tokens, peak_conc = _bucket_peaks(ok)
    steps = in_flight_steps(measured)
    steady = _steady_state(measured, ok, steps, target_concurrency, steady_state_fraction)

    dispatched = [r for r in measured if r.dispatched]
    sent = sorted(r.sent for r in dispatched)
    achieved = (len(sent) - 1) / (sent[-1] - sent[0]) if len(sent) >= 2 and sent[-1] > sent[0] else None
    schedule_lag = summarize([r.schedule_lag for r in dispatched])
    delays = _send_delays(dispatched)
    send_delay = summarize(delays)
    queue_wait = summarize([r.queue_wait for r in dispatched])
    loop_lag = summarize(loop_lags)

    cached = [
        (r.cached_tokens, r.prompt_tokens) for r in ok if r.cached_tokens is not None and r.prompt_tokens
    ]
    cache_ratio = sum(c for c, _ in cached) / sum(p or 0 for _, p in cached) if cached else None

    reasons: list[str] = []
    late_sends = _late(delays, max_schedule_lag)
    if send_delay.count and send_delay.p99 > max_schedule_lag and late_sends >= MIN_LATE_SAMPLES:
        reasons.append(
            f"p99 send delay {send_delay.p99 * 1e3:.2f} ms > {max_schedule_lag * 1e3:.2f} ms "
            f"({late_sends} of {send_delay.count} sends late)"
        )
    late_ticks = _late(loop_lags, max_loop_lag)
    if (
        not kernel_timestamps
        and loop_lag.count
        and loop_lag.p99 > max_loop_lag
        and late_ticks >= MIN_LATE_SAMPLES
    ):
        reasons.append(
            f"p99 event-loop lag {loop_lag.p99 * 1e3:.2f} ms > {max_loop_lag * 1e3:.2f} ms"
            f" (user-space stamps; {late_ticks} of {loop_lag.count} samples late)"
        )

    shared = sum(r.shared_read_events for r in ok)
    n_events = sum(len(r.chunk_times) for r in ok)

    def per_s(x: float) -> float:
        return x / dur if math.isfinite(dur) else 0.0

    return RunMetrics(
        completed=len(ok),
        failed=sum(failures.values()),
        cancelled=cancelled,
        failures=dict(sorted(failures.items())),
        duration=duration,
        total_input_tokens=total_in,
        total_output_tokens=total_out,
        request_throughput=per_s(len(ok)),
        input_throughput=per_s(total_in),
        output_throughput=per_s(total_out),
        total_throughput=per_s(total_in + total_out),
        ttft=summarize(ttfts),
        ttfc=summarize(ttfcs),
        tpot=summarize(tpots),
        itl=summarize(itls),
        e2e=summarize(e2es),
        concurrency=per_s(math.fsum(e2es)),
        max_output_tokens_per_s=peak_tokens,
        max_concurrent_requests=peak_conc,
        peak_in_flight=max((level for _, level in steps), default=0),
        tokens_per_chunk=summarize(per_chunk),
        decode_rate=summarize(rates),
        reasoning_tokens=sum(r.reasoning_tokens for r in ok),
        content_tokens=sum(r.content_tokens for r in ok),
        steady_state=steady,
        achieved_request_rate=achieved,
        schedule_lag=schedule_lag,
        send_delay=send_delay,
        queue_wait=queue_wait,
        loop_lag=loop_lag,
        cache_hit_ratio=cache_ratio,
        client_bound=bool(reasons),
        client_bound_reasons=tuple(reasons),
        shared_read_events=shared,
        shared_read_ratio=shared / n_events if n_events else 0.0,
        goodput=_goodput(measured, goodput_slos_ms or {}, duration),
    )
