"""The records of a calibration: one measured step, its verdict, and the whole result.

Pydantic models rather than dataclasses because results are written to and read back from the
state directory: a hand-edited or truncated file must fail validation with a clear message, not
surface later as an AttributeError. All durations are seconds, throughputs per second, ratios 0..1.
"""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "SCHEMA_VERSION",
    "CalibrationResult",
    "Comparison",
    "Figure",
    "Latency",
    "Phase",
    "ServerSignals",
    "Step",
    "StepEnergy",
    "StepMeasurement",
    "StepPlan",
    "StopReason",
    "Target",
    "Workload",
]

SCHEMA_VERSION = 1

Phase = Literal["escalate", "refine-knee", "refine-slo", "reprobe"]
StopReason = Literal[
    "saturated",  # the ceiling was found (server queueing, KV full, or a throughput plateau)
    "slo",  # escalation stopped at the first latency-SLO violation (stop_at_slo)
    "errors",  # the error ratio exceeded the SLO's: the server is failing, not slow
    "client-bound",  # the load generator, not the server, was the bottleneck
    "max-concurrency",  # reached max_concurrency without saturating the server
    "budget-requests",
    "budget-time",
    "cancelled",
]


#: Stop reasons after which the result is a statement about capacity (see ``conclusive``).
CONCLUSIVE_STOPS: frozenset[str] = frozenset({"saturated", "slo", "max-concurrency"})


class _Frozen(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class StepPlan(_Frozen):
    """What one step should do: ``num_requests`` requests, at most ``concurrency`` in flight."""

    concurrency: int = Field(ge=1)
    num_requests: int = Field(ge=1)
    phase: Phase


class Latency(_Frozen):
    """One latency's distribution over a step's successful requests, seconds."""

    mean: float
    p50: float
    p90: float
    p95: float
    p99: float

    def at(self, percentile: int) -> float:
        return {50: self.p50, 90: self.p90, 95: self.p95, 99: self.p99}[percentile]


class ServerSignals(_Frozen):
    """What the server's own /metrics said during one step (SGLang scheduler gauges, TP rank 0)."""

    samples: int = Field(ge=0)
    scrape_failures: int = Field(default=0, ge=0)
    queue_mean: float | None = None
    queue_max: float | None = None
    # Fraction of samples in which the waiting queue was non-empty.
    queue_nonzero_ratio: float | None = None
    running_mean: float | None = None
    running_max: float | None = None
    token_usage_mean: float | None = None
    token_usage_max: float | None = None
    # Increase of sglang:num_retracted_requests_total over the step (None: the series is absent).
    retractions: float | None = None


class StepEnergy(_Frozen):
    """The GPU energy of one step (the server's GPUs' energy counters over the step).

    ``joules`` None with ``reason``: the counters could not be trusted (counter_reset, gpu_lost...).
    """

    joules: float | None = None
    seconds: float = Field(default=0.0, ge=0)
    gpus: int = Field(default=0, ge=0)
    mean_power_watts: float | None = None
    joules_per_output_token: float | None = None
    output_tokens_per_joule: float | None = None
    baseline_power_watts: float | None = None
    marginal_joules_per_output_token: float | None = None
    energy_cost_per_million_output_tokens: float | None = None
    currency: str = ""
    reason: str | None = None

    @classmethod
    def of(cls, figures: dict[str, object]) -> StepEnergy:
        """From ``collect.gpu.energy.energy_figures``' dict (per-GPU detail left out)."""
        gpus = figures.get("gpus")
        data = {k: v for k, v in figures.items() if k in cls.model_fields and k != "gpus"}
        return cls.model_validate({**data, "gpus": len(gpus) if isinstance(gpus, list) else 0})


class StepMeasurement(_Frozen):
    """What one step measured, client side (bench_serving definitions) plus the server's view."""

    concurrency: int = Field(ge=1)
    started_at: datetime
    duration: float = Field(ge=0)
    sent: int = Field(ge=0)
    completed: int = Field(ge=0)
    failed: int = Field(ge=0)
    # Failed requests by reason (the load engine's FailureReason values: http_error, timeout...).
    failure_reasons: dict[str, int] = Field(default_factory=dict)
    # bench_serving: tokens of successful requests / wall duration of the run.
    output_throughput: float = Field(ge=0)
    total_throughput: float = Field(ge=0)
    request_throughput: float = Field(ge=0)
    # Output tokens per second inside the window where in-flight stayed at the target concurrency
    # (None: the step never held it). Free of the opening ramp and the closing drain.
    steady_output_throughput: float | None = None
    steady_total_throughput: float | None = None
    mean_concurrency: float = Field(ge=0)
    ttft: Latency | None = None
    tpot: Latency | None = None
    e2e: Latency | None = None
    # Successful requests meeting every latency limit of the SLO (None: no per-request data).
    slo_met: int | None = None
    # The load engine's verdict on itself (sglang_sentinel.load: p99 schedule or event-loop lag above its
    # thresholds), with its reasons and the lags behind it (seconds).
    client_bound: bool = False
    client_notes: tuple[str, ...] = ()
    schedule_lag_p99: float | None = None
    loop_lag_p99: float | None = None
    server: ServerSignals | None = None
    energy: StepEnergy | None = None

    @property
    def error_ratio(self) -> float:
        return self.failed / self.sent if self.sent else 0.0

    @property
    def throughput(self) -> float:
        """The output throughput a step is judged by: steady-state when the step reached it."""
        if self.steady_output_throughput is not None:
            return self.steady_output_throughput
        return self.output_throughput

    @property
    def throughput_total(self) -> float:
        if self.steady_total_throughput is not None:
            return self.steady_total_throughput
        return self.total_throughput


class Step(_Frozen):
    """A measured step and what the search concluded from it."""

    index: int = Field(ge=0)
    phase: Phase
    measurement: StepMeasurement
    slo_ok: bool
    slo_violations: tuple[str, ...] = ()
    saturated: bool
    saturation_reasons: tuple[str, ...] = ()
    # The saturation verdict rests on the server's gauges (queue, KV, retractions), not only on
    # client figures, which one noisy step can fake.
    server_saturated: bool = False
    # False when the client was the bottleneck or too few requests succeeded to judge the server.
    trusted: bool = True

    @property
    def concurrency(self) -> int:
        return self.measurement.concurrency


class Figure(_Frozen):
    """One headline number and the indices of the steps that support it."""

    value: float | None
    steps: tuple[int, ...] = ()
    note: str = ""


class Workload(_Frozen):
    base_url: str
    backend: str
    input_len: int
    output_len: int
    range_ratio: float


class Comparison(_Frozen):
    """This result against the previous baseline: relative changes and flagged regressions."""

    baseline_started_at: datetime
    # (this - baseline) / baseline per headline figure present in both.
    changes: dict[str, float]
    regressions: tuple[str, ...] = ()

    @property
    def regressed(self) -> bool:
        return bool(self.regressions)


class Target(_Frozen):
    """The server a result measured: capacity figures are only meaningful for that server."""

    url: str
    # What the server answers as its model (served_model_name); "" when unknown.
    served_model: str = ""
    # The supervisor's launch-config hash (daemon calibrations); "" when unknown (a sweep).
    launch_hash: str = ""

    def describe(self) -> str:
        parts = [self.url, self.served_model or "?", self.launch_hash or "?"]
        return " ".join(parts)


class CalibrationResult(_Frozen):
    schema_version: int = SCHEMA_VERSION
    mode: Literal["full", "incremental"]
    started_at: datetime
    finished_at: datetime
    workload: Workload
    slo: dict[str, float | int | None]
    steps: tuple[Step, ...]
    stop_reason: StopReason
    # Output and total tokens/s at the ceiling: the best trusted step.
    saturation_output_throughput: Figure
    saturation_total_throughput: Figure
    # Lowest concurrency reaching knee_fraction of the saturation throughput.
    knee_concurrency: Figure
    # Highest concurrency whose step met the SLO, and the request rate that step sustained (req/s).
    max_concurrency_within_slo: Figure
    max_rate_within_slo: Figure
    # Requests/s meeting every SLO limit, at the highest concurrency within the SLO (vLLM's goodput).
    goodput: Figure
    requests_spent: int
    # Requests of the last full sweep in this result's lineage (itself, for a full sweep): the
    # yardstick for an incremental run's budget, which must not shrink run after run.
    full_sweep_requests: int
    # Incremental runs since the last full sweep (0 for a full sweep).
    incremental_depth: int = 0
    # Incremental runs: when the result they were seeded from started.
    seeded_from: datetime | None = None
    warnings: tuple[str, ...] = ()
    comparison: Comparison | None = None
    # None: written before targets were recorded (or by a caller that did not say).
    target: Target | None = None

    @property
    def duration(self) -> float:
        return (self.finished_at - self.started_at).total_seconds()

    @property
    def client_bound(self) -> bool:
        return self.stop_reason == "client-bound"

    @property
    def conclusive(self) -> bool:
        """Says something about capacity: a ceiling, an SLO limit, or at least "more than
        max_concurrency". Cancelled, client-bound, failing or budget-cut sweeps do not."""
        return self.stop_reason in CONCLUSIVE_STOPS

    @property
    def lower_bound(self) -> bool:
        """The sweep reached its max concurrency without saturating the server: the throughput
        figure is what it got to, the real capacity is higher."""
        return self.stop_reason == "max-concurrency"

    @property
    def highest_concurrency(self) -> int | None:
        """The highest concurrency a step ran at (the "up to N" of a lower bound)."""
        return max((s.concurrency for s in self.steps), default=None)

    def _energy_steps(self) -> list[tuple[Step, StepEnergy]]:
        return [
            (s, s.measurement.energy)
            for s in self.steps
            if s.trusted and s.measurement.energy is not None and s.measurement.energy.joules_per_output_token
        ]

    @property
    def efficient_step(self) -> Step | None:
        """The trusted step with the fewest GPU joules per output token: the efficient operating
        point, which is not always the knee (past it, batching can still amortise idle power)."""
        steps = self._energy_steps()
        return min(steps, key=lambda se: se[1].joules_per_output_token or 0.0)[0] if steps else None

    @property
    def knee_tokens_per_joule(self) -> float | None:
        """Output tokens per joule of the trusted step at the knee's concurrency (the last one run)."""
        knee = self.knee_concurrency.value
        at = [e for s, e in self._energy_steps() if knee is not None and s.concurrency == int(knee)]
        return at[-1].output_tokens_per_joule if at else None

    @property
    def slo_configured(self) -> bool:
        """A latency SLO was set: only then do "within SLO" figures mean anything."""
        return any(self.slo.get(f"{k}_seconds") is not None for k in ("ttft", "tpot", "e2e"))
