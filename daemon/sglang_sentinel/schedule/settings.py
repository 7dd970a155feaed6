"""The daemon's schedule: probes, canaries and reference loads (section ``[schedule]``).

The defaults are the embedded default deployment (the built-in simulator on loopback): one
reference profile, the real deployment's "64 prompts, 256/256, 16 req/s" baseline, run as soon as
the server is ready and then every 15 minutes, under an hourly synthetic-token budget.
"""

from __future__ import annotations

from typing import Literal

from apscheduler.triggers.cron import CronTrigger
from pydantic import Field, field_validator, model_validator

from sglang_sentinel.section import Section

__all__ = [
    "BreakerSettings",
    "BudgetSettings",
    "LoadProfileSettings",
    "PoliteSettings",
    "ScheduleSettings",
]


def _check_cron(value: str | None) -> str | None:
    # TOML has no null: an empty string switches a cron schedule off.
    if value is None or not value.strip():
        return None
    try:
        CronTrigger.from_crontab(value)
    except ValueError as exc:
        raise ValueError(f"not a valid 5-field crontab expression: {exc}") from None
    return value


class LoadProfileSettings(Section):
    """One named reference load (``[schedule.profiles.NAME]``), run on its own schedule."""

    # native: SGLang /generate with input_ids (exact lengths); chat/completions: the OpenAI routes.
    backend: Literal["native", "chat", "completions"] = "native"
    num_prompts: int = Field(default=64, ge=1, le=100_000)
    # Requests per second (open loop, Poisson); inf (TOML `request_rate = inf`) sends all prompts
    # at once, as bench_serving's --request-rate inf.
    request_rate: float | None = Field(default=16.0, gt=0)
    max_concurrency: int | None = Field(default=None, ge=1)
    input_len: int = Field(default=256, ge=1)
    output_len: int = Field(default=256, ge=1)
    # bench_serving's --random-range-ratio: lengths uniform in [max(1, ratio*len), len].
    range_ratio: float = Field(default=0.0, ge=0.0, le=1.0)
    seed: int = 1
    # Exactly one of interval_seconds and cron; cron is a 5-field crontab in the daemon's local time.
    interval_seconds: float | None = Field(default=900.0, gt=0)
    cron: str | None = None
    # Random delay added to each firing so probes and loads of many boxes do not line up.
    jitter_seconds: float = Field(default=0.0, ge=0)
    # Run once as soon as the server is ready (after warm-up and the restart window), so a freshly
    # (re)started server gets a reference point without waiting a whole interval.
    run_on_ready: bool = True
    # Per-run wall-clock limit; the run is cancelled and counted as aborted(timeout) after it.
    timeout_seconds: float = Field(default=600.0, gt=0)

    @field_validator("cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        return _check_cron(value)

    @model_validator(mode="after")
    def _one_trigger(self) -> LoadProfileSettings:
        if self.cron is not None and "interval_seconds" in self.model_fields_set:
            raise ValueError("set either interval_seconds or cron, not both")
        if self.cron is None and self.interval_seconds is None:
            raise ValueError("set interval_seconds or cron")
        return self

    @property
    def max_tokens(self) -> int:
        """Upper bound of the synthetic tokens (input + output) one run can cost."""
        return self.num_prompts * (self.input_len + self.output_len)


class BudgetSettings(Section):
    # Synthetic tokens (prompt + generated) per sliding hour, over every load run and calibration.
    # A run that would exceed it is shrunk or skipped before it starts: it is never exceeded.
    tokens_per_hour: int = Field(default=1_000_000, ge=0)
    # Below this many prompts a shrunk run says too little to be worth its cost: skip instead.
    min_prompts: int = Field(default=8, ge=1)


class PoliteSettings(Section):
    """Coexisting with real traffic: foreign = server's running + queued requests - our in-flight."""

    enabled: bool = True
    # auto: /v1/loads (computed live on request) while the server has it, else the /metrics gauges;
    # metrics: sglang:num_running_reqs + sglang:num_queue_reqs from /metrics (needs --enable-metrics;
    # sampled: written on SGLang's log events only, see gauge_max_age_seconds);
    # loads: /v1/loads only. A router target ([server] kind = "router") reads the same over all its
    # workers: /get_loads for "loads", /engine_metrics (either spelling) for "metrics".
    source: Literal["auto", "metrics", "loads"] = "auto"
    # Foreign requests at or above which a run is scaled down (by the share the foreign traffic
    # takes of shrink_capacity_requests), and at or above which it is skipped (or aborted mid-run).
    shrink_above: int = Field(default=1, ge=1)
    skip_above: int = Field(default=16, ge=1)
    # Concurrency the server serves well; the run keeps (1 - foreign/capacity) of its prompts.
    shrink_capacity_requests: int = Field(default=32, ge=1)
    action: Literal["shrink", "skip"] = "shrink"
    # Requests of our own that the server may not have counted yet (canaries, just-sent requests).
    tolerance: int = Field(default=1, ge=0)
    check_interval_seconds: float = Field(default=2.0, gt=0)
    request_timeout_seconds: float = Field(default=2.0, gt=0)
    # How old a sampled /metrics gauge may be: SGLang writes them on its log events only (every
    # decode_log_interval steps, every 30 s when idle). Such a figure is compared with sentinel's
    # highest own in-flight count of this window, so our own earlier requests never count as
    # foreign. (/v1/loads is live: compared with the own count now.)
    gauge_max_age_seconds: float = Field(default=30.0, ge=0)
    # When the load cannot be read: "run" trusts the server is idle, "skip" does not load blind.
    on_unknown: Literal["run", "skip"] = "run"

    @model_validator(mode="after")
    def _ordered(self) -> PoliteSettings:
        if self.shrink_above > self.skip_above:
            raise ValueError("shrink_above must be <= skip_above")
        return self


class BreakerSettings(Section):
    """Abort a run in progress when it is hurting the server or the hardware."""

    enabled: bool = True
    max_error_ratio: float = Field(default=0.2, ge=0.0, le=1.0)
    # Errors are judged only once this many requests have finished (one early failure is not 100%).
    min_requests: int = Field(default=8, ge=1)
    # sglang:token_usage (KV cache fill, 0..1).
    max_kv_usage: float = Field(default=0.98, gt=0.0, le=1.0)
    max_gpu_temperature_celsius: float = Field(default=90.0, gt=0)
    # Hardware slowdown / thermal clock-event reasons active on any GPU.
    abort_on_throttle: bool = True
    check_interval_seconds: float = Field(default=1.0, gt=0)


class ScheduleSettings(Section):
    # Probe and canary cadences live in [server.checks] (the supervisor runs them as their own
    # tasks, so they never wait behind a load run); the GPU read cadence in [collectors.gpu].
    # No synthetic load until the server has been ready this long (caches, CUDA graphs, JIT).
    warmup_seconds: float = Field(default=5.0, ge=0)
    # Runs that start within this window after the server became ready are executed but kept out
    # of the reference series (last-run gauges, request histograms); they stay in the history.
    reference_exclusion_seconds: float = Field(default=15.0, ge=0)
    # A firing that the loop could only start this late is dropped (and counted) rather than run.
    misfire_grace_seconds: float = Field(default=60.0, gt=0)
    # Incremental re-calibration (crontab, local time) and whether to calibrate at start when the
    # state directory holds no calibration yet (after the first reference run).
    recalibrate_cron: str | None = "30 3 * * *"
    calibrate_when_missing: bool = True
    # Bounded history kept in the state directory.
    history_runs: int = Field(default=500, ge=1)
    history_restarts: int = Field(default=200, ge=1)
    profiles: dict[str, LoadProfileSettings] = Field(
        default_factory=lambda: {"reference": LoadProfileSettings()}
    )
    budget: BudgetSettings = Field(default_factory=BudgetSettings)
    polite: PoliteSettings = Field(default_factory=PoliteSettings)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)

    @field_validator("recalibrate_cron")
    @classmethod
    def _valid_cron(cls, value: str | None) -> str | None:
        return _check_cron(value)

    @field_validator("profiles")
    @classmethod
    def _names(cls, value: dict[str, LoadProfileSettings]) -> dict[str, LoadProfileSettings]:
        for name in value:
            if not name or not all(c.isalnum() or c in "-_" for c in name):
                raise ValueError(f"profile name {name!r}: use letters, digits, '-' and '_' only")
        return value
