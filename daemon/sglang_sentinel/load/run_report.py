"""``sentinel bench --output-html``: one self-contained page with the run's figures and plots.

The headline is the printed result block itself (bench_serving's rows, then ours), so the page
and the terminal never disagree; then the plots: TTFT and E2E distributions (CDFs with p50, p90,
p99 marked), output throughput per 1 s bucket (the buckets of "Peak output token throughput"),
requests in flight over time, the ITL distribution, and TTFT against input length; then the
run's flags. A plot with nothing to draw (no successful request) is left out and the page says
so, rather than an empty frame that reads as "zero". Plots need matplotlib (the ``report``
extra); the CLI checks for it before the run.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sglang_sentinel.load.figures import in_flight_steps, token_buckets
from sglang_sentinel.load.records import RequestRecord
from sglang_sentinel.load.report import format_result_block
from sglang_sentinel.load.result import RunResult
from sglang_sentinel.load.stats import percentile
from sglang_sentinel.reportkit import (
    Cell,
    ReportError,
    draw_plots,
    esc,
    img_tag,
    load_pyplot,
    page,
    png,
    table,
)

__all__ = ["PLOTS", "render_bench_html", "write_bench_report"]

_FLAG = "--output-html"
PLOTS = ("latency_cdf.png", "throughput.png", "in_flight.png", "itl.png", "ttft_vs_input.png")
_PCTS = ((50.0, "#2ca02c"), (90.0, "#ff7f0e"), (99.0, "#d62728"))


def _ok(result: RunResult) -> list[RequestRecord]:
    return [r for r in result.measured if r.success]


def _mark_percentiles(ax: Any, sorted_ms: list[float], digits: int) -> None:
    for q, color in _PCTS:
        v = percentile(sorted_ms, q)
        ax.axvline(v, color=color, linestyle="--", linewidth=1, label=f"p{q:g} {v:,.{digits}f} ms")


def _cdf(ax: Any, values_ms: list[float], name: str) -> None:
    xs = sorted(values_ms)
    n = len(xs)
    ax.plot(xs, [(i + 1) / n for i in range(n)], drawstyle="steps-post", color="#1f77b4")
    _mark_percentiles(ax, xs, 1)
    ax.set_xlabel(f"{name} (ms)")
    ax.set_ylabel("fraction of requests ≤ x")
    ax.set_ylim(0, 1.02)
    ax.set_title(f"{name} distribution ({n} requests)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8, loc="lower right")


def _plot_latency(plt: Any, ok: list[RequestRecord]) -> bytes:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    _cdf(a1, [r.ttft * 1e3 for r in ok if r.ttft is not None], "TTFT")
    _cdf(a2, [r.latency * 1e3 for r in ok if r.latency is not None], "E2E latency")
    fig.tight_layout()
    return png(plt, fig)


def _plot_throughput(plt: Any, result: RunResult, ok: list[RequestRecord]) -> bytes:
    _, tokens = token_buckets(ok)
    fig, ax = plt.subplots(figsize=(8, 3.6))
    ax.bar(
        range(len(tokens)),
        tokens,
        width=1.0,
        align="edge",
        color="#1f77b4",
        label="output tokens in the second",
    )
    mean = result.metrics.output_throughput
    ax.axhline(mean, color="#7f7f7f", linestyle="--", linewidth=1, label=f"run mean {mean:,.0f} tok/s")
    ax.set_xlabel("seconds since the first send")
    ax.set_ylabel("output tokens/s")
    ax.set_title("Output throughput over time (1 s buckets)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return png(plt, fig)


def _plot_in_flight(plt: Any, steps: list[tuple[float, int]]) -> bytes:
    t0 = steps[0][0]
    fig, ax = plt.subplots(figsize=(8, 3.2))
    ax.step(
        [0.0] + [t - t0 for t, _ in steps], [0] + [lvl for _, lvl in steps], where="post", color="#9467bd"
    )
    ax.set_xlabel("seconds since the first send")
    ax.set_ylabel("requests in flight")
    ax.set_title("Requests in flight (sent, not yet answered; every outcome)")
    ax.grid(True, alpha=0.3)
    return png(plt, fig)


def _plot_itl(plt: Any, itls: list[float]) -> bytes:
    ms = sorted(v * 1e3 for v in itls)
    fig, ax = plt.subplots(figsize=(7, 3.6))
    ax.hist(ms, bins=min(80, max(10, int(math.sqrt(len(ms))))), color="#1f77b4")
    ax.set_yscale("log")  # the tail (a late chunk, a prefill interleaved) is what one looks for
    _mark_percentiles(ax, ms, 2)
    ax.set_xlabel("inter-token latency (ms)")
    ax.set_ylabel("tokens (log)")
    ax.set_title(f"ITL distribution ({len(ms)} entries, pooled over requests)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return png(plt, fig)


def _plot_ttft_vs_input(plt: Any, ok: list[RequestRecord]) -> bytes:
    pts = [
        (r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len, r.ttft * 1e3)
        for r in ok
        if r.ttft is not None
    ]
    fig, ax = plt.subplots(figsize=(7, 3.8))
    ax.scatter([p for p, _ in pts], [t for _, t in pts], s=10, alpha=0.6, color="#1f77b4")
    ax.set_xlabel("input tokens")
    ax.set_ylabel("TTFT (ms)")
    ax.set_title("TTFT vs input length")
    ax.grid(True, alpha=0.3)
    return png(plt, fig)


def _plots(result: RunResult) -> dict[str, Callable[[Any], bytes] | None]:
    ok = _ok(result)
    steps = in_flight_steps(result.measured)
    itls = [gap for r in ok for gap in r.itl]
    with_ttft = any(r.ttft is not None for r in ok)
    return {
        "latency_cdf.png": (lambda plt: _plot_latency(plt, ok)) if with_ttft else None,
        "throughput.png": (lambda plt: _plot_throughput(plt, result, ok)) if ok else None,
        "in_flight.png": (lambda plt: _plot_in_flight(plt, steps)) if steps else None,
        "itl.png": (lambda plt: _plot_itl(plt, itls)) if itls else None,
        "ttft_vs_input.png": (lambda plt: _plot_ttft_vs_input(plt, ok)) if with_ttft else None,
    }


def _block_table(result: RunResult) -> str:
    """The printed result block as a table: its section titles and `{:<40} {:<10}` rows."""
    rows: list[list[str | Cell]] = []
    for line in format_result_block(result).splitlines():
        stripped = line.strip("=- ")
        if not stripped:
            continue  # blank lines and the closing rules
        if line[:1] in "=-" and line.rstrip()[-1:] in "=-":
            rows.append([Cell(stripped, head=True), Cell("", head=True)])
        elif line.startswith("note: "):
            rows.append(["note", line[6:]])
        else:
            rows.append([line[:40].rstrip(), Cell(line[40:].strip(), "num")])
    return table(["Figure", "Value"], rows)


def _subtitle(result: RunResult) -> str:
    m = result.metrics
    spec = result.spec
    when = datetime.fromtimestamp(result.started_at, UTC).isoformat(timespec="seconds")
    parts = [
        f"started {when}",
        f"backend {spec.backend}",
        f"model {result.model or '—'}",
        f"arrival {spec.arrival}",
        f"{m.completed} completed, {m.failed} failed" + (f", {m.cancelled} cancelled" if m.cancelled else ""),
        f"{m.duration:,.2f} s",
    ]
    return esc(" · ".join(parts))


def render_bench_html(result: RunResult, images: dict[str, bytes], flags: Sequence[tuple[str, str]]) -> str:
    """The page for one run; ``flags``: the command line's options and values, already redacted."""
    blocks = []
    if result.warmup_failed:
        blocks.append("<div class=warn>Every warm-up request failed: no measured request was sent.</div>")
    if result.cancelled:
        blocks.append("<div class=warn>The run was interrupted: these are partial results.</div>")
    if result.client_bound:
        reasons = "; ".join(result.metrics.client_bound_reasons)
        blocks.append(f"<div class=warn>The client was the bottleneck: {esc(reasons)}.</div>")
    missing = [name for name in PLOTS if name not in images]
    if missing:
        blocks.append(
            "<div class=warn>Not plotted, no data: "
            + esc(", ".join(missing))
            + " (no successful request, or none with a first token or an inter-token gap).</div>"
        )
    flag_rows: list[list[str | Cell]] = [[Cell(f, head=True), v] for f, v in flags]
    body = f"""<h1>sentinel bench — {esc(result.spec.base_url)}</h1>
<div class=sub>{_subtitle(result)}</div>
{"".join(blocks)}
<h2>Result</h2>
{_block_table(result)}
<h2>Plots</h2>
{"".join(img_tag(name, data) for name, data in images.items())}
<h2>Flags</h2>
{table(["Flag", "Value"], flag_rows) if flags else "<p class=sub>Not recorded.</p>"}
<p class=sub>Per-request rows: <code>--output-csv</code>; definitions of every figure:
<code>sentinel/load/figures.py</code> and docs/bench.md.</p>"""
    when = datetime.fromtimestamp(result.started_at, UTC).isoformat(timespec="seconds")
    return page(f"sentinel bench {when}", body)


def write_bench_report(result: RunResult, path: Path, flags: Sequence[tuple[str, str]]) -> Path:
    """Draw the plots and write the page to ``path``; `ReportError` (one line) when impossible."""
    plt = load_pyplot(_FLAG)
    images = draw_plots(plt, _plots(result))
    try:
        path.write_text(render_bench_html(result, images, flags), encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write {_FLAG} {path}: {exc.strerror or exc}") from None
    return path
