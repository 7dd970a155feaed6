"""The prefix of an SGLang log line: the server's wall clock and the parallel ranks.

``[2026-04-08 14:05:21 TP0] `` or ``[2026-04-08 14:05:21.123 DP0 TP0 EP0] `` (milliseconds under
``SGLANG_LOG_MS``). Kept apart from the message grammar (``logparse.py``): every event carries
the :class:`Ranks` read here.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["NO_RANKS", "PREFIX", "Ranks", "parse_ranks"]


@dataclass(frozen=True, slots=True)
class Ranks:
    """The parallel ranks in a scheduler line's prefix (``[… DP0 TP0 EP0]``); ``None`` = not printed."""

    dp: int | None = None
    pp: int | None = None
    attn_cp: int | None = None
    moe_dp: int | None = None
    tp: int | None = None
    ep: int | None = None


NO_RANKS = Ranks()

# Prefix: "[2026-04-08 14:05:21 TP0] " or "[2026-04-08 14:05:21.123 DP0 TP0 EP0] ".
PREFIX = re.compile(r"\[(\d{4})-(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?((?: [A-Z_]+\d+)*)\] ")
_RANK = re.compile(r" ([A-Z_]+?)(\d+)")
_RANK_FIELDS = {"DP": "dp", "PP": "pp", "ATTN_CP": "attn_cp", "MOE_DP": "moe_dp", "TP": "tp", "EP": "ep"}


def parse_ranks(text: str) -> Ranks:
    """The ranks of a prefix's rank group (``PREFIX``'s last group: `` DP0 TP0 EP0``)."""
    if not text:
        return NO_RANKS
    values: dict[str, int] = {}
    for name, number in _RANK.findall(text):
        attr = _RANK_FIELDS.get(name)
        if attr is not None:
            values[attr] = int(number)
    return Ranks(**values) if values else NO_RANKS
