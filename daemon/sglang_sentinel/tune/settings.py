"""Configuration of ``sentinel tune`` (section ``[tune]``).

The base launch is the config's ``[server]`` launch profile; ``space`` names the flags to vary,
each with a list of values (``"--disable-cuda-graph" = [true, false]``) or a numeric range
(``"--mem-fraction-static" = {min = 0.80, max = 0.90, step = 0.05}``). A boolean ``true`` renders
the bare flag, ``false`` removes it; any other value renders ``FLAG VALUE``. Durations are
seconds, throughput tokens/s.
"""

from __future__ import annotations

import math
import re
from typing import Literal

from pydantic import Field, field_validator, model_validator

from sglang_sentinel.section import Section

__all__ = ["FlagValue", "RangeSpec", "TuneSettings", "TuneSlo", "check_flag_name"]

FlagValue = bool | int | float | str

_FLAG = re.compile(r"^--[a-z0-9][a-z0-9-]*$")
# A range expands to at most this many values: a typo in `step` must not plan a million trials.
_MAX_RANGE_VALUES = 1000


def check_flag_name(name: str) -> str:
    if not _FLAG.match(name):
        raise ValueError(f"flag {name!r} must look like --some-flag (lower case, digits and '-')")
    return name


class RangeSpec(Section):
    """``{min, max, step}``: min, min+step, ... up to max (inclusive). Integers when all three are."""

    min: float
    max: float
    step: float = Field(gt=0)

    @model_validator(mode="after")
    def _ordered(self) -> RangeSpec:
        if self.min > self.max:
            raise ValueError(f"min ({self.min:g}) exceeds max ({self.max:g})")
        if (self.max - self.min) / self.step + 1 > _MAX_RANGE_VALUES:
            raise ValueError(f"range has more than {_MAX_RANGE_VALUES} values; raise step")
        return self

    def values(self) -> tuple[int | float, ...]:
        count = math.floor((self.max - self.min) / self.step + 1e-9) + 1
        ints = all(float(v).is_integer() for v in (self.min, self.max, self.step))
        # Computed from the index, not accumulated: 0.8 + 0.05 + 0.05 drifts off 0.9.
        raw = [self.min + i * self.step for i in range(count)]
        return tuple(round(v) for v in raw) if ints else tuple(round(v, 10) for v in raw)


class TuneSlo(Section):
    """Latency limits a configuration's SLO capacity is measured against (unset: not checked)."""

    ttft_p99_s: float | None = Field(default=None, gt=0)
    tpot_p99_s: float | None = Field(default=None, gt=0)


class TuneSettings(Section):
    # flag -> values (a list, or a {min, max, step} range)
    space: dict[str, tuple[FlagValue, ...] | RangeSpec] = Field(default_factory=dict)
    # A known-good flag set, measured first as the baseline (empty: the launch as configured).
    baseline: dict[str, FlagValue] = Field(default_factory=dict)
    # The cartesian product larger than this is refused unless `sample` picks a subset.
    max_configs: int = Field(default=32, ge=1, le=4096)
    # Measure only this many configurations drawn at random (seeded) from a larger product.
    sample: int | None = Field(default=None, ge=1)
    seed: int = 1
    # Budgets of the whole tune (trial seconds: server start to stop; tokens sent). None = unlimited.
    budget_time_s: float | None = Field(default=None, gt=0)
    budget_tokens: int | None = Field(default=None, ge=1)
    # Correctness gate: prompts per configuration (known-answer canaries and garbage-checked ones).
    correctness_prompts: int = Field(default=24, ge=1, le=1000)
    correctness_max_tokens: int = Field(default=64, ge=1, le=4096)
    # Measurements of a finalist when the best two are within each other's spread.
    repeats: int = Field(default=3, ge=1, le=20)
    # The short calibration of the halving rounds: a request budget, and optionally a lower ceiling.
    short_requests: int = Field(default=150, ge=6)
    short_max_concurrency: int | None = Field(default=None, ge=1)
    # race: one server life per configuration; a short calibration, and the full one in the same
    # life only when it reaches the best short figure so far (within the spread). halving: short
    # rounds for every survivor (a restart each), halving by throughput, full for the last few.
    search: Literal["race", "halving"] = "race"
    # Survivors kept per halving round: ceil(n / halving_factor); halving stops at `finalists`.
    halving_factor: float = Field(default=2.0, gt=1)
    finalists: int = Field(default=2, ge=1)
    # Survivors this few go to the full calibration without another short round.
    max_full: int = Field(default=4, ge=1)
    # [schedule.profiles.NAME] run once on each finalist ("" = none).
    reference_profile: str = "reference"
    slo: TuneSlo = Field(default_factory=TuneSlo)
    # Readiness limit of one trial's server; None = [server] start_timeout.
    ready_timeout: float | None = Field(default=None, gt=0)

    @field_validator("space")
    @classmethod
    def _space(
        cls, value: dict[str, tuple[FlagValue, ...] | RangeSpec]
    ) -> dict[str, tuple[FlagValue, ...] | RangeSpec]:
        for name, values in value.items():
            check_flag_name(name)
            if isinstance(values, tuple) and not values:
                raise ValueError(f"{name}: no values")
            if isinstance(values, tuple) and len(set(map(repr, values))) != len(values):
                raise ValueError(f"{name}: repeated values {list(values)}")
        return value

    @field_validator("baseline")
    @classmethod
    def _baseline(cls, value: dict[str, FlagValue]) -> dict[str, FlagValue]:
        for name in value:
            check_flag_name(name)
        return value

    @model_validator(mode="after")
    def _full_covers_finalists(self) -> TuneSettings:
        if self.max_full < self.finalists:
            raise ValueError(f"max_full ({self.max_full}) is below finalists ({self.finalists})")
        return self

    @model_validator(mode="after")
    def _sample_within_cap(self) -> TuneSettings:
        if self.sample is not None and self.sample > self.max_configs:
            raise ValueError(f"sample ({self.sample}) exceeds max_configs ({self.max_configs})")
        return self
