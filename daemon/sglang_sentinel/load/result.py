"""The outcome of one run and its JSON form.

`RunResult.to_dict()` uses bench_serving's `--output-file` keys (v0.5.9, same units: ms for
latencies, tok/s and req/s for rates) for every figure the two tools share, then ours under
names that do not collide with bench_serving's. `details()` adds bench_serving's
`--output-details` per-request arrays plus our own per-request fields.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sglang_sentinel.load.dataset_registry import DATASETS
from sglang_sentinel.load.figures import RunMetrics
from sglang_sentinel.load.records import RequestRecord
from sglang_sentinel.load.spec import ArrivalProcess, LoadSpec
from sglang_sentinel.load.stats import Summary
from sglang_sentinel.load.turns import per_turn_figures

__all__ = ["RunResult"]


def _goodput_keys(m: RunMetrics) -> dict[str, Any]:
    """bench_serving 0.5.23's goodput keys (GoodputMetrics' fields), present with --goodput."""
    g = m.goodput
    if g is None:
        return {}
    return {
        "goodput_slos_ms": g.slos_ms,
        "request_goodput": g.request_goodput,
        "slo_attainment": g.slo_attainment,
        "slo_attainment_by_metric": g.attainment_by_metric,
    }


def _ms(s: Summary, prefix: str, keys: tuple[str, ...]) -> dict[str, float]:
    return {f"{k}_{prefix}_ms": getattr(s, k) * 1e3 for k in keys}


def _finite(x: float) -> float | str:
    # JSON has no infinity; bench_serving writes `inf` (invalid JSON), we write the string.
    return x if math.isfinite(x) else "inf"


@dataclass(slots=True)
class RunResult:
    """One run: its spec, figures, per-request records and how it ended."""

    spec: LoadSpec
    metrics: RunMetrics
    records: list[RequestRecord] = field(repr=False)
    started_at: float  # Unix timestamp of the run clock's zero (start of the measured phase)
    model: str | None = None
    cancelled: bool = False
    warmup_failed: bool = False
    server_info: dict[str, Any] | None = None
    accept_length: float | None = None
    notes: list[str] = field(default_factory=list)
    # "kernel": token times are the kernel's receive stamps (plain HTTP on Linux); "user": when
    # the read callback ran (TLS, other platforms), which adds the client's own queueing.
    timestamps: str = "user"
    # With a client tokenizer (--tokenizer): the successful requests' generated text re-encoded,
    # bench_serving's "retokenized" count; None without one.
    retokenized_output_tokens: int | None = None
    # GPU energy of the measured phase, the figures of a run record's ``energy``
    # (``collect.gpu.energy.energy_figures``); None when not metered, ``energy_note`` saying why
    # (None too when metering was turned off).
    energy: dict[str, Any] | None = None
    energy_note: str | None = None

    @property
    def kernel_timestamps(self) -> bool:
        return self.timestamps == "kernel"

    @property
    def client_bound(self) -> bool:
        return self.metrics.client_bound

    @property
    def measured(self) -> list[RequestRecord]:
        return [r for r in self.records if not r.warmup]

    def to_dict(self, *, details: bool = False) -> dict[str, Any]:
        m = self.metrics
        spec = self.spec
        rate: float | str = spec.request_rate
        if spec.arrival in (ArrivalProcess.BURST, ArrivalProcess.CLOSED):
            rate = math.inf
        retok = self.retokenized_output_tokens
        out: dict[str, Any] = {
            "tag": None,
            "backend": str(spec.backend),
            **DATASETS.result_keys(spec),  # the dataset's own keys (its registry entry)
            # bench_serving writes "trace" when the trace's timestamps drive the arrivals.
            "request_rate": "trace" if spec.arrival is ArrivalProcess.TRACE else _finite(float(rate)),
            "max_concurrency": spec.max_concurrency,
            "server_info": self.server_info,
            "duration": m.duration,
            "completed": m.completed,
            "total_input_tokens": m.total_input_tokens,
            "total_output_tokens": m.total_output_tokens,
            "total_output_tokens_retokenized": retok,
            "request_throughput": m.request_throughput,
            "input_throughput": m.input_throughput,
            "output_throughput": m.output_throughput,
            "total_throughput": m.total_throughput,
            **_ms(m.e2e, "e2e_latency", ("mean", "median", "std", "p90", "p95", "p99")),
            **_ms(m.ttft, "ttft", ("mean", "median", "std", "p90", "p95", "p99")),
            **_ms(m.tpot, "tpot", ("mean", "median", "std", "p90", "p95", "p99")),
            **_ms(m.itl, "itl", ("mean", "median", "std", "p90", "p95", "p99", "max")),
            "concurrency": m.concurrency,
            "accept_length": self.accept_length,
            "max_output_tokens_per_s": m.max_output_tokens_per_s,
            "max_concurrent_requests": m.max_concurrent_requests,
            **_goodput_keys(m),
            # ---- ours ----
            "started_at": self.started_at,
            "model": self.model,
            "arrival": str(spec.arrival),
            "seed": spec.seed,
            "exact_rate": spec.exact_rate,
            "lora_names": list(spec.lora_names),
            "tokenizer": str(spec.tokenizer) if spec.tokenizer is not None else None,
            "num_prompts": spec.num_requests,
            "duration_bound_s": spec.duration_s,
            "warmup_requests": spec.warmup_requests,
            "ignore_eos": spec.ignore_eos,
            "stream": spec.stream,
            "failed": m.failed,
            "cancelled_requests": m.cancelled,
            "failures": m.failures,
            "run_cancelled": self.cancelled,
            "warmup_failed": self.warmup_failed,
            **_ms(m.ttfc, "ttfc", ("mean", "median", "std", "p90", "p95", "p99")),
            "tokens_per_chunk_mean": m.tokens_per_chunk.mean,
            "tokens_per_chunk_max": m.tokens_per_chunk.max,
            "decode_rate_mean": m.decode_rate.mean,
            "decode_rate_median": m.decode_rate.median,
            "reasoning_tokens": m.reasoning_tokens,
            "content_tokens": m.content_tokens,
            "peak_in_flight": m.peak_in_flight,
            "steady_state_output_throughput": m.steady_state.output_throughput if m.steady_state else None,
            "steady_state_request_throughput": m.steady_state.request_throughput if m.steady_state else None,
            "steady_state_duration": (m.steady_state.end - m.steady_state.start) if m.steady_state else None,
            "achieved_request_rate": m.achieved_request_rate,
            "cache_hit_ratio": m.cache_hit_ratio,
            **_ms(m.schedule_lag, "schedule_lag", ("mean", "p99", "max")),
            **_ms(m.send_delay, "send_delay", ("mean", "p99", "max")),
            **_ms(m.queue_wait, "queue_wait", ("mean", "p99", "max")),
            **_ms(m.loop_lag, "loop_lag", ("mean", "p99", "max")),
            "client_bound": m.client_bound,
            "client_bound_reasons": list(m.client_bound_reasons),
            "notes": list(self.notes),
            "timestamps": self.timestamps,
            "shared_read_events": m.shared_read_events,
            "shared_read_ratio": m.shared_read_ratio,
            "energy": self.energy,
            "energy_note": self.energy_note,
        }
        turns = per_turn_figures(self.records)
        if turns:
            out["per_turn"] = turns  # multi-turn runs only (--gsp-num-turns)
        if details:
            out.update(self.details())
        return out

    def details(self) -> dict[str, Any]:
        """bench_serving's per-request arrays (`--output-details`) plus ours, measured requests only."""
        rs = self.measured
        return {
            "input_lens": [r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len for r in rs],
            "output_lens": [r.output_len if r.success else 0 for r in rs],
            "ttfts": [r.ttft or 0.0 for r in rs],
            "itls": [r.itl for r in rs],
            "generated_texts": [r.text or "" for r in rs],
            "errors": [r.error or "" for r in rs],
            "failures": [r.failure for r in rs],
            "ttfcs": [r.ttfc for r in rs],
            "e2e_latencies": [r.latency for r in rs],
            "start_times": [self.started_at + r.sent for r in rs],
            "planned_times": [self.started_at + r.planned for r in rs],
            "schedule_lags": [r.schedule_lag for r in rs],
            "chunk_tokens": [r.chunk_tokens for r in rs],
            "cached_tokens": [r.cached_tokens for r in rs],
            "reasoning_tokens_per_request": [r.reasoning_tokens for r in rs],
        }
