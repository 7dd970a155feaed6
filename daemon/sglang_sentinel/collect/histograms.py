"""Fewer series from SGLang's histograms: ``[collectors.sglang] histograms = "keep" | "coarsen" | "drop"``.

A TP=8 SGLang server exposes ~750 samples, about two thirds of them histogram buckets
(``queue_time_seconds`` alone has 41 boundaries per scheduler rank); a fleet of hundreds of
servers multiplies that. Two ways to shed them, applied to the payload text before it is parsed:

- ``coarsen``: keep only the bucket lines whose ``le`` is in a small set — by default the
  1-2-5 series per decade (…, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1, 2, 5, 10, …) plus 0 and
  ``+Inf``; ``coarsen_buckets`` names another set. Buckets are cumulative, so a kept bucket's
  count is exactly what it was, ``_count`` and ``_sum`` are untouched, and the kept boundaries
  are a subset of the server's own: no count is ever estimated. SGLang 0.5.23's TTFT histogram
  keeps 0.1, 0.2, 1, 2, 10, 20, 100, 200, +Inf of its 19 boundaries; its queue-time histogram
  20 of 41 (per scheduler rank).
- ``drop``: no histogram family at all (HELP, TYPE and every ``_bucket``/``_sum``/``_count``/
  ``_created`` line): the gauges and counters stay.

Only families the payload declares ``# TYPE … histogram`` are touched; everything else passes
byte for byte. ``keep`` (the default) does not look at the text.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Literal

__all__ = ["DEFAULT_COARSE_BUCKETS", "HistogramFilter", "Mode"]

Mode = Literal["keep", "coarsen", "drop"]

#: 0 and the 1-2-5 series from 1e-4 to 1e5 (exact decimal parses, so "0.02" in a payload matches).
DEFAULT_COARSE_BUCKETS: tuple[float, ...] = (
    0.0,
    *(float(f"{m}e{e}") for e in range(-4, 6) for m in (1, 2, 5)),
)

_TYPE = re.compile(r"#\s*TYPE\s+(\S+)\s+histogram\s*$")
_LE = re.compile(r'[{,]\s*le="([^"]*)"')
_SUFFIXES = ("_bucket", "_sum", "_count", "_created")


@dataclass(frozen=True, slots=True)
class Filtered:
    text: str
    dropped_lines: int  # sample lines left out


class HistogramFilter:
    def __init__(self, mode: Mode, buckets: Iterable[float] = DEFAULT_COARSE_BUCKETS) -> None:
        self.mode = mode
        self._keep = frozenset(buckets)

    def apply(self, text: str) -> Filtered:
        if self.mode == "keep":
            return Filtered(text, 0)
        lines = text.split("\n")
        histograms = {m.group(1) for line in lines if line.startswith("#") for m in [_TYPE.match(line)] if m}
        if not histograms:
            return Filtered(text, 0)
        out: list[str] = []
        dropped = 0
        for line in lines:
            if line.startswith("#"):
                if self.mode == "drop":
                    parts = line.split(None, 3)
                    if len(parts) > 2 and parts[1] in ("HELP", "TYPE") and parts[2] in histograms:
                        continue
                out.append(line)
                continue
            family, suffix = _family_of(line, histograms)
            if family is None:
                out.append(line)
                continue
            if self.mode == "drop":
                dropped += 1
                continue
            if suffix == "_bucket" and not self._kept(line):
                dropped += 1
                continue
            out.append(line)
        return Filtered("\n".join(out), dropped)

    def _kept(self, line: str) -> bool:
        m = _LE.search(line)
        if m is None:
            return True  # not a bucket line the parser would accept: let it fail there, as before
        try:
            le = float(m.group(1))
        except ValueError:
            return True
        return math.isinf(le) or le in self._keep


def _family_of(line: str, histograms: set[str]) -> tuple[str | None, str]:
    """The histogram family a sample line belongs to, and its suffix; (None, "") for others."""
    end = len(line)
    for stop in ("{", " "):
        i = line.find(stop)
        if 0 <= i < end:
            end = i
    name = line[:end]
    for suffix in _SUFFIXES:
        if name.endswith(suffix) and name[: -len(suffix)] in histograms:
            return name[: -len(suffix)], suffix
    return None, ""
