"""`bounded`: an argparse ``type=`` for a number within bounds, for every parser's flags.

Here, below the CLI, because the dataset modules add their own flags to `sentinel bench`'s
parser (sglang_sentinel.load.dataset_entry); `sglang_sentinel.cli.common` re-exports it.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Callable

__all__ = ["bounded"]


def bounded(
    kind: type[int] | type[float],
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
) -> Callable[[str], int | float]:
    """An argparse ``type=`` for a number within bounds.

    A bad value is refused while parsing, so the message names the flag as the user wrote it
    (``argument --num-prompts: must be >= 1, got -5``, exit 2) rather than the field the value
    would have been copied into."""

    def convert(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if isinstance(value, float) and math.isnan(value):
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")
        if ge is not None and value < ge:
            raise argparse.ArgumentTypeError(f"must be >= {ge:g}, got {text}")
        if gt is not None and value <= gt:
            raise argparse.ArgumentTypeError(f"must be > {gt:g}, got {text}")
        if le is not None and value > le:
            raise argparse.ArgumentTypeError(f"must be <= {le:g}, got {text}")
        return value

    convert.__name__ = kind.__name__
    return convert
