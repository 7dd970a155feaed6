# ruff: noqa: E501  (help strings are SGLang's, one per line to stay greppable against the wheel)
"""What differs between the SGLang versions the simulator speaks: 0.5.9 and 0.5.23 (the default).

Every text here is copied from the unpacked wheels (paths inside ``sglang/``); the daemon's own
table of the same differences is ``sglang_sentinel.sglang.versions`` (and docs/sglang-versions.md).

- Scheduler log lines: 0.5.9 ``srt/managers/scheduler_metrics_mixin.py`` ``log_prefill_stats`` /
  ``log_decode_stats``; 0.5.23 ``srt/managers/scheduler_components/metrics_reporter.py``
  ``report_prefill_stats`` / ``report_decode_stats`` with the pool parts of
  ``scheduler_components/pool_stats_observer.py`` ``PoolStats.get_*_usage_msg_parts``. 0.5.23's
  Prefill line adds ``#pending-token`` and puts ``cuda graph`` *before* ``input throughput``,
  whose figure is now this batch's tokens over the gap (0.5.9: the previous batch's).
  ``--enable-hisparse`` (0.5.23) prints ``#gpu token/gpu token usage/#cpu token/cpu token usage``
  on Decode lines instead of ``#token/token usage``; the Prefill line keeps ``token usage``.
- Retraction line: ``srt/managers/scheduler.py`` in both; 0.5.23 adds ``#mamba_num_gained`` only
  for hybrid-SSM models (none of the profiles), so the line is the same here.
- Metrics: 0.5.9 ``srt/metrics/collector.py``; 0.5.23 ``srt/observability/metrics_collector.py``
  (:data:`SCHED_GAUGES`, tokenizer families with ``is_streaming``, queue-time buckets).
- ``/v1/loads``: ``srt/entrypoints/v1_loads.py`` (0.5.23 has no ``aggregate``/``dp_rank_count`` and
  the ``LoadSnapshot`` core fields of ``srt/managers/load_snapshot.py``).
"""

from __future__ import annotations

import time
from datetime import UTC, datetime
from typing import Any, Final

__all__ = [
    "DEFAULT_VERSION",
    "QUEUE_TIME_BUCKETS",
    "SCHED_CONSTANTS",
    "SCHED_GAUGES",
    "VERSIONS",
    "decode_line",
    "loads_body",
    "prefill_line",
    "retract_line",
    "retractions_key",
]

VERSIONS: Final = ("0.5.9", "0.5.23")
DEFAULT_VERSION: Final = "0.5.23"

# (name, help) of the scheduler gauges ``log_stats`` writes on every log event, in its order.
# 0.5.9: srt/metrics/collector.py SchedulerMetricsCollector.log_stats.
_GAUGES_059: Final = (
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
        "The average acceptance rate of speculative decoding (`accepted tokens / total draft tokens` in batch).",
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
# 0.5.23: srt/observability/metrics_collector.py SchedulerMetricsCollector.log_stats (without the
# LoRA / HiCache / streaming-session blocks, off by default). The KV transfer figures became
# histograms (written only under PD), engine_startup_time moved to the tokenizer's
# startup_time_seconds{phase}, num_prefill_prealloc_queue_reqs became ..._bootstrap_...
_GAUGES_0523: Final = (
    ("num_running_reqs", "The number of running requests."),
    ("num_queue_reqs", "The number of requests in the waiting queue."),
    ("num_grammar_queue_reqs", "The number of requests in the grammar waiting queue."),
    ("gen_throughput", "The generation throughput (token/s)."),
    ("cache_hit_rate", "The prefix cache hit rate."),
    ("decode_sum_seq_lens", "The sum of all sequence lengths in decode."),
    ("token_usage", "The token usage."),
    ("full_token_usage", "The token usage for full attention layers."),
    ("swa_token_usage", "The token usage for SWA layers."),
    ("mamba_usage", "The token usage for Mamba layers."),
    ("num_used_tokens", "The number of used tokens."),
    ("kv_available_tokens", "Number of free token slots in the KV cache pool."),
    ("kv_evictable_tokens", "Number of evictable (radix-cached) token slots in the KV cache pool."),
    ("kv_used_tokens", "Number of actively used token slots in the KV cache pool."),
    ("swa_available_tokens", "Number of free token slots in the SWA pool (hybrid-SWA only)."),
    ("swa_evictable_tokens", "Number of evictable (radix-cached) token slots in the SWA pool."),
    ("swa_used_tokens", "Number of actively used token slots in the SWA pool."),
    ("mamba_available_tokens", "Number of free state slots in the mamba SSM pool (hybrid-SSM only)."),
    ("mamba_evictable_tokens", "Number of evictable (radix-cached) state slots in the mamba SSM pool."),
    ("mamba_used_tokens", "Number of actively used state slots in the mamba SSM pool."),
    (
        "spec_accept_length",
        "Mean acceptance length of speculative decoding (accepted drafts + bonus token per forward).",
    ),
    ("spec_accept_rate", "Speculative acceptance rate (`accepted drafts / proposed drafts` in batch)."),
    (
        "spec_cap_length",
        "Mean DSpark confidence-scheduled verify window per verify step, incl the bonus slot (0 when no cap is scheduled).",
    ),
    (
        "spec_block_accept_length",
        "Mean uncapped full-block accept length per verify step (accept + cap-trimmed drafts; exact only in DSpark cap-accept mode).",
    ),
    ("spec_num_steps", "Currently active speculative_num_steps."),
    (
        "spec_num_draft_tokens",
        "Currently active speculative_num_draft_tokens (decouples from steps under topk>1).",
    ),
    ("num_prefill_bootstrap_queue_reqs", "The number of requests in the prefill bootstrap queue."),
    ("num_prefill_inflight_queue_reqs", "The number of requests in the prefill inflight queue."),
    ("num_decode_prealloc_queue_reqs", "The number of requests in the decode prealloc queue."),
    ("num_decode_transfer_queue_reqs", "The number of requests in the decode transfer queue."),
    (
        "num_decode_host_receive_queue_reqs",
        "Requests in the decode transfer queue receiving into host memory or waiting for device admission.",
    ),
    (
        "num_decode_deferred_kv_release_reqs",
        "The number of failed decode requests whose KV allocations are held pending transfer drain acknowledgement or timeout.",
    ),
    (
        "pending_prealloc_token_usage",
        "The token usage for pending preallocated tokens (not preallocated yet).",
    ),
    (
        "prealloc_full_token_usage",
        "Share of the full-attention KV pool held by decode requests whose KV transfer is pending (preallocated, not yet running); same capacity basis as sglang:full_token_usage.",
    ),
    (
        "prealloc_swa_token_usage",
        "Share of the SWA KV pool held by decode requests whose KV transfer is pending; same capacity basis as sglang:swa_token_usage.",
    ),
    ("utilization", "The utilization."),
    ("fwd_occupancy", "Forward pass GPU occupancy percentage."),
    ("new_token_ratio", "The new token ratio."),
    ("is_cuda_graph", "Whether the batch is using CUDA graph."),
    ("num_unique_running_routing_keys", "Number of unique routing keys in running batch."),
)
SCHED_GAUGES: Final[dict[str, tuple[tuple[str, str], ...]]] = {"0.5.9": _GAUGES_059, "0.5.23": _GAUGES_0523}

# 0.5.23 ``emit_constants`` (written once at start-up, same labels as the scheduler gauges);
# 0.5.9 has max_total_num_tokens among the log_stats gauges and cache_config_info instead.
SCHED_CONSTANTS: Final[dict[str, tuple[tuple[str, str], ...]]] = {
    "0.5.9": (),
    "0.5.23": (
        ("max_total_num_tokens", "Maximum total number of tokens in the KV cache pool."),
        ("weight_memory_usage_gb", "Memory used by model weights in GB."),
        ("kv_cache_memory_usage_gb", "Memory used by the KV cache pools in GB."),
        ("page_size", "KV cache page size in tokens."),
        ("num_pages", "Number of KV cache pages."),
        ("context_len", "Maximum context length."),
        ("startup_available_gpu_memory_gb", "Available GPU memory in GB at startup."),
    ),
}

# ``sglang:queue_time_seconds``: 0.5.23 adds 0.001, 0.005, 0.01, 0.05 below 0.1.
QUEUE_TIME_BUCKETS: Final[dict[str, tuple[float, ...]]] = {
    "0.5.9": (
        0.0, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80, 90, 100, 200, 300, 400,
        500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
    ),
    "0.5.23": (
        0.0, 0.001, 0.005, 0.01, 0.05, 0.1, 0.2, 0.5, 1, 2, 3, 4, 5, 10, 15, 20, 30, 40, 50, 60, 70, 80,
        90, 100, 200, 300, 400, 500, 600, 700, 800, 900, 1000, 1200, 1400, 1600, 1800, 2000, 2500, 3000,
    ),
}  # fmt: skip


def prefill_line(
    version: str,
    *,
    new_seqs: int,
    new_tokens: int,
    cached_tokens: int,
    usage: float,
    running: int,
    queued: int,
    throughput: float,
    cuda_graph: bool,
) -> str:
    """One ``Prefill batch`` line (no PD, no hybrid pools: ``token usage`` in both versions)."""
    head = (
        f"Prefill batch, #new-seq: {new_seqs}, #new-token: {new_tokens}, "
        f"#cached-token: {cached_tokens}, token usage: {usage:.2f}, #running-req: {running}, "
        f"#queue-req: {queued}, "
    )
    if version == "0.5.9":
        return head + f"input throughput (token/s): {throughput:.2f}, cuda graph: {cuda_graph}"
    # The sim never holds tokens back from a chunked request: #pending-token is 0.
    return head + f"#pending-token: 0, cuda graph: {cuda_graph}, input throughput (token/s): {throughput:.2f}"


def decode_line(
    version: str,
    *,
    running: int,
    kv_used: int,
    usage: float,
    spec: str,
    cuda_graph: bool,
    gen_throughput: float,
    queued: int,
    hisparse: tuple[int, float, int, float] | None = None,
) -> str:
    """One ``Decode batch`` line; ``hisparse`` = (gpu tokens, gpu usage, cpu tokens, cpu usage), 0.5.23 only."""
    if hisparse is not None and version != "0.5.9":
        gpu, gpu_usage, cpu, cpu_usage = hisparse
        pool = f"#gpu token: {gpu}, gpu token usage: {gpu_usage:.2f}, #cpu token: {cpu}, cpu token usage: {cpu_usage:.2f}"
    else:
        pool = f"#token: {kv_used}, token usage: {usage:.2f}"
    return (
        f"Decode batch, #running-req: {running}, {pool}, {spec}cuda graph: {cuda_graph}, "
        f"gen throughput (token/s): {gen_throughput:.2f}, #queue-req: {queued}"
    )


def retract_line(version: str, *, reqs: int, gained: int, old_ratio: float, new_ratio: float) -> str:
    """``KV cache pool is full. Retract requests. ...`` (0.5.23's ``#mamba_num_gained`` is for hybrid-SSM only)."""
    return (
        f"KV cache pool is full. Retract requests. #retracted_reqs: {reqs}, "
        f"#new_tokens_gained: {gained}, #new_token_ratio: {old_ratio:.4f} -> {new_ratio:.4f}"
    )


def retractions_key(version: str) -> str:
    """``/generate`` meta_info: 0.5.9 ``total_retractions``, 0.5.23 ``num_retractions``
    (srt/managers/tokenizer_manager.py ``_handle_batch_output``; 0.5.23 also adds
    ``reasoning_tokens`` before ``completion_tokens``)."""
    return "total_retractions" if version == "0.5.9" else "num_retractions"


def loads_body(
    version: str,
    *,
    running: int,
    waiting: int,
    kv_used: int,
    capacity: int,
    token_usage: float,
    gen_throughput: float,
    max_running: int,
    accelerator: str,
    num_accelerators: int,
) -> dict[str, Any]:
    """``GET /v1/loads`` for one DP rank (0.5.9: ``GetLoadsReqOutput`` of srt/managers/io_struct.py
    without ``timestamp``, plus ``num_total_reqs``, and ``_compute_aggregate``)."""
    if version == "0.5.9":
        load: dict[str, Any] = {
            "dp_rank": 0,
            "num_running_reqs": running,
            "num_waiting_reqs": waiting,
            "num_used_tokens": kv_used,
            "max_total_num_tokens": capacity,
            "token_usage": round(token_usage, 4),
            "gen_throughput": round(gen_throughput, 2),
            "cache_hit_rate": 0.0,
            "utilization": round(token_usage, 4),
            "max_running_requests": max_running,
            "num_total_reqs": running + waiting,
        }
        return {
            "timestamp": datetime.now(UTC).isoformat(),
            "version": version,
            "dp_rank_count": 1,
            "loads": [load],
            "aggregate": {
                "total_running_reqs": running,
                "total_waiting_reqs": waiting,
                "total_reqs": running + waiting,
                "avg_token_usage": load["token_usage"],
                "avg_throughput": load["gen_throughput"],
                "avg_utilization": load["utilization"],
            },
        }
    # LoadSnapshot's core fields in struct order (srt/managers/load_snapshot.py); no sections
    # are set on a plain server, and the reply has no aggregate (srt/entrypoints/v1_loads.py).
    now = time.time()
    snapshot = {
        "timestamp": now,
        "dp_rank": 0,
        "num_running_reqs": running,
        "num_waiting_reqs": waiting,
        "num_waiting_uncached_tokens": 0,
        "num_used_tokens": kv_used,
        "num_total_tokens": kv_used,
        "num_active_tokens": kv_used,
        "num_prealloc_ready_tokens": 0,
        "max_total_num_tokens": capacity,
        "max_running_requests": max_running,
        "token_usage": round(token_usage, 4),
        "gen_throughput": round(gen_throughput, 2),
        "cache_hit_rate": 0.0,
        "utilization": round(token_usage, 4),
        "total_prefill_uncached_tokens": 0,
        "total_prefill_busy_us": 0,
        "decode_moments": None,
    }
    return {
        "timestamp": datetime.fromtimestamp(now, UTC).isoformat(),
        "version": version,
        "accelerator": accelerator,
        "num_accelerators": num_accelerators,
        "loads": [snapshot],
    }
