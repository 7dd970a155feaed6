"""The base class of every configuration section.

Each package owns the model of its own section (``sentinel/<package>/settings.py``);
``sglang_sentinel.config`` only composes them. Unknown keys are an error everywhere: a typo in a
3 a.m. config edit must not silently fall back to a default.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

__all__ = ["Section"]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
