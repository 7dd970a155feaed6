"""What one scheduled run will do, and what it reports back: the contract between the scheduler and
whatever executes the load (the real load engine, or a fake in unit tests)."""

from __future__ import annotations

import asyncio
import math
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from sglang_sentinel.load.records import LoadCounters
from sglang_sentinel.schedule.metrics import RequestTimings, RunFigures
from sglang_sentinel.schedule.settings import LoadProfileSettings

__all__ = ["RunExecutor", "RunPlan", "RunReport", "plan_run"]

# The load engine's warm-up requests (one by default) are real tokens too; the budget counts them.
WARMUP_REQUESTS = 1


@dataclass(frozen=True)
class RunPlan:
    profile: str
    settings: LoadProfileSettings
    # Share of the profile kept (1.0 = the full reference run).
    scale: float
    num_prompts: int
    request_rate: float | None
    max_concurrency: int | None

    @property
    def max_tokens(self) -> int:
        """Upper bound of prompt + generated tokens, warm-up included (exact with ignore_eos)."""
        per_request = self.settings.input_len + self.settings.output_len
        return (self.num_prompts + WARMUP_REQUESTS) * per_request

    @property
    def full_size(self) -> bool:
        return self.num_prompts == self.settings.num_prompts and self.scale >= 1.0


def plan_run(profile: str, settings: LoadProfileSettings, scale: float) -> RunPlan:
    """Scale prompts, rate and concurrency together, so a shrunk run is a lighter copy of the profile."""
    scale = min(max(scale, 0.0), 1.0)
    # TOML has no null: `request_rate = inf` is how a profile says "all at once" (bench_serving's
    # --request-rate inf). From here on that is None, so no infinity reaches JSON or the engine.
    if settings.request_rate is not None and math.isinf(settings.request_rate):
        settings = settings.model_copy(update={"request_rate": None})
    prompts = max(1, math.floor(settings.num_prompts * scale)) if scale < 1.0 else settings.num_prompts
    rate = settings.request_rate * scale if settings.request_rate is not None and scale < 1.0 else None
    if scale >= 1.0:
        rate = settings.request_rate
    concurrency = settings.max_concurrency
    if concurrency is not None and scale < 1.0:
        concurrency = max(1, math.floor(concurrency * scale))
    return RunPlan(profile, settings, scale, prompts, rate, concurrency)


@dataclass
class RunReport:
    """What an executed run produced. ``requests`` maps outcome (success / failure reason) to count."""

    requests: dict[str, int]
    input_tokens: int
    output_tokens: int
    figures: RunFigures | None
    timings: list[RequestTimings] = field(default_factory=list)
    # Figures for the history and the status page (JSON-friendly, seconds and tok/s).
    summary: dict[str, Any] = field(default_factory=dict)
    cancelled: bool = False
    # False when the token counts are incomplete (interrupted run): the budget then charges the bound.
    exact_tokens: bool = True
    # Warm-up requests' prompt + generated tokens: not in the counters, but charged to the budget.
    warmup_tokens: int = 0
    # What the server spent on every request of the run, failed, partial and cancelled ones
    # included (RequestRecord.spent_tokens): what the budget charges. None: not known per request.
    spent_tokens: int | None = None
    # Why requests failed (reason -> count; the warm-up's when the measured phase never ran) and
    # the engine's own notes: a failed run must say why it failed.
    failures: dict[str, int] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    # GPU energy of the measured phase (collect.gpu.energy.energy_figures); None: no meter.
    energy: dict[str, Any] | None = None


# (plan, live counters, cancel) -> report. Setting `cancel` must make the executor stop sending,
# abort what is in flight and return the partial report promptly (the load engine does).
RunExecutor = Callable[[RunPlan, LoadCounters, asyncio.Event], Awaitable[RunReport]]
