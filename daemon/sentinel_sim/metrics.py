"""SGLang v0.5.9's ``/metrics``: the ``sglang:*`` families, their types, labels, help and buckets.

Names, help strings, label sets and bucket edges are those of ``srt/metrics/collector.py`` and
``utils/common.py`` in the 0.5.9 wheel. Semantics follow the real server:

- scheduler gauges are snapshots written only on log events (each Prefill batch, every
  ``decode_log_interval`` decode steps, every 30 s when idle), by the TP0 scheduler;
- ``realtime_tokens_total`` grows on every forward (decode tokens every step, prefill tokens per
  batch); ``cuda_graph_passes_total`` and ``queue_time_seconds`` are written by every TP rank, so
  they have ``tp_size`` identical series;
- tokenizer counters/histograms are written per output chunk (TTFT, ITL with SGLang's weighted
  trick) and per finished request; health probes are excluded;
- gauges without a multiprocess mode (``num_retracted_reqs``, ``num_paused_reqs``) carry a
  ``pid`` label, as prometheus_client's multiprocess collector adds it;
- no ``_created`` series and no families without samples (the multiprocess collector emits
  neither).

Everything lives in a private ``CollectorRegistry`` so that several simulators (and the daemon's
own registry) can share a process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.utils import floatToGoString

__all__ = [
    "E2E_BUCKETS",
    "ITL_BUCKETS",
    "QUEUE_TIME_BUCKETS",
    "TTFT_BUCKETS",
    "SimMetrics",
]

TTFT_BUCKETS: Final = (0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400)
E2E_BUCKETS: Final = (
    0.1, 0.2, 0.4, 0.6, 0.8, 1, 2, 4, 6, 8, 10, 20, 40, 60, 80, 100, 200, 400, 600, 1200, 1800, 2400,
)  # fmt: skip
ITL_BUCKETS: Final = (
    0.002, 0.004, 0.006, 0.008, 0.010, 0.015, 0.020, 0.025, 0.030, 0.035, 0.040, 0.060, 0.080,
    0.100, 0.200, 0.400, 0.600, 0.800, 1.000, 2.000, 4.000, 6.000, 8.000,
)  # fmt: skip
QUEUE_TIME_BUCKETS: Final = (
    0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400,
    500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
)  # fmt: skip
# prometheus_client's own value formatter (Go's float formatting), typed for mypy.
_go_float: Final[Callable[[float], str]] = floatToGoString

RETRACTION_BUCKETS: Final = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 75, 100)

_SCHED_LABELS: Final = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")

# (name, help) of the scheduler gauges log_stats writes on every log event, in its order.
_SCHED_GAUGES: Final = (
    ("num_running_reqs", "The number of running requests."),
    ("num_used_tokens", "The number of used tokens."),
    ("token_usage", "The token usage."),
    (
        "pending_prealloc_token_usage",
        "The token usage for pending preallocated tokens (not preallocated yet).",
    ),
    ("swa_token_usage", "The token usage for SWA layers."),
    ("mamba_usage", "The token usage for Mamba layers."),
    ("decode_sum_seq_lens", "The sum of all sequence lengths in decode."),
    ("gen_throughput", "The generation throughput (token/s)."),
    ("num_queue_reqs", "The number of requests in the waiting queue."),
    ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
    (
        "num_running_reqs_offline_batch",
        "The number of running low-priority offline batch requests(label is 'batch').",
    ),
    ("cache_hit_rate", "The prefix cache hit rate."),
    ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
    ("spec_accept_length", "The average acceptance length of speculative decoding."),
    (
        "spec_accept_rate",
        "The average acceptance rate of speculative decoding "
        "(`accepted tokens / total draft tokens` in batch).",
    ),
    ("num_prefill_prealloc_queue_reqs", "The number of requests in the prefill prealloc queue."),
    ("num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue."),
    ("num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue."),
    ("num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue."),
    ("kv_transfer_speed_gb_s", "The transfer speed of the KV cache in GB/s."),
    ("kv_transfer_latency_ms", "The transfer latency of the KV cache in ms."),
    ("kv_transfer_bootstrap_ms", "The bootstrap time of the KV transfer in ms."),
    ("kv_transfer_alloc_ms", "The allocation waiting time of the KV transfer in ms."),
    ("kv_transfer_total_mb", "The total number of tokens transferred in the KV cache."),
    ("utilization", "The utilization."),
    ("engine_startup_time", "The time taken for the engine to start up."),
    ("engine_load_weights_time", "The time taken for the engine to load weights."),
    ("new_token_ratio", "The new token ratio."),
    ("is_cuda_graph", "Whether the batch is using CUDA graph."),
    ("num_unique_running_routing_keys", "Number of unique routing keys in running batch."),
)


class SimMetrics:
    def __init__(
        self,
        *,
        model_name: str,
        tp_size: int,
        page_size: int,
        max_total_num_tokens: int,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        reg = self.registry
        # (sample name, *label items) -> 'name{labels}', see render().
        self._line_heads: dict[tuple[object, ...], str] = {}
        self.tp_size = tp_size
        self._pid = str(os.getpid())
        self.sched_labels = {
            "model_name": model_name,
            "engine_type": "unified",
            "tp_rank": "0",
            "pp_rank": "0",
            "moe_ep_rank": "0",
        }
        rank_labels = [{**self.sched_labels, "tp_rank": str(r)} for r in range(tp_size)]
        self.tok_labels = {"model_name": model_name}
        sl = list(_SCHED_LABELS)

        self.gauges: dict[str, Gauge] = {}
        self._gauge_children: dict[str, Gauge] = {}
        for name, doc in _SCHED_GAUGES:
            g = Gauge(f"sglang:{name}", doc, sl, registry=reg)
            self.gauges[name] = g
        self.num_retracted_reqs = Gauge(
            "sglang:num_retracted_reqs", "The number of retracted requests.", [*sl, "pid"], registry=reg
        )
        self.num_paused_reqs = Gauge(
            "sglang:num_paused_reqs",
            "The number of paused requests by async weight sync.",
            [*sl, "pid"],
            registry=reg,
        )
        self.retracted_reqs_total = Counter(
            "sglang:num_retracted_requests", "Total number of retracted requests.", sl, registry=reg
        )
        self.retracted_input_total = Counter(
            "sglang:num_retracted_input_tokens", "Total number of retracted input tokens.", sl, registry=reg
        )
        self.retracted_output_total = Counter(
            "sglang:num_retracted_output_tokens", "Total number of retracted output tokens.", sl, registry=reg
        )
        realtime = Counter(
            "sglang:realtime_tokens",
            "Total number of tokens processed (updated on each log interval). "
            "mode: prefill_compute, prefill_cache, decode.",
            [*sl, "mode"],
            registry=reg,
        )
        self.rt_prefill_compute = realtime.labels(**self.sched_labels, mode="prefill_compute")
        self.rt_prefill_cache = realtime.labels(**self.sched_labels, mode="prefill_cache")
        self.rt_decode = realtime.labels(**self.sched_labels, mode="decode")
        self._realtime = realtime
        cg = Counter(
            "sglang:cuda_graph_passes",
            "Total number of forward passes categorized by CUDA graph.",
            [*sl, "mode"],
            registry=reg,
        )
        self._cg_family = cg
        self._cg_children: dict[bool, list[Counter]] = {}
        self._rank_labels = rank_labels
        queue_time = Histogram(
            "sglang:queue_time_seconds",
            "Histogram of queueing time in seconds.",
            sl,
            buckets=QUEUE_TIME_BUCKETS,
            registry=reg,
        )
        self.queue_time_children = [queue_time.labels(**lbl) for lbl in rank_labels]
        self._queue_time = queue_time
        cache_info = Gauge(
            "sglang:cache_config_info",
            "Cache configuration information.",
            ["page_size", "num_pages"],
            registry=reg,
        )
        cache_info.labels(
            page_size=str(page_size), num_pages=str(max_total_num_tokens // max(page_size, 1))
        ).set(1)

        # Tokenizer manager (main process).
        tl = list(self.tok_labels)
        self.prompt_tokens_total = Counter(
            "sglang:prompt_tokens", "Number of prefill tokens processed.", tl, registry=reg
        ).labels(**self.tok_labels)
        self.generation_tokens_total = Counter(
            "sglang:generation_tokens", "Number of generation tokens processed.", tl, registry=reg
        ).labels(**self.tok_labels)
        self._cached_tokens = Counter(
            "sglang:cached_tokens",
            "Number of cached prompt tokens by source (device/host/storage).",
            [*tl, "cache_source"],
            registry=reg,
        )
        self.num_requests_total = Counter(
            "sglang:num_requests", "Number of requests processed.", tl, registry=reg
        ).labels(**self.tok_labels)
        self._aborted = Counter(
            "sglang:num_aborted_requests", "Number of requests aborted.", tl, registry=reg
        )
        self.ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            tl,
            buckets=TTFT_BUCKETS,
            registry=reg,
        ).labels(**self.tok_labels)
        self.itl = Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            tl,
            buckets=ITL_BUCKETS,
            registry=reg,
        ).labels(**self.tok_labels)
        self._itl_bounds = [*ITL_BUCKETS, float("inf")]
        self.e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            tl,
            buckets=E2E_BUCKETS,
            registry=reg,
        ).labels(**self.tok_labels)
        self.retractions = Histogram(
            "sglang:num_retractions",
            "Histogram of retraction counts per request.",
            tl,
            buckets=RETRACTION_BUCKETS,
            registry=reg,
        ).labels(**self.tok_labels)

        # HTTP middleware.
        self.http_requests = Counter(
            "sglang:http_requests",
            "Total number of HTTP requests by endpoint and method",
            ["endpoint", "method"],
            registry=reg,
        )
        self.http_responses = Counter(
            "sglang:http_responses",
            "Total number of HTTP responses by endpoint and status code",
            ["endpoint", "status_code", "method"],
            registry=reg,
        )
        self.http_active = Gauge(
            "sglang:http_requests_active",
            "Number of currently active HTTP requests",
            ["endpoint", "method"],
            registry=reg,
        )
        Gauge(
            "sglang:routing_keys_active", "Number of unique routing keys with active requests", registry=reg
        )

        # Scheduler gauge state: written only by log_stats().
        self.stats: dict[str, float] = dict.fromkeys((n for n, _ in _SCHED_GAUGES), 0.0)
        self.stats["max_total_num_tokens"] = float(max_total_num_tokens)
        self.stats["new_token_ratio"] = 0.7
        self.num_retracted_since_log = 0

    # ---- scheduler side -----------------------------------------------------------------------
    def log_stats(self) -> None:
        """Write every scheduler gauge from ``stats`` (SGLang's log_stats at each log event)."""
        lbl = self.sched_labels
        for name, value in self.stats.items():
            self.gauges[name].labels(**lbl).set(value)
        self.num_retracted_reqs.labels(**lbl, pid=self._pid).set(self.num_retracted_since_log)
        self.num_paused_reqs.labels(**lbl, pid=self._pid).set(0)
        self.num_retracted_since_log = 0

    def cuda_graph_pass(self, used_graph: bool) -> None:
        children = self._cg_children.get(used_graph)
        if children is None:
            mode = "decode_cuda_graph" if used_graph else "decode_none"
            children = [self._cg_family.labels(**lbl, mode=mode) for lbl in self._rank_labels]
            self._cg_children[used_graph] = children
        for c in children:
            c.inc()

    def observe_queue_time(self, seconds: float) -> None:
        for h in self.queue_time_children:
            h.observe(seconds)

    def retracted(self, reqs: int, input_tokens: int, output_tokens: int) -> None:
        lbl = self.sched_labels
        self.retracted_reqs_total.labels(**lbl).inc(reqs)
        self.retracted_input_total.labels(**lbl).inc(input_tokens)
        self.retracted_output_total.labels(**lbl).inc(output_tokens)
        self.num_retracted_since_log += reqs

    # ---- tokenizer side -----------------------------------------------------------------------
    def observe_itl(self, interval: float, num_new_tokens: int) -> None:
        """SGLang's weighted ITL: bucket of interval/n gets n, ``_sum`` gets the whole interval."""
        his = self.itl
        his._sum.inc(interval)
        adjusted = interval / num_new_tokens
        for i, bound in enumerate(self._itl_bounds):
            if adjusted <= bound:
                his._buckets[i].inc(num_new_tokens)
                break

    def finished(
        self, prompt_tokens: int, completion_tokens: int, cached_tokens: int, e2e: float, retractions: int
    ) -> None:
        self.prompt_tokens_total.inc(prompt_tokens)
        self.generation_tokens_total.inc(completion_tokens)
        if cached_tokens > 0:
            self._cached_tokens.labels(**self.tok_labels, cache_source="total").inc(cached_tokens)
        self.num_requests_total.inc()
        self.e2e.observe(e2e)
        self.retractions.observe(retractions)

    def aborted(self) -> None:
        self._aborted.labels(**self.tok_labels).inc()

    # ---- exposition ---------------------------------------------------------------------------
    def render(self) -> bytes:
        """Text format 0.0.4 as ``generate_latest`` writes it, without ``_created`` samples and
        without empty families.

        Why not ``generate_latest``: it re-validates and re-escapes every label name and value of
        every sample on every scrape (~500 samples, most of them histogram buckets), which made a
        scrape cost ~15 ms of CPU on the event loop that also paces the streams. The label part of
        a sample line never changes for a given child, so it is built once and cached.
        """
        out: list[str] = []
        heads = self._line_heads
        for metric in self.registry.collect():
            created = metric.name + "_created"
            lines: list[str] = []
            for sample in metric.samples:
                name = sample.name
                if name == created:
                    continue
                key = (name, *sample.labels.items())
                head = heads.get(key)
                if head is None:
                    head = heads[key] = _line_head(name, sample.labels)
                lines.append(f"{head} {_go_float(sample.value)}\n")
            if not lines:
                continue
            name, kind = metric.name, metric.type
            if kind == "counter":
                name += "_total"
            elif kind == "info":
                name, kind = name + "_info", "gauge"
            elif kind == "unknown":
                kind = "untyped"
            doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
            out.append(f"# HELP {name} {doc}\n# TYPE {name} {kind}\n")
            out.extend(lines)
        return "".join(out).encode("utf-8")


def _line_head(name: str, labels: dict[str, str]) -> str:
    """``name{k="v",...}`` with labels sorted and values escaped, as ``generate_latest`` does."""
    if not labels:
        return name
    inner = ",".join(
        '{}="{}"'.format(k, v.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\""))
        for k, v in sorted(labels.items())
    )
    return f"{name}{{{inner}}}"
