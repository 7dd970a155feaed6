"""``--plot-throughput``: bench_serving's two terminal plots, drawn as plain text.

bench_serving 0.5.23 (``calculate_metrics``) plots, before its result block, the output tokens
of each whole second of the run and the requests running during each second (the buckets of
its "Peak output token throughput" and "Peak concurrent requests"), with termplotlib, which
needs the gnuplot program (its "dumb" terminal draws the chart). Drawn here by hand instead:
two charts of a few lines do not justify a dependency that needs a system package, and the
figures are ours already (`sglang_sentinel.load.figures`: the same buckets as the peaks in the block).
One column per second; past the width, a column shows the highest second of those it covers
(a peak must stay visible, as in the block's peak rows).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from sglang_sentinel.load.figures import concurrency_buckets, token_buckets

if TYPE_CHECKING:
    from sglang_sentinel.load.result import RunResult

__all__ = ["text_plot", "throughput_plots"]

WIDTH = 72
HEIGHT = 10


def text_plot(values: Sequence[float], title: str, *, width: int = WIDTH, height: int = HEIGHT) -> str:
    """A point chart: y from 0 to the maximum, x the seconds, the title above, 'Time (s)' below."""
    n = len(values)
    cols = min(n, width)
    column = [max(values[c * n // cols : max((c + 1) * n // cols, c * n // cols + 1)]) for c in range(cols)]
    top = max(column, default=0.0)
    label_w = max(len(f"{top:g}"), 1)
    rows = [[" "] * cols for _ in range(height)]
    for c, v in enumerate(column):
        level = round(v / top * (height - 1)) if top > 0 else 0
        rows[height - 1 - level][c] = "*"
    lines = [title.center(label_w + 2 + cols).rstrip()]
    for i, row in enumerate(rows):
        label = f"{top:g}" if i == 0 else ("0" if i == height - 1 else "")
        lines.append(f"{label:>{label_w}} |{''.join(row)}".rstrip())
    lines.append(" " * label_w + " +" + "-" * cols)
    last = f"{n - 1}"
    lines.append(" " * (label_w + 2) + "0" + last.rjust(max(cols - 1, len(last))))
    lines.append("Time (s)".center(label_w + 2 + cols).rstrip())
    return "\n".join(lines)


def throughput_plots(result: RunResult) -> str:
    ok = [r for r in result.measured if r.success]
    if not ok:
        return "(no successful request: nothing to plot)"
    first, tokens = token_buckets(ok)
    conc = concurrency_buckets(ok, first, len(tokens))
    return (
        text_plot([float(t) for t in tokens], "Output tokens per second")
        + "\n\n"
        + text_plot([float(c) for c in conc], "Concurrent requests per second")
        + "\n"
    )
