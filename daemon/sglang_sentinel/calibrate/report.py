"""``--report DIR``: one self-contained HTML page (PNG plots inlined) plus the result JSON.

The page opens with the answer — ceiling, knee, SLO capacity, goodput, and whether it regressed —
then four plots and the step table that supports every number. The PNGs are embedded as data
URIs so the page survives being mailed or attached to a ticket; they are also written next to it
for wikis and chat. Plots come from matplotlib (the ``report`` extra), imported only here.
"""

from __future__ import annotations

import html
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_sentinel.calibrate.model import CalibrationResult, Figure, Step
from sglang_sentinel.reportkit import Cell, ReportError, draw_plots, img_tag, load_pyplot, page, png, table

if TYPE_CHECKING:
    from matplotlib.axes import Axes

__all__ = ["ReportError", "write_report"]

_PHASE_COLORS = {
    "escalate": "#1f77b4",
    "refine-knee": "#2ca02c",
    "refine-slo": "#d62728",
    "reprobe": "#9467bd",
}


def _sorted_trusted(result: CalibrationResult) -> list[Step]:
    return sorted((s for s in result.steps if s.trusted), key=lambda s: s.concurrency)


def _log2_axis(ax: Axes, has_data: bool) -> None:
    from matplotlib.ticker import FuncFormatter

    if not has_data:
        return  # nothing plotted (no trustworthy step): a log axis would have no range
    ax.set_xscale("log", base=2)
    # Plain concurrency numbers (1, 2, 4 ...) rather than powers of two.
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _pos: f"{v:g}"))


def _mark_figures(ax: Axes, result: CalibrationResult) -> None:
    knee = result.knee_concurrency.value
    if knee is not None:
        ax.axvline(knee, color="#2ca02c", linestyle="--", linewidth=1, label=f"knee c={knee:g}")
    slo = result.max_concurrency_within_slo.value
    if slo is not None and len(result.max_concurrency_within_slo.steps) == 2:
        ax.axvline(slo, color="#d62728", linestyle=":", linewidth=1.2, label=f"SLO limit c={slo:g}")


def _plot_throughput(plt: Any, result: CalibrationResult) -> bytes:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    steps = _sorted_trusted(result)
    xs = [s.concurrency for s in steps]
    ax.plot(xs, [s.measurement.throughput for s in steps], "-", color="#1f77b4", label="output tok/s")
    ax.plot(xs, [s.measurement.throughput_total for s in steps], "-", color="#ff7f0e", label="total tok/s")
    for s in result.steps:
        m = s.measurement
        face = _PHASE_COLORS[s.phase] if s.trusted else "none"
        ax.scatter([m.concurrency], [m.throughput], color=face, edgecolors=_PHASE_COLORS[s.phase], zorder=3)
    sat = result.saturation_output_throughput.value
    if sat is not None:
        ax.axhline(sat, color="#7f7f7f", linestyle="--", linewidth=1, label=f"ceiling {sat:.0f} tok/s")
    _mark_figures(ax, result)
    _log2_axis(ax, bool(xs))
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("tokens/s")
    ax.set_title("Throughput vs concurrency (dots: steps, coloured by phase)")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return png(plt, fig)


def _plot_energy(plt: Any, result: CalibrationResult) -> bytes:
    """GPU joules per output token beside throughput: the efficient point is not always the knee."""
    fig, ax = plt.subplots(figsize=(7, 4.2))
    steps = [
        s
        for s in _sorted_trusted(result)
        if s.measurement.energy and s.measurement.energy.joules_per_output_token
    ]
    xs = [s.concurrency for s in steps]
    per_token = [
        s.measurement.energy.joules_per_output_token if s.measurement.energy else None for s in steps
    ]
    ax.plot(xs, per_token, "o-", color="#2ca02c", label="GPU J / output token")
    marginal = [
        s.measurement.energy.marginal_joules_per_output_token if s.measurement.energy else None for s in steps
    ]
    if any(v is not None for v in marginal):
        ax.plot(xs, marginal, "o--", color="#98df8a", label="above idle baseline")
    best = result.efficient_step
    if best is not None and best.measurement.energy is not None:
        value = best.measurement.energy.joules_per_output_token
        ax.scatter(
            [best.concurrency],
            [value],
            s=120,
            facecolors="none",
            edgecolors="#d62728",
            zorder=4,
            label=f"efficient: c={best.concurrency}",
        )
    _mark_figures(ax, result)
    _log2_axis(ax, bool(xs))
    ax.set_xlabel("concurrency (requests in flight)")
    ax.set_ylabel("joules per output token")
    twin = ax.twinx()
    twin.plot(
        xs, [s.measurement.throughput for s in steps], "-", color="#1f77b4", alpha=0.5, label="output tok/s"
    )
    twin.set_ylabel("output tokens/s")
    ax.set_title("GPU energy per token vs concurrency (server's GPUs, energy counters)")
    ax.grid(True, alpha=0.3)
    lines, labels = ax.get_legend_handles_labels()
    more, more_labels = twin.get_legend_handles_labels()
    ax.legend(lines + more, labels + more_labels, fontsize=8)
    return png(plt, fig)


def _plot_latency(plt: Any, result: CalibrationResult) -> bytes:
    fig, (a1, a2) = plt.subplots(1, 2, figsize=(10, 4))
    steps = _sorted_trusted(result)
    xs = [s.concurrency for s in steps]
    for ax, name, limit in (
        (a1, "ttft", result.slo.get("ttft_seconds")),
        (a2, "tpot", result.slo.get("tpot_seconds")),
    ):
        for pct, style in (("p50", "-o"), ("p99", "--s")):
            ys = []
            for s in steps:
                lat = getattr(s.measurement, name)
                ys.append(getattr(lat, pct) * 1e3 if lat is not None else float("nan"))
            ax.plot(xs, ys, style, markersize=4, label=f"{name.upper()} {pct}")
        if isinstance(limit, int | float):
            ax.axhline(limit * 1e3, color="#d62728", linestyle=":", label="SLO limit")
        _mark_figures(ax, result)
        _log2_axis(ax, bool(xs))
        ax.set_xlabel("concurrency")
        ax.set_ylabel("ms")
        ax.set_title(f"{name.upper()} vs concurrency")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    return png(plt, fig)


def _plot_latency_throughput(plt: Any, result: CalibrationResult) -> bytes:
    fig, ax = plt.subplots(figsize=(7, 4.2))
    steps = _sorted_trusted(result)
    xs = [s.measurement.throughput for s in steps]
    for pct, style in (("p50", "-o"), ("p99", "--s")):
        ys = [getattr(s.measurement.e2e, pct) if s.measurement.e2e else float("nan") for s in steps]
        ax.plot(xs, ys, style, markersize=4, label=f"E2E {pct}")
    for s in steps:
        if s.measurement.e2e is not None:
            ax.annotate(
                f"c={s.concurrency}",
                (s.measurement.throughput, s.measurement.e2e.p50),
                textcoords="offset points",
                xytext=(4, 4),
                fontsize=7,
            )
    ax.set_xlabel("output tokens/s")
    ax.set_ylabel("end-to-end latency (s)")
    ax.set_title("Latency vs throughput: the price of each extra token/s")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return png(plt, fig)


def _plot_server(plt: Any, result: CalibrationResult) -> bytes:
    fig, ax = plt.subplots(figsize=(8, 4))
    steps = list(result.steps)
    labels = [f"#{s.index}\nc={s.concurrency}" for s in steps]
    idx = list(range(len(steps)))

    def val(s: Step, attr: str) -> float:
        srv = s.measurement.server
        v = getattr(srv, attr) if srv is not None else None
        return float(v) if v is not None else 0.0

    ax.bar([i - 0.2 for i in idx], [val(s, "queue_mean") for s in steps], width=0.4, label="queue (mean)")
    ax.bar([i + 0.2 for i in idx], [val(s, "running_mean") for s in steps], width=0.4, label="running (mean)")
    ax.set_ylabel("requests")
    ax.set_xticks(idx, labels, fontsize=7)
    ax2 = ax.twinx()
    ax2.plot(idx, [val(s, "token_usage_max") for s in steps], "k-^", label="KV usage (max)")
    ax2.set_ylim(0, 1.05)
    ax2.set_ylabel("KV cache usage (0-1)")
    no_data = all(s.measurement.server is None or s.measurement.server.samples == 0 for s in steps)
    title = "Server queue and KV usage per step (sglang:* gauges)"
    if no_data:
        title += " — no server metrics were available"
    ax.set_title(title)
    h1, l1 = ax.get_legend_handles_labels()
    h2, l2 = ax2.get_legend_handles_labels()
    ax.legend(h1 + h2, l1 + l2, fontsize=8, loc="upper left")
    fig.tight_layout()
    return png(plt, fig)


def _fmt(fig: Figure, unit: str, digits: int = 0) -> str:
    if fig.value is None:
        return "—"
    return f"{fig.value:,.{digits}f} {unit}".strip()


def lower_bound_note(result: CalibrationResult) -> str:
    """Why a throughput figure is only "at least" (empty when the sweep saturated)."""
    if not result.lower_bound:
        return ""
    return f"lower bound: did not saturate up to concurrency {result.highest_concurrency}"


def _headline(result: CalibrationResult) -> str:
    rows = [
        ("Saturation output throughput", result.saturation_output_throughput, "tok/s", 0),
        ("Saturation total throughput", result.saturation_total_throughput, "tok/s", 0),
        ("Knee concurrency", result.knee_concurrency, "", 0),
    ]
    if result.slo_configured:
        # Without a latency SLO every step "meets" it: "within SLO" would claim what nobody asked.
        rows += [
            ("Max concurrency within SLO", result.max_concurrency_within_slo, "", 0),
            ("Max request rate within SLO", result.max_rate_within_slo, "req/s", 2),
            ("Goodput", result.goodput, "req/s", 2),
        ]
    bound = lower_bound_note(result)
    out: list[list[str | Cell]] = []
    for label, fig, unit, digits in rows:
        steps = ", ".join(f"#{i}" for i in fig.steps) or "—"
        value = _fmt(fig, unit, digits)
        note = fig.note
        if bound and unit == "tok/s" and fig.value is not None:
            value = "≥ " + value
            note = f"{bound}; {note}" if note else bound
        out.append([Cell(label, head=True), Cell(value, "num"), steps, note])
    return table(["Figure", "Value", "Steps", "Why"], out)


def _ms(lat: Any, pct: str) -> str:
    return f"{getattr(lat, pct) * 1e3:,.0f}" if lat is not None else "—"


_STEP_HEAD = (
    "step", "phase", "conc.", "sent", "failed", "out tok/s", "total tok/s", "req/s", "TTFT p50 ms",
    "TTFT p99 ms", "TPOT p50 ms", "TPOT p99 ms", "E2E p99 ms", "queue", "KV max", "verdict",
)  # fmt: skip


def _step_table(result: CalibrationResult) -> str:
    rows: list[list[str | Cell]] = []
    classes: list[str] = []
    for s in result.steps:
        m = s.measurement
        srv = m.server
        q = f"{srv.queue_mean:.1f}" if srv and srv.queue_mean is not None else "—"
        kv = f"{srv.token_usage_max:.2f}" if srv and srv.token_usage_max is not None else "—"
        verdict = []
        if not s.trusted:
            verdict.append("untrusted" + (" (client-bound)" if m.client_bound else ""))
        if s.saturated:
            verdict.append("saturated: " + "; ".join(s.saturation_reasons))
        verdict.append("SLO ok" if s.slo_ok else "SLO violated: " + "; ".join(s.slo_violations))
        classes.append("" if s.slo_ok else "bad")
        nums = (
            m.concurrency, m.sent, m.failed, f"{m.throughput:,.1f}", f"{m.throughput_total:,.1f}",
            f"{m.request_throughput:,.2f}", _ms(m.ttft, "p50"), _ms(m.ttft, "p99"), _ms(m.tpot, "p50"),
            _ms(m.tpot, "p99"), _ms(m.e2e, "p99"), q, kv,
        )  # fmt: skip
        rows.append([f"#{s.index}", s.phase, *(Cell(str(n), "num") for n in nums), " · ".join(verdict)])
    return table(_STEP_HEAD, rows, row_classes=classes)


def _slo_text(slo: dict[str, float | int | None]) -> str:
    parts = []
    for name in ("ttft", "tpot", "e2e"):
        limit = slo.get(f"{name}_seconds")
        if limit is not None:
            parts.append(f"{name.upper()} p{slo.get(f'{name}_percentile')} ≤ {limit * 1e3:g} ms")
    ratio = slo.get("max_error_ratio")
    if ratio is not None:
        parts.append(f"error ratio ≤ {ratio:g}")
    return ", ".join(parts) or "none"


def _energy_text(result: CalibrationResult) -> str:
    best = result.efficient_step
    if best is None or best.measurement.energy is None:
        return ""
    e = best.measurement.energy
    knee = result.knee_tokens_per_joule
    cost = ""
    if e.energy_cost_per_million_output_tokens is not None:
        cost = (
            f"; energy cost {e.energy_cost_per_million_output_tokens:.3g} {html.escape(e.currency)} "
            "per million output tokens there (GPU electricity only)"
        )
    return (
        f"<p>Efficient operating point: concurrency {best.concurrency}, "
        f"{e.joules_per_output_token or 0:.3g} J per output token "
        f"({e.output_tokens_per_joule or 0:.3g} tokens/J, "
        f"{e.mean_power_watts or 0:,.0f} W over {e.gpus} GPUs)"
        + (f"; at the knee {knee:.3g} tokens/J" if knee is not None else "")
        + f"{cost}.</p>"
    )


def render_html(result: CalibrationResult, images: dict[str, bytes]) -> str:
    w = result.workload
    blocks = []
    if result.comparison is not None:
        c = result.comparison
        when = html.escape(c.baseline_started_at.isoformat(timespec="seconds"))
        if c.regressions:
            items = "".join(f"<li>{html.escape(r)}</li>" for r in c.regressions)
            blocks.append(
                f"<div class=regress>Regression against the baseline of {when}:<ul>{items}</ul></div>"
            )
        else:
            ch = ", ".join(f"{k.replace('_', ' ')} {v:+.1%}" for k, v in c.changes.items())
            blocks.append(
                f"<div class=ok>No regression against the baseline of {when}. {html.escape(ch)}</div>"
            )
    for warning in result.warnings:
        blocks.append(f"<div class=warn>{html.escape(warning)}</div>")
    if result.lower_bound:
        blocks.append(
            f"<div class=warn>Capacity is a {html.escape(lower_bound_note(result))}: raise "
            "max_concurrency to find the ceiling.</div>"
        )
    missing = [n for n in ("throughput.png", "latency.png", "server.png") if n not in images]
    if missing:
        blocks.append(
            "<div class=warn>Not plotted, no data: "
            + html.escape(", ".join(missing))
            + " (no trusted step, or no server gauges).</div>"
        )
    imgs = [img_tag(name, data) for name, data in images.items()]
    slo = _slo_text(result.slo)
    when = html.escape(result.started_at.isoformat(timespec="seconds"))
    body = f"""<h1>Server capacity — {html.escape(w.base_url)}</h1>
<div class=sub>{html.escape(result.mode)} calibration, {when}, {result.duration:,.0f} s,
{result.requests_spent} requests in {len(result.steps)} steps; stopped: {html.escape(result.stop_reason)}.
Workload: {html.escape(w.backend)}, input ≤ {w.input_len}, output ≤ {w.output_len} tokens
(range ratio {w.range_ratio:g}). SLO: {html.escape(slo)}.</div>
{"".join(blocks)}
{_headline(result)}
{"".join(imgs)}
{_energy_text(result)}
<h2>Steps</h2>
{_step_table(result)}
<p class=sub>Throughputs are steady-state (in-flight held at the step's concurrency) where the step
reached it, otherwise whole-step (bench_serving's definition).
The raw result: <a href="result.json">result.json</a>.</p>"""
    return page(f"Calibration {result.started_at.isoformat(timespec='seconds')}", body)


def write_report(result: CalibrationResult, directory: Path) -> Path:
    """Write index.html, the PNGs and result.json into ``directory``; returns the HTML's path."""
    plt = load_pyplot("--report")
    trusted = bool(_sorted_trusted(result))
    has_server = any(s.measurement.server is not None and s.measurement.server.samples for s in result.steps)

    def when(draw: Callable[[Any, CalibrationResult], bytes], wanted: bool) -> Callable[[Any], bytes] | None:
        return (lambda p: draw(p, result)) if wanted else None

    # A plot with nothing to draw is an empty frame that looks like "zero": left out instead
    # (the page says so).
    images = draw_plots(
        plt,
        {
            "throughput.png": when(_plot_throughput, bool(result.steps)),
            "latency.png": when(_plot_latency, trusted),
            "latency_vs_throughput.png": when(_plot_latency_throughput, trusted),
            "server.png": when(_plot_server, has_server),
            "energy.png": when(_plot_energy, result.efficient_step is not None),
        },
    )
    try:
        directory.mkdir(parents=True, exist_ok=True)
        for name, data in images.items():
            (directory / name).write_bytes(data)
        (directory / "result.json").write_text(result.model_dump_json(indent=1))
        page_path = directory / "index.html"
        page_path.write_text(render_html(result, images), encoding="utf-8")
    except OSError as exc:
        raise ReportError(f"cannot write the report to {directory}: {exc.strerror or exc}") from None
    return page_path
