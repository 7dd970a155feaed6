"""The daemon's schedule: probes, canaries and reference loads (section ``[schedule]``)."""

from __future__ import annotations

from pydantic import Field

from sentinel.section import Section

__all__ = ["ScheduleSettings"]


class ScheduleSettings(Section):
    health_interval_seconds: float = Field(default=10.0, gt=0)
