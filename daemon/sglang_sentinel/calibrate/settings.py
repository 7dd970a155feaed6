"""Calibration sweep settings (section ``[calibration]``).

Durations are seconds, ratios 0..1, throughputs tokens/s. The defaults are sized so that a full
sweep of the default simulator profile costs well under half of a brute-force 1..128 sweep, and
an incremental re-calibration about a third of a full one (see ``benchmarks/sweep_vs_bruteforce.py``).
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from sglang_sentinel.section import Section

__all__ = ["CalibrationSettings", "Percentile", "SloSettings"]

# The percentiles every step records (bench_serving reports the same set).
Percentile = Literal[50, 90, 95, 99]


class SloSettings(Section):
    """Service-level objective a step must meet. A limit left unset is not checked."""

    ttft_seconds: float | None = Field(default=None, gt=0)
    ttft_percentile: Percentile = 99
    tpot_seconds: float | None = Field(default=None, gt=0)
    tpot_percentile: Percentile = 99
    e2e_seconds: float | None = Field(default=None, gt=0)
    e2e_percentile: Percentile = 99
    # Failed / sent requests. Above it the server is failing, not slow: escalation stops at once.
    max_error_ratio: float = Field(default=0.01, ge=0, le=1)

    @property
    def has_latency_limits(self) -> bool:
        return any(v is not None for v in (self.ttft_seconds, self.tpot_seconds, self.e2e_seconds))


class CalibrationSettings(Section):
    # --- workload of every step (random token ids, bench_serving's "random" dataset) ---
    input_len: int = Field(default=256, ge=1)
    output_len: int = Field(default=256, ge=1)
    # Lengths are drawn uniformly from [max(1, len * range_ratio), len], as in bench_serving.
    range_ratio: float = Field(default=0.0, ge=0, le=1)
    seed: int = 1

    # --- search shape ---
    start_concurrency: int = Field(default=1, ge=1)
    # Above the simulated seed deployment's ceiling (the embedded default's `sentinel sim`, 256+256
    # tokens: the 64->128 step gains ~13% of linear scaling, a plateau; `sentinel sweep --port P
    # --max-concurrency 512` against `sentinel sim --speed 30` stops there), so a first calibration
    # measures the ceiling instead of reporting a lower bound. A ceiling needs one step past it,
    # hence 256, not 128. Raise it for larger deployments.
    max_concurrency: int = Field(default=256, ge=1)
    # Escalation multiplies concurrency by this until the server saturates.
    growth_factor: float = Field(default=2.0, gt=1, le=16)
    # Requests of a step at concurrency c: max(step_min_requests, ceil(c * step_requests_per_slot)).
    # One request per slot fills the server to c at once; the steady-state window (in-flight at
    # >= 90% of c) then lasts until a tenth of them finish, which on a continuous-batching server
    # is already a stable decode rate. More per slot adds refills (prefill mixed into decode, as
    # under real traffic) at a proportional cost in requests.
    step_min_requests: int = Field(default=6, ge=1)
    # A step's throughput is read while at least this fraction of its slots are busy. With one
    # request per slot, 0.9 (bench_serving's steady-state ratio) ends the window at the first
    # tenth of completions, a window short enough for scheduling jitter to move a top step by
    # ~8% between identical runs (measured against `sentinel sim` at --speed 20); 0.75 keeps the
    # batch near its target while making the window ~2.5x longer.
    steady_fraction: float = Field(default=0.75, gt=0, le=1)
    step_requests_per_slot: float = Field(default=1.0, ge=1)
    # Bisection stops when the bracket's upper/lower concurrency ratio is at most this.
    resolution: float = Field(default=1.5, gt=1)
    # The knee: the lowest concurrency that reaches this fraction of the saturation throughput.
    knee_fraction: float = Field(default=0.9, gt=0, lt=1)
    # A plateau: going from c1 to c2 gained less than this fraction of the linear-scaling gain.
    plateau_efficiency: float = Field(default=0.15, ge=0, lt=1)
    # Stop escalating at the first latency-SLO violation (else go on to find the ceiling too).
    stop_at_slo: bool = False

    # --- server-side saturation signals (sampled from the server's /metrics during each step) ---
    metrics_interval: float = Field(default=1.0, gt=0)
    # The waiting queue was non-empty in at least this fraction of a step's samples.
    queue_sustained_ratio: float = Field(default=0.5, gt=0, le=1)
    kv_usage_high: float = Field(default=0.95, gt=0, le=1)
    # A step's median TTFT this many times the lowest step's: requests are waiting (client view).
    ttft_growth: float = Field(default=4.0, gt=1)
    # A step the load engine marked client-bound still counts when its p99 schedule lag is at
    # most this fraction of the mean E2E latency: the slots then sat idle too briefly to bend the
    # throughput (the engine's thresholds are about TTFT accuracy, a far stricter matter).
    client_lag_tolerance: float = Field(default=0.02, ge=0, le=1)

    # --- budget ---
    max_requests: int = Field(default=2000, ge=1)
    max_duration: float = Field(default=3600.0, gt=0)
    # Incremental re-calibration spends at most this fraction of the previous result's requests.
    incremental_budget_ratio: float = Field(default=1 / 3, gt=0, le=4)
    # After this many incremental runs in a row the next one is a full sweep: carried-over and
    # scaled figures must not drift from a measurement that grows ever older.
    full_sweep_every: int = Field(default=12, ge=1)
    request_timeout: float = Field(default=600.0, gt=0)

    # --- results ---
    # Result files kept in <state_dir>/calibration/ (oldest removed first).
    history: int = Field(default=50, ge=1)
    # A saturation throughput, knee or SLO capacity this much below the baseline is a regression.
    regression_threshold: float = Field(default=0.1, gt=0, lt=1)

    slo: SloSettings = Field(default_factory=SloSettings)

    # The daemon's scheduled sweeps go to this URL instead of [server] (read at start). Behind a
    # router ([server] kind = "router") a sweep through the router measures the pool as the
    # router balances it, and the router has no /metrics for the queue and KV signals: name one
    # worker (http://HOST:PORT) to measure capacity per worker. Empty: the [server] target.
    worker_url: str = ""

    @field_validator("worker_url")
    @classmethod
    def _check_worker_url(cls, value: str) -> str:
        if value and not re.fullmatch(r"https?://[^/\s]+/?", value):
            raise ValueError(f"worker_url {value!r}: expected http://HOST:PORT (no path)")
        return value.rstrip("/")

    @model_validator(mode="after")
    def _check_range(self) -> CalibrationSettings:
        if self.start_concurrency > self.max_concurrency:
            raise ValueError(
                f"start_concurrency ({self.start_concurrency}) exceeds "
                f"max_concurrency ({self.max_concurrency})"
            )
        return self
