"""The base class of every configuration section.

Each package owns the model of its own section (``sentinel/<package>/settings.py``);
``sglang_sentinel.config`` only composes them. Unknown keys are an error everywhere: a typo in a
3 a.m. config edit must not silently fall back to a default.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, BaseModel, ConfigDict

__all__ = ["Secret", "Section"]


def _printable(value: str) -> str:
    # A key with a newline (a paste, a file read with its line end) goes out as a broken header:
    # the server refuses every probe and the daemon sits in "starting" without saying why.
    bad = sorted({f"U+{ord(c):04X}" for c in value if ord(c) < 0x20 or ord(c) == 0x7F})
    if bad:
        raise ValueError(f"contains control characters ({', '.join(bad)}); a secret is one line of text")
    return value


# A secret (API key, token) as configured: one line of printable text, else a config error naming it.
Secret = Annotated[str, AfterValidator(_printable)]


class Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, validate_default=True)
