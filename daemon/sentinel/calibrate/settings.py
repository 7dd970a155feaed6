"""Calibration sweep defaults (section ``[calibration]``)."""

from __future__ import annotations

from pydantic import Field

from sentinel.section import Section

__all__ = ["CalibrationSettings"]


class CalibrationSettings(Section):
    max_concurrency: int = Field(default=128, ge=1)
