"""The ``sglang_log`` collector: what only SGLang's log lines say, as series.

Operators read "gen throughput" and "cuda graph: False" off ``Decode batch`` lines by eye; this
turns them into series. Lines come from whichever source the supervisor follows (child output,
journal, a file): the daemon registers :meth:`SGLangLogCollector.feed` as a line listener of the
supervisor (``Supervisor.add_line_listener``). ``feed`` is synchronous and cheap (one regex parse,
a lock) so it can run in the event loop for every line.

Gauges taken from batch lines are snapshots of the last line and are served only while that line
is younger than ``stale_after`` seconds: SGLang prints nothing while idle *and* while stalled, so a
frozen "208 tokens/s" would be a lie either way. ``sentinel_sglang_log_last_decode_timestamp_seconds``
stays, so ``time() - that`` with requests in flight is the stall alert.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from sglang_sentinel.collect.registry import register
from sglang_sentinel.sglang.logparse import (
    UNPARSED_REASONS,
    DecodeBatch,
    HealthCheckFailed,
    KvRetraction,
    NanSanitized,
    PrefillBatch,
    parse_line,
    unparsed_reason,
)

__all__ = ["SGLangLogCollector"]

_P = "sentinel_sglang_log_"


@dataclass(slots=True)
class _Rank:
    """Per data-parallel rank: with DP attention every DP rank prints its own batch lines."""

    decode: DecodeBatch | None = None
    decode_at: float | None = None
    prefill: PrefillBatch | None = None
    prefill_at: float | None = None
    decode_lines: int = 0
    prefill_lines: int = 0
    prefill_new_tokens: int = 0
    prefill_cached_tokens: int = 0
    prefill_sequences: int = 0
    # Which kind came last (line order, not clock: two lines can share a timestamp).
    decode_seq: int = 0
    prefill_seq: int = 0


class SGLangLogCollector:
    def __init__(self, *, stale_after: float = 60.0, clock: Callable[[], float] = time.time) -> None:
        self.stale_after = stale_after
        self._clock = clock
        self._lock = threading.Lock()
        self._ranks: dict[str, _Rank] = {}
        self._lines = 0
        self._last_line_at: float | None = None
        # (kind, reason) -> count; every pair exported from the start, at 0.
        self._unparsed = dict.fromkeys(((k, r) for k in ("decode", "prefill") for r in UNPARSED_REASONS), 0)
        self._nan_sanitized = 0
        self._retractions = 0
        self._retracted_requests = 0
        self._health_check_failures = 0

    def feed(self, line: str, at: float | None = None) -> None:
        """Account for one server log line (with or without its newline). Never raises.

        ``at``: wall-clock time the line was read (default: now).
        """
        event = parse_line(line)
        now = self._clock() if at is None else at
        with self._lock:
            self._lines += 1
            self._last_line_at = now
            if isinstance(event, DecodeBatch):
                rank = self._rank(event.ranks.dp)
                rank.decode, rank.decode_at = event, now
                rank.decode_lines += 1
                rank.decode_seq = self._lines
            elif isinstance(event, PrefillBatch):
                rank = self._rank(event.ranks.dp)
                rank.prefill, rank.prefill_at = event, now
                rank.prefill_lines += 1
                rank.prefill_seq = self._lines
                rank.prefill_new_tokens += event.new_token
                rank.prefill_cached_tokens += event.cached_token
                rank.prefill_sequences += event.new_seq
            elif isinstance(event, KvRetraction):
                self._retractions += 1
                self._retracted_requests += event.retracted_reqs
            elif isinstance(event, HealthCheckFailed):
                self._health_check_failures += 1
            elif isinstance(event, NanSanitized):
                self._nan_sanitized += 1
            elif event is None and ("Decode batch" in line or "Prefill batch" in line):
                # A batch line this parser cannot read: a new SGLang log layout, worth knowing.
                why = unparsed_reason(line) or ("decode" if "Decode batch" in line else "prefill", "error")
                self._unparsed[why] = self._unparsed.get(why, 0) + 1

    def _rank(self, dp: int | None) -> _Rank:
        key = str(dp or 0)
        rank = self._ranks.get(key)
        if rank is None:
            rank = self._ranks[key] = _Rank()
        return rank

    def last_success_timestamp(self) -> float | None:
        return self._last_line_at

    def collect(self) -> Iterator[Metric]:
        now = self._clock()
        with self._lock:
            ranks = {k: _Rank(**{f: getattr(v, f) for f in _Rank.__slots__}) for k, v in self._ranks.items()}
            lines, last_line = self._lines, self._last_line_at
            unparsed = dict(self._unparsed)
            nan_sanitized = self._nan_sanitized
            retractions, retracted = self._retractions, self._retracted_requests
            health = self._health_check_failures

        yield CounterMetricFamily(f"{_P}lines", "Server log lines seen.", value=lines)
        if last_line is not None:
            yield GaugeMetricFamily(
                f"{_P}last_line_timestamp_seconds", "When the last log line arrived.", value=last_line
            )
        unparsed_family = CounterMetricFamily(
            f"{_P}lines_unparsed",
            "Batch lines that could not be parsed (a new SGLang log layout?), by kind and reason: "
            "bad_head, bad_value (a known field not a number), missing_field, error.",
            labels=["kind", "reason"],
        )
        for (kind, reason), count in sorted(unparsed.items()):
            unparsed_family.add_metric([kind, reason], count)
        yield unparsed_family
        yield CounterMetricFamily(
            f"{_P}nan_sanitized",
            "'NaN detected in ...; values were sanitized' lines (SGLANG_SANITIZE_NAN_LOGITS, once per "
            "server process): the model produced NaN logits and kept serving.",
            value=nan_sanitized,
        )
        yield CounterMetricFamily(
            f"{_P}kv_retractions", "'KV cache pool is full. Retract requests.' lines.", value=retractions
        )
        yield CounterMetricFamily(
            f"{_P}retracted_requests",
            "Requests retracted for lack of KV cache, per those lines.",
            value=retracted,
        )
        yield CounterMetricFamily(
            f"{_P}health_check_failures", "SGLang's own 'Health check failed' lines.", value=health
        )

        dp = ["dp_rank"]
        batch_lines = CounterMetricFamily(
            f"{_P}batch_lines", "Batch lines seen, by kind.", labels=[*dp, "kind"]
        )
        last_batch = GaugeMetricFamily(
            f"{_P}last_batch_timestamp_seconds",
            "When the last batch line of this kind arrived.",
            labels=[*dp, "kind"],
        )
        prefill_tokens = CounterMetricFamily(
            f"{_P}prefill_tokens", "Prompt tokens computed in prefill batches (#new-token).", labels=dp
        )
        cached_tokens = CounterMetricFamily(
            f"{_P}prefill_cached_tokens",
            "Prompt tokens served from the prefix cache (#cached-token).",
            labels=dp,
        )
        sequences = CounterMetricFamily(
            f"{_P}prefill_sequences", "Sequences prefilled (#new-seq).", labels=dp
        )
        fresh = " Served while the last batch line is fresh."
        gen = GaugeMetricFamily(
            f"{_P}gen_throughput_tokens_per_second",
            "Decode throughput of the last Decode batch line (tokens since the previous one / seconds)."
            + fresh,
            labels=dp,
        )
        inp = GaugeMetricFamily(
            f"{_P}input_throughput_tokens_per_second",
            "Prefill throughput of the last Prefill batch line." + fresh,
            labels=dp,
        )
        running = GaugeMetricFamily(
            f"{_P}running_requests", "#running-req of the last batch line." + fresh, labels=dp
        )
        queued = GaugeMetricFamily(
            f"{_P}queued_requests", "#queue-req of the last batch line." + fresh, labels=dp
        )
        usage = GaugeMetricFamily(
            f"{_P}token_usage_ratio", "KV cache usage of the last batch line (0-1)." + fresh, labels=dp
        )
        used = GaugeMetricFamily(
            f"{_P}used_tokens", "KV tokens in use (#token) of the last Decode line." + fresh, labels=dp
        )
        graph = GaugeMetricFamily(
            f"{_P}cuda_graph", "1 when the last Decode batch ran as a captured CUDA graph." + fresh, labels=dp
        )
        accept = GaugeMetricFamily(
            f"{_P}spec_accept_length",
            "Speculative decoding accept length of the last Decode line." + fresh,
            labels=dp,
        )
        for key, r in sorted(ranks.items()):
            labels = [key]
            batch_lines.add_metric([key, "decode"], r.decode_lines)
            batch_lines.add_metric([key, "prefill"], r.prefill_lines)
            if r.decode_at is not None:
                last_batch.add_metric([key, "decode"], r.decode_at)
            if r.prefill_at is not None:
                last_batch.add_metric([key, "prefill"], r.prefill_at)
            prefill_tokens.add_metric(labels, r.prefill_new_tokens)
            cached_tokens.add_metric(labels, r.prefill_cached_tokens)
            sequences.add_metric(labels, r.prefill_sequences)
            decode_fresh = (
                r.decode is not None and r.decode_at is not None and now - r.decode_at <= self.stale_after
            )
            prefill_fresh = (
                r.prefill is not None and r.prefill_at is not None and now - r.prefill_at <= self.stale_after
            )
            # The newest fresh line of either kind says how many requests run and wait.
            latest: DecodeBatch | PrefillBatch | None = None
            if decode_fresh and (not prefill_fresh or r.decode_seq > r.prefill_seq):
                latest = r.decode
            elif prefill_fresh:
                latest = r.prefill
            if latest is not None:
                running.add_metric(labels, latest.running_req)
                queued.add_metric(labels, latest.queue_req)
                usage.add_metric(labels, latest.token_usage)
            if decode_fresh and r.decode is not None:
                d = r.decode
                gen.add_metric(labels, d.gen_throughput)
                if d.used_tokens is not None:
                    used.add_metric(labels, d.used_tokens)
                if d.cuda_graph is not None:
                    graph.add_metric(labels, 1.0 if d.cuda_graph else 0.0)
                if d.accept_len is not None:
                    accept.add_metric(labels, d.accept_len)
            if prefill_fresh and r.prefill is not None:
                inp.add_metric(labels, r.prefill.input_throughput)
        for family in (batch_lines, last_batch, prefill_tokens, cached_tokens, sequences):
            yield family
        for family in (gen, inp, running, queued, usage, used, graph, accept):
            if family.samples:
                yield family


@register("sglang_log", section=lambda settings: None)
def _factory(_: None) -> SGLangLogCollector:
    # Needs no configuration: the lines arrive through the daemon's wiring (feed).
    return SGLangLogCollector()
