"""SGLang's ``/metrics``: the ``sglang:*`` families, types, labels, help, buckets.

Names, help strings, label sets and bucket edges are those of ``srt/metrics/collector.py`` (0.5.9)
and ``srt/observability/metrics_collector.py`` (0.5.23), the second from the release of the
daemon's ``metrics.module_moved`` row on (0.5.10); what differs is tabled in
:mod:`sglang_sentinel_sim.versions`. Semantics follow the real server:

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
  neither);
- 0.5.23: the tokenizer's request counters and TTFT/E2E/TPOT histograms carry
  ``is_streaming="true"|"false"`` (``observe_one_finished_request``); ``num_retractions`` is gone;
  ``--enable-priority-scheduling`` adds ``priority=""`` to the scheduler labels and writes the
  running/queue gauges once as the total and once per priority seen (``_log_gauge_queue_count``:
  a priority once seen keeps being written, at 0 when empty);
- ``--enable-metrics-for-all-schedulers``: every TP rank writes the scheduler series (log_stats,
  realtime tokens), else only TP rank 0 (0.5.9 ``scheduler_metrics_mixin.py`` L100, 0.5.23
  ``metrics_collector.py`` ``init_new``: ``current_scheduler_metrics_enabled``).

Everything lives in a private ``CollectorRegistry`` so that several simulators (and the daemon's
own registry) can share a process.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Final

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from prometheus_client.utils import floatToGoString

from sglang_sentinel_sim.versions import OLD_WHEEL, SCHED_CONSTANTS, SCHED_GAUGES, has, wheel
from sglang_sentinel_sim.versions import QUEUE_TIME_BUCKETS as _QUEUE_TIME_BY_VERSION

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
QUEUE_TIME_BUCKETS: Final = _QUEUE_TIME_BY_VERSION[OLD_WHEEL]
# prometheus_client's own value formatter (Go's float formatting), typed for mypy.
_go_float: Final[Callable[[float], str]] = floatToGoString

RETRACTION_BUCKETS: Final = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 15, 20, 25, 30, 40, 50, 75, 100)

_SCHED_LABELS: Final = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")
# Scheduler gauges written as a QueueCount (total, plus per priority under priority scheduling).
_QUEUE_COUNT_GAUGES: Final = ("num_running_reqs", "num_queue_reqs")


class SimMetrics:
    def __init__(
        self,
        *,
        model_name: str,
        tp_size: int,
        page_size: int,
        max_total_num_tokens: int,
        version: str = OLD_WHEEL,
        priority_scheduling: bool = False,
        all_schedulers: bool = False,
        constants: dict[str, float] | None = None,
    ) -> None:
        self.registry = CollectorRegistry(auto_describe=False)
        reg = self.registry
        # (sample name, *label items) -> 'name{labels}', see render().
        self._line_heads: dict[tuple[object, ...], str] = {}
        self.version = version
        # The family set: 0.5.9's, or 0.5.23's from the daemon's metrics.module_moved row on.
        new = self._new = has("metrics.module_moved", version)
        table = wheel("metrics.module_moved", version)
        self.tp_size = tp_size
        self._pid = str(os.getpid())
        self.sched_labels = {
            "model_name": model_name,
            "engine_type": "unified",
            "tp_rank": "0",
            "pp_rank": "0",
            "moe_ep_rank": "0",
        }
        # 0.5.23 init_new: labels["priority"] = "" under --enable-priority-scheduling.
        self.priority_scheduling = priority_scheduling and has("metrics.priority_label", version)
        if self.priority_scheduling:
            self.sched_labels["priority"] = ""
        rank_labels = [{**self.sched_labels, "tp_rank": str(r)} for r in range(tp_size)]
        # The ranks whose scheduler writes log_stats / realtime tokens.
        self._writing_ranks = rank_labels if all_schedulers else rank_labels[:1]
        self._known_priorities: dict[str, set[str]] = {name: set() for name in _QUEUE_COUNT_GAUGES}
        # 0.5.23 tokenizer_metric_labels: engine_type too, and priority ("" = none given) under
        # priority scheduling, filled per request.
        self.tok_labels = {"model_name": model_name}
        if new:
            self.tok_labels["engine_type"] = "unified"
        if self.priority_scheduling:
            self.tok_labels["priority"] = ""
        self._itl_children: dict[str, Histogram] = {}
        sl = list(self.sched_labels)
        self._gauge_table = SCHED_GAUGES[table]

        self.gauges: dict[str, Gauge] = {}
        for name, doc in self._gauge_table:
            self.gauges[name] = Gauge(f"sglang:{name}", doc, sl, registry=reg)
        for name, doc in SCHED_CONSTANTS[table]:
            g = Gauge(f"sglang:{name}", doc, sl, registry=reg)
            value = (constants or {}).get(name)
            if value is not None:
                for lbl in self._writing_ranks:
                    g.labels(**lbl).set(value)
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
        self._realtime = realtime
        self._rt_children: dict[str, list[Counter]] = {
            mode: [realtime.labels(**lbl, mode=mode) for lbl in self._writing_ranks]
            for mode in ("prefill_compute", "prefill_cache", "decode")
        }
        self.rt_prefill_compute = _Fanout(self._rt_children["prefill_compute"])
        self.rt_prefill_cache = _Fanout(self._rt_children["prefill_cache"])
        self.rt_decode = _Fanout(self._rt_children["decode"])
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
            buckets=_QUEUE_TIME_BY_VERSION[table],
            registry=reg,
        )
        self.queue_time_children = [queue_time.labels(**lbl) for lbl in rank_labels]
        self._queue_time = queue_time
        if not new:
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
        # 0.5.23: is_streaming on the per-request families (observe_one_finished_request).
        sv = [*tl, "is_streaming"] if new else tl
        self._prompt_tokens = Counter(
            "sglang:prompt_tokens", "Number of prefill tokens processed.", sv, registry=reg
        )
        self._generation_tokens = Counter(
            "sglang:generation_tokens", "Number of generation tokens processed.", sv, registry=reg
        )
        self._cached_tokens = Counter(
            "sglang:cached_tokens",
            "Number of cached prompt tokens by source (device/host/storage).",
            [*tl, "cache_source"],
            registry=reg,
        )
        self._num_requests = Counter("sglang:num_requests", "Number of requests processed.", sv, registry=reg)
        self._aborted = Counter(
            "sglang:num_aborted_requests", "Number of requests aborted.", tl, registry=reg
        )
        self._ttft = Histogram(
            "sglang:time_to_first_token_seconds",
            "Histogram of time to first token in seconds.",
            sv,
            buckets=TTFT_BUCKETS,
            registry=reg,
        )
        self._itl = Histogram(
            "sglang:inter_token_latency_seconds",
            "Histogram of inter-token latency in seconds.",
            tl,
            buckets=ITL_BUCKETS,
            registry=reg,
        )
        self._itl_bounds = [*ITL_BUCKETS, float("inf")]
        self._tpot: Histogram | None = None
        if new:
            self._tpot = Histogram(
                "sglang:request_time_per_output_token_seconds",
                "Per-request TPOT in seconds: (finished_time - first_token_time) / (completion_tokens - 1).",
                sv,
                buckets=ITL_BUCKETS,
                registry=reg,
            )
        self._e2e = Histogram(
            "sglang:e2e_request_latency_seconds",
            "Histogram of End-to-end request latency in seconds",
            sv,
            buckets=E2E_BUCKETS,
            registry=reg,
        )
        self._retractions: Histogram | None = None
        if not new:
            self._retractions = Histogram(
                "sglang:num_retractions",
                "Histogram of retraction counts per request.",
                tl,
                buckets=RETRACTION_BUCKETS,
                registry=reg,
            )

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
        self.stats: dict[str, float] = dict.fromkeys((n for n, _ in self._gauge_table), 0.0)
        self.stats["max_total_num_tokens"] = float(max_total_num_tokens)
        self.stats["new_token_ratio"] = 0.7
        self.num_retracted_since_log = 0

    def _tok(self, priority: int | None) -> dict[str, str]:
        if self.priority_scheduling and priority is not None:
            return {**self.tok_labels, "priority": str(priority)}
        return self.tok_labels

    def _stream_labels(self, stream: bool, priority: int | None) -> dict[str, str]:
        if not self._new:
            return self.tok_labels
        return {**self._tok(priority), "is_streaming": "true" if stream else "false"}

    # ---- scheduler side -----------------------------------------------------------------------
    def log_stats(self, by_priority: dict[str, dict[str, int]] | None = None) -> None:
        """Write every scheduler gauge from ``stats`` (SGLang's log_stats at each log event).

        ``by_priority``: for ``num_running_reqs``/``num_queue_reqs``, the count per priority
        (``str(req.priority)``: ``"None"`` for a request without one, as SGLang's Counter gives).
        """
        for lbl in self._writing_ranks:
            for name, value in self.stats.items():
                gauge = self.gauges.get(name)
                if gauge is not None:
                    gauge.labels(**lbl).set(value)
            if self.priority_scheduling:
                for name in _QUEUE_COUNT_GAUGES:
                    counts = (by_priority or {}).get(name, {})
                    known = self._known_priorities[name]
                    known.update(counts)
                    for priority in known:
                        self.gauges[name].labels(**{**lbl, "priority": priority}).set(counts.get(priority, 0))
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

    def prefill_cuda_graph_pass(self) -> None:
        """0.5.23's set only: ``increment_prefill_cuda_graph_pass`` per Prefill report (metrics ranks)."""
        if not self._new:
            return
        for lbl in self._writing_ranks:
            self._cg_family.labels(**lbl, mode="prefill_none").inc()

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
    def observe_ttft(self, seconds: float, stream: bool, priority: int | None = None) -> None:
        self._ttft.labels(**self._stream_labels(stream, priority)).observe(seconds)

    def observe_itl(self, interval: float, num_new_tokens: int, priority: int | None = None) -> None:
        """SGLang's weighted ITL: bucket of interval/n gets n, ``_sum`` gets the whole interval."""
        key = str(priority)
        his = self._itl_children.get(key)
        if his is None:
            his = self._itl_children[key] = self._itl.labels(**self._tok(priority))
        his._sum.inc(interval)
        adjusted = interval / num_new_tokens
        for i, bound in enumerate(self._itl_bounds):
            if adjusted <= bound:
                his._buckets[i].inc(num_new_tokens)
                break

    def finished(
        self,
        prompt_tokens: int,
        completion_tokens: int,
        cached_tokens: int,
        e2e: float,
        retractions: int,
        *,
        stream: bool = False,
        decode_s: float | None = None,
        priority: int | None = None,
    ) -> None:
        """One finished request; ``decode_s`` = first token to finish (0.5.23's TPOT, stop/length only)."""
        sl = self._stream_labels(stream, priority)
        tok = self._tok(priority)
        self._prompt_tokens.labels(**sl).inc(prompt_tokens)
        self._generation_tokens.labels(**sl).inc(completion_tokens)
        if cached_tokens > 0:
            self._cached_tokens.labels(**tok, cache_source="total").inc(cached_tokens)
        self._num_requests.labels(**sl).inc()
        self._e2e.labels(**sl).observe(e2e)
        if self._tpot is not None and decode_s is not None and completion_tokens > 1:
            self._tpot.labels(**sl).observe(decode_s / (completion_tokens - 1))
        if self._retractions is not None:
            self._retractions.labels(**tok).observe(retractions)

    def aborted(self, priority: int | None = None) -> None:
        self._aborted.labels(**self._tok(priority)).inc()

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


class _Fanout:
    """One increment on every writing rank's child (all-scheduler metrics repeat the figure)."""

    __slots__ = ("_children",)

    def __init__(self, children: list[Counter]) -> None:
        self._children = children

    def inc(self, amount: float = 1) -> None:
        for child in self._children:
            child.inc(amount)
