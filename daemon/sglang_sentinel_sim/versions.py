# ruff: noqa: E501  (help strings are SGLang's, one per line to stay greppable against the wheel)
"""What differs between the SGLang releases the simulator speaks: every release the daemon's
version table read (``sglang_sentinel.sglang.versions.RELEASES_READ``, 0.5.9 – 0.5.23 with the
``.postN`` releases; the default is the newest).

The simulator's texts were copied from two wheels, 0.5.9 and 0.5.23 (paths inside ``sglang/``);
every release between them gets, per behaviour, the text of the side its release row falls on:
:data:`BEHAVIOURS` names, for each behaviour the simulator varies, the first release that behaves
the new way, either a row of the daemon's table (``sglang_sentinel.sglang.versions``, also in
docs/sglang-versions.md) or, for what the daemon does not read, the release where a grep of the
unpacked wheels finds the change (the source says which file and marker). Flags a release accepts
come from the same table's ``options.json`` (``launchflags.check_version``).

- Scheduler log lines: 0.5.9 ``srt/managers/scheduler_metrics_mixin.py`` ``log_prefill_stats`` /
  ``log_decode_stats``; 0.5.23 ``srt/managers/scheduler_components/metrics_reporter.py``
  ``report_prefill_stats`` / ``report_decode_stats`` with the pool parts of
  ``scheduler_components/pool_stats_observer.py`` ``PoolStats.get_*_usage_msg_parts``. From 0.5.10
  the Prefill line puts ``cuda graph`` *before* ``input throughput``; from 0.5.11 it adds
  ``#pending-token`` and the throughput figure is this batch's tokens over the gap (before: the
  previous batch's). ``--enable-hisparse`` (a flag from 0.5.10) prints ``#gpu token/gpu token
  usage/#cpu token/cpu token usage`` on Decode lines instead of ``#token/token usage`` from 0.5.11;
  the Prefill line keeps ``token usage``.
- Retraction line: ``srt/managers/scheduler.py`` in both; 0.5.23 adds ``#mamba_num_gained`` only
  for hybrid-SSM models (none of the profiles), so the line is the same here.
- Metrics: 0.5.9 ``srt/metrics/collector.py``; 0.5.23 ``srt/observability/metrics_collector.py``
  (:data:`SCHED_GAUGES`, tokenizer families with ``is_streaming``, queue-time buckets), the whole
  family set switching at the daemon's ``metrics.module_moved`` row (0.5.10): the simulator has
  these two sets only, so 0.5.10 – 0.5.22 serve 0.5.23's.
- ``/v1/loads``: ``srt/entrypoints/v1_loads.py`` (0.5.23 has no ``aggregate``/``dp_rank_count`` and
  the ``LoadSnapshot`` core fields of ``srt/managers/load_snapshot.py``), from the daemon's
  ``loads.no_aggregate`` row (0.5.13).
"""

from __future__ import annotations

import functools
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from sglang_sentinel.sglang.versions import NEWEST_KNOWN, RELEASES_READ, change, parse_version

__all__ = [
    "BEHAVIOURS",
    "DEFAULT_VERSION",
    "NEW_WHEEL",
    "OLD_WHEEL",
    "QUEUE_TIME_BUCKETS",
    "SCHED_CONSTANTS",
    "SCHED_GAUGES",
    "VERSIONS",
    "Behaviour",
    "decode_line",
    "has",
    "loads_body",
    "prefill_line",
    "retract_line",
    "retractions_key",
    "wheel",
]

#: ``--sglang-version`` choices: every release the daemon's table read, oldest first.
VERSIONS: Final = tuple(str(v) for v in RELEASES_READ)
DEFAULT_VERSION: Final = str(NEWEST_KNOWN)
#: The two wheels the simulator's texts were copied from (the keys of the per-wheel tables below).
OLD_WHEEL: Final = "0.5.9"
NEW_WHEEL: Final = "0.5.23"


@dataclass(frozen=True, slots=True)
class Behaviour:
    """One thing the simulator does differently from a release on."""

    what: str
    #: The first release that behaves the new way (every release before it: the old way).
    first: str
    #: The daemon's row it follows, or where in the wheels the change shows.
    source: str


def _row(key: str, what: str) -> Behaviour:
    """A behaviour the daemon's version table records: its boundary is that row's."""
    return Behaviour(what, change(key).new_from, f"sglang_sentinel.sglang.versions row {key}")


# Sim-only rows: found by grepping the unpacked wheel of every release in RELEASES_READ for the
# marker named in the source (the first release that has it; every later one has it too).
BEHAVIOURS: Final[dict[str, Behaviour]] = {
    # --- log lines -------------------------------------------------------------------------------
    "log.prefill_graph_first": Behaviour(
        "Prefill line: 'cuda graph: B' before 'input throughput (token/s): X' (0.5.9: after)",
        "0.5.10",
        "sglang/srt/observability/scheduler_metrics_mixin.py log_prefill_stats (0.5.10; 0.5.9: "
        "srt/managers/scheduler_metrics_mixin.py L226-240)",
    ),
    "log.prefill_pending_token": Behaviour(
        "Prefill line: '#pending-token: N' after '#queue-req'",
        "0.5.11",
        "sglang/srt/observability/scheduler_metrics_mixin.py log_prefill_stats (grep '#pending-token')",
    ),
    "log.prefill_throughput_this_batch": Behaviour(
        "Prefill line: input throughput = this batch's tokens over the gap (before: the previous batch's)",
        "0.5.11",
        "sglang/srt/observability/scheduler_metrics_mixin.py log_prefill_stats "
        "(grep 'self.last_prefill_tokens / gap_latency': through 0.5.10.post1)",
    ),
    "log.hisparse_usage": _row(
        "log.hisparse_usage", "--enable-hisparse: Decode lines print the GPU and CPU pools"
    ),
    "log.spec_accept_rate_drafts": Behaviour(
        "Decode line / spec_accept_rate: accepted drafts (no bonus token) over proposed drafts "
        "(before: accepted tokens over draft tokens + 1 per verify)",
        "0.5.11",
        "sglang/srt/observability/scheduler_metrics_mixin.py log_decode_stats "
        "(speculative_num_draft_tokens - 1 per round; 0.5.10.post1: draft_tokens_fallback)",
    ),
    # --- /metrics --------------------------------------------------------------------------------
    "metrics.module_moved": _row(
        "metrics.module_moved",
        "/metrics: 0.5.23's family set (SCHED_GAUGES, SCHED_CONSTANTS, queue-time buckets, "
        "engine_type / is_streaming tokenizer labels, TPOT, prefill_none graph passes)",
    ),
    "metrics.priority_label": _row(
        "metrics.priority_label", "--enable-priority-scheduling: priority labels on the queue gauges"
    ),
    "metrics.decode_keeps_cache_hit_rate": Behaviour(
        "Decode reports keep the prefill's cache_hit_rate gauge (before: write 0 on every Decode log)",
        "0.5.20",
        "sglang/srt/managers/scheduler_components/metrics_reporter.py report_decode_stats "
        "(grep 'cache_hit_rate = 0.0': through 0.5.19; 'cache_hit_rate is prefill-owned' from 0.5.20)",
    ),
    # --- HTTP ------------------------------------------------------------------------------------
    "loads.no_aggregate": _row("loads.no_aggregate", "/v1/loads: LoadSnapshot entries, no aggregate"),
    "http.get_load_removed": Behaviour(
        "/get_load is gone (404)",
        "0.5.21",
        "sglang/srt/entrypoints/http_server.py (grep '\"/get_load\"': through 0.5.20)",
    ),
    "meta.reasoning_tokens": Behaviour(
        "/generate meta_info: 'reasoning_tokens' before 'completion_tokens'",
        "0.5.10",
        "sglang/srt/managers/tokenizer_manager.py _handle_batch_output (grep '\"reasoning_tokens\": ')",
    ),
    "meta.num_retractions": Behaviour(
        "/generate meta_info: 'num_retractions' (before: 'total_retractions')",
        "0.5.12",
        "sglang/srt/managers/tokenizer_manager.py _handle_batch_output (grep '\"num_retractions\"')",
    ),
    # --- crash texts -----------------------------------------------------------------------------
    "crash.nan_detected": _row("crash.nan_detected", "crash:text=nan: the device assert texts"),
    "crash.scheduler_died_init": _row(
        "crash.scheduler_died_init", "crash:text=died_init: 'scheduler died during initialization'"
    ),
    "crash.subprocess_watchdog": _row(
        "crash.subprocess_watchdog", "crash:text=subprocess: the subprocess watchdog exists"
    ),
    "log.nan_sanitized": _row("log.nan_sanitized", "fault nan_sanitized: SGLANG_SANITIZE_NAN_LOGITS exists"),
    "crash.kv_pool_text": Behaviour(
        "Not enough memory: 'Current value: mem_fraction_static=F' "
        "(before: 'self.server_args.mem_fraction_static=F')",
        "0.5.10",
        "sglang/srt/model_executor/model_runner_kv_cache_mixin.py (0.5.10; pool_configurator.py from "
        "0.5.12) (grep 'Current value: mem_fraction_static=')",
    ),
    "cli.disable_cuda_graph_deprecated": _row(
        "cli.disable_cuda_graph_deprecated",
        "--disable-cuda-graph warns; /server_info and the capture-failure hints name the -decode graph flags",
    ),
    "cli.dsa_names": _row(
        "cli.dsa_names", "/server_info dsa_*_backend (before: nsa_*); SGLang's default attention 'dsa'"
    ),
    # --- profiler --------------------------------------------------------------------------------
    "profile.xpu_activity": Behaviour(
        "activities: 'XPU' starts torch's profiler too",
        "0.5.10",
        "sglang/srt/managers/scheduler_profiler_mixin.py (grep 'activity_map[\"XPU\"]')",
    ),
    "profile.double_start_caught": Behaviour(
        "a second torch start is answered with torch's error (before: the scheduler dies)",
        "0.5.14",
        "sglang/srt/managers/scheduler_components/profiler_manager.py _start_profile "
        "(try/except RuntimeError around torch_profiler.start())",
    ),
    "profile.req_struct": Behaviour(
        "/start_profile body is ProfileReq (profile_id, detailed_annotations); the route's traceback "
        "is 0.5.23's (before: ProfileReqInput, 0.5.9's)",
        "0.5.15",
        "sglang/srt/entrypoints/http_server.py start_profile_async (ProfileReq from 0.5.15; "
        "class ProfileReqInput in srt/managers/io_struct.py through 0.5.14)",
    ),
    "profile.num_steps_plus_one": Behaviour(
        "num_steps stops the profiler at forward ct + num_steps + 1 (before: ct + num_steps)",
        "0.5.16",
        "sglang/srt/managers/scheduler_components/profiler_manager.py (grep "
        "'get_forward_ct() + num_steps + 1')",
    ),
    "profile.mem_prefix": Behaviour(
        "the MEM snapshot file name carries profile_prefix",
        "0.5.17",
        "sglang/srt/managers/scheduler_components/profiler_manager.py _stop_profile "
        "(stage_prefix before the memory snapshot's time)",
    ),
    # --- multi-node ------------------------------------------------------------------------------
    "multinode.sigterm_waits": Behaviour(
        "a node_rank >= 1 logs SIGTERM and waits for rank 0's ShutdownReq (before: no handler, ends)",
        "0.5.21",
        "sglang/srt/entrypoints/engine.py (grep 'waiting for the rank-0 ShutdownReq')",
    ),
}


@functools.lru_cache(maxsize=1024)
def has(key: str, version: str) -> bool:
    """Whether release ``version`` behaves the new way for behaviour ``key`` (:data:`BEHAVIOURS`;
    a key not in it is a typo in a caller: ``KeyError``)."""
    return parse_version(version) >= parse_version(BEHAVIOURS[key].first)


def wheel(key: str, version: str) -> str:
    """The wheel whose text release ``version`` gets for ``key``: :data:`OLD_WHEEL` or
    :data:`NEW_WHEEL` (the keys of the per-wheel tables)."""
    return NEW_WHEEL if has(key, version) else OLD_WHEEL


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
    """One ``Prefill batch`` line (no PD, no hybrid pools: ``token usage`` in every release);
    ``throughput`` as the caller computed it for ``version`` (log.prefill_throughput_this_batch)."""
    head = (
        f"Prefill batch, #new-seq: {new_seqs}, #new-token: {new_tokens}, "
        f"#cached-token: {cached_tokens}, token usage: {usage:.2f}, #running-req: {running}, "
        f"#queue-req: {queued}, "
    )
    graph, rate = f"cuda graph: {cuda_graph}", f"input throughput (token/s): {throughput:.2f}"
    if not has("log.prefill_graph_first", version):
        return head + f"{rate}, {graph}"
    # The sim never holds tokens back from a chunked request: #pending-token is 0.
    pending = "#pending-token: 0, " if has("log.prefill_pending_token", version) else ""
    return head + f"{pending}{graph}, {rate}"


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
    """One ``Decode batch`` line; ``hisparse`` = (gpu tokens, gpu usage, cpu tokens, cpu usage),
    printed from the release of the daemon's log.hisparse_usage row on."""
    if hisparse is not None and has("log.hisparse_usage", version):
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
    """``/generate`` meta_info: ``total_retractions``, ``num_retractions`` from meta.num_retractions's
    release (srt/managers/tokenizer_manager.py ``_handle_batch_output``; ``reasoning_tokens`` before
    ``completion_tokens``: meta.reasoning_tokens)."""
    return "num_retractions" if has("meta.num_retractions", version) else "total_retractions"


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
    """``GET /v1/loads`` for one DP rank (before the daemon's loads.no_aggregate row: 0.5.9's
    ``GetLoadsReqOutput`` of srt/managers/io_struct.py without ``timestamp``, plus
    ``num_total_reqs``, and ``_compute_aggregate``; from it 0.5.23's LoadSnapshot)."""
    if not has("loads.no_aggregate", version):
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
