"""The HTML report of ``sentinel tune``, rendered from the tune document alone.

The document is ``state.json`` (``sentinel.tune/v1``, written by the tune driver,
:mod:`sglang_sentinel.tune.state`): the page shows the verdict first (winner and why, the baseline, the budget
spent), then one row per configuration (flags, status, throughput with its spread, p99 TTFT,
TPOT, knee, SLO capacity, ready and trial time), the throughput per configuration with its
spread, the Pareto front of throughput against p99 TTFT, the configurations that were rejected,
skipped, failed or eliminated and why, the winning launch profile as TOML, and each trial's argv,
GPU state and versions. `write_report` writes it as ``index.html`` in the given directory, with
the document beside it as ``tune.json`` (``sentinel tune --report DIR`` rewrites both after every
finished trial); it is one self-contained file, PNGs inlined. A tune that has not finished
(running, killed, or interrupted: ``interrupted_at``) gets a "partial" banner naming the trials
that ran and those not started.

A document is read defensively: it may come from an interrupted tune or an older version, so an
absent or null figure shows as "—" and a plot with nothing to draw (no measured trial yet) is
replaced by a sentence that says so. Plots need matplotlib (the ``report`` extra): without it
both functions raise `sglang_sentinel.reportkit.ReportError` with the install hint.
"""

from __future__ import annotations

import json
import math
import shlex
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from sglang_sentinel.atomic import atomic_write_bytes
from sglang_sentinel.redact import redact_argv
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
from sglang_sentinel.tune.figures import MEASURES, measure_name, measures_legend, ranked_by, shown_figures

__all__ = ["is_partial", "render_html", "write_report"]

_WHO = "the sentinel tune report"
_DASH = "—"
# Statuses that end a configuration without a full measurement, each with a reason.
_DROPPED = ("rejected", "skipped", "failed", "eliminated")
_ROW_CLASS = {"rejected": "bad", "failed": "bad", "skipped": "bad"}


def _map(value: Any) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _list(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list | tuple) else []


def _num(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) else None


def _fmt(value: Any, digits: int, unit: str = "") -> str:
    v = _num(value)
    if v is None:
        return _DASH
    return f"{v:,.{digits}f}{' ' + unit if unit else ''}"


def _ms(value: Any, digits: int) -> str:
    v = _num(value)
    return _fmt(None if v is None else v * 1e3, digits)


def _spread(fig: Any, digits: int, scale: float = 1.0) -> str:
    """'208.2 [204.0, 212.1] n=3' from a {mean, low, high, n} figure; '—' when absent."""
    f = _map(fig)
    mean = _num(f.get("mean"))
    if mean is None:
        return _DASH
    out = f"{mean * scale:,.{digits}f}"
    low, high = _num(f.get("low")), _num(f.get("high"))
    if low is not None and high is not None:
        out += f" [{low * scale:,.{digits}f}, {high * scale:,.{digits}f}]"
    n = _num(f.get("n"))
    if n is not None:
        out += f" n={n:g}"
    return out


def _trials(doc: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return [t for t in _list(doc.get("trials")) if isinstance(t, Mapping)]


def _tid(trial: Mapping[str, Any]) -> str:
    return str(trial.get("id") or "?")


def _flags_text(trial: Mapping[str, Any]) -> str:
    flags = _map(trial.get("flags"))
    if not flags:
        return str(trial.get("label") or "(base profile)")
    return " ".join(f"{k}={v}" for k, v in flags.items())


def _mean(trial: Mapping[str, Any], figure: str, kind: str) -> float | None:
    """The mean of ``figure`` of the ``kind`` measure alone (figures.py), never of another."""
    return _num(_map(_map(shown_figures(trial).get(kind)).get(figure)).get("mean"))


# --- plots -----------------------------------------------------------------------------------------


def _plot_throughput(plt: Any, doc: Mapping[str, Any], measured: list[Mapping[str, Any]]) -> bytes:
    winner, baseline = doc.get("winner"), doc.get("baseline")
    first = ranked_by(doc)
    second = next(k for k in MEASURES if k != first)
    fig, ax = plt.subplots(figsize=(max(6.0, 0.9 * len(measured) + 2), 4))
    others = []
    for i, t in enumerate(measured):
        f = _map(_map(shown_figures(t).get(first)).get("throughput_tok_s"))
        mean = _mean(t, "throughput_tok_s", first) or 0.0
        other = _mean(t, "throughput_tok_s", second)
        if other is not None:
            others.append((i, other))
        low, high = _num(f.get("low")), _num(f.get("high"))
        color = "#2ca02c" if t.get("id") == winner else "#7f7f7f" if t.get("id") == baseline else "#1f77b4"
        hatch = "//" if t.get("status") == "eliminated" else None
        ax.bar(i, mean, color=color, hatch=hatch, edgecolor="white", alpha=0.9)
        if low is not None and high is not None:
            ax.errorbar(i, mean, yerr=[[max(mean - low, 0.0)], [max(high - mean, 0.0)]], color="k", capsize=5)
    if others:
        # The other measure as its own marks, never a bar beside the ranking one's bars.
        ax.plot(
            [i for i, _ in others],
            [v for _, v in others],
            "D",
            color="#ff7f0e",
            label=measure_name(doc, second),
        )
        ax.legend(fontsize=8)
    ax.set_xticks(range(len(measured)), [_tid(t) for t in measured])
    ax.set_ylabel("output tokens/s")
    ax.set_title(
        f"Throughput per configuration, {measure_name(doc, first)} (the ranking)\n"
        "bars: mean, whiskers: spread; green: winner, grey: baseline, hatched: eliminated"
    )
    ax.grid(True, axis="y", alpha=0.3)
    return png(plt, fig)


def _plot_pareto(plt: Any, doc: Mapping[str, Any], points: list[Mapping[str, Any]]) -> bytes:
    front = {str(i) for i in _list(doc.get("pareto"))}
    fig, ax = plt.subplots(figsize=(7, 4.4))
    kind = ranked_by(doc)
    xs = [(_mean(t, "ttft_p99_s", kind) or 0.0) * 1e3 for t in points]
    ys = [_mean(t, "throughput_tok_s", kind) or 0.0 for t in points]
    on = [_tid(t) in front for t in points]
    ax.scatter(
        [x for x, o in zip(xs, on, strict=True) if not o],
        [y for y, o in zip(ys, on, strict=True) if not o],
        color="#9e9e9e",
        label="dominated",
    )
    line = sorted((x, y) for x, y, o in zip(xs, ys, on, strict=True) if o)
    if line:
        ax.plot([x for x, _ in line], [y for _, y in line], "-o", color="#d62728", label="Pareto front")
    for t, x, y, o in zip(points, xs, ys, on, strict=True):
        ax.annotate(
            _tid(t),
            (x, y),
            textcoords="offset points",
            xytext=(5, 4),
            fontsize=8,
            fontweight="bold" if o else "normal",
        )
    ax.set_xlabel("p99 TTFT (ms) — lower is better")
    ax.set_ylabel("output tokens/s — higher is better")
    ax.set_title(f"Throughput vs p99 TTFT, {measure_name(doc, kind)}")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return png(plt, fig)


# --- sections --------------------------------------------------------------------------------------


def _ran(trials: list[Mapping[str, Any]]) -> tuple[list[str], list[str]]:
    """('t01 measured', ...) for every trial that ran or is running, and the ids not started."""
    ran, waiting = [], []
    for t in trials:
        status = str(t.get("status") or _DASH)
        if status == "pending":
            waiting.append(_tid(t))
        elif status == "running":
            ran.append(f"{_tid(t)} cut short (measured again on resume)")
        else:
            ran.append(f"{_tid(t)} {status}")
    return ran, waiting


def is_partial(doc: Mapping[str, Any]) -> bool:
    """Whether the document is of a tune that has not ended: still running, killed or interrupted
    (a budget stop is an end of the run, resumable, and says so itself)."""
    return doc.get("finished_at") is None and (bool(doc.get("interrupted_at")) or not doc.get("stop_reason"))


def _partial(doc: Mapping[str, Any], trials: list[Mapping[str, Any]]) -> str:
    if not is_partial(doc):
        return ""
    ran, waiting = _ran(trials)
    ran_text = "; ".join(ran) or "none"
    waiting_text = ", ".join(waiting) or "none"
    if doc.get("interrupted_at"):
        head = f"Interrupted at {doc['interrupted_at']}: partial report, the tune did not finish."
        tail = "Run the same command again to resume it."
    else:
        head = "Partial report: the tune had not finished when this page was written (after its last trial)."
        tail = "If it is no longer running, it was killed: run the same command again to resume it."
    return (
        f"<div class=warn><b>{esc(head)}</b> Trials that ran: {esc(ran_text)}. Not started: "
        f"{esc(waiting_text)}. {esc(tail)}</div>"
    )


def _verdict(doc: Mapping[str, Any], by_id: Mapping[str, Mapping[str, Any]]) -> str:
    out = [_partial(doc, list(by_id.values()))]
    winner = doc.get("winner")
    reason = doc.get("winner_reason")
    if winner:
        out.append(
            f"<div class=ok>Winner: <b>{esc(winner)}</b> ({esc(_flags_text(by_id.get(str(winner), {})))})"
            f"{': ' + esc(reason) if reason else ''}</div>"
        )
    else:
        why = esc(reason) if reason else "no configuration beat the others beyond the spread yet"
        out.append(f"<div class=warn>No winner: {why}.</div>")
    if doc.get("stop_reason"):
        out.append(f"<div class=warn>Stopped early: {esc(doc['stop_reason'])}</div>")
    baseline = doc.get("baseline")
    b = by_id.get(str(baseline)) if baseline else None
    if b is not None:
        kind = ranked_by(doc)
        tput = _spread(_map(shown_figures(b).get(kind)).get("throughput_tok_s"), 1)
        base_text = f"{baseline} ({_flags_text(b)}), {measure_name(doc, kind)} {tput} tok/s"
    else:
        base_text = str(baseline or _DASH)
    budget = _map(doc.get("budget"))
    spent = [f"{_fmt(budget.get('spent_time_s'), 0, 's')} of {_fmt(budget.get('time_s'), 0, 's')} trial time"]
    spent.append(f"{_fmt(budget.get('spent_tokens'), 0)} of {_fmt(budget.get('tokens'), 0)} tokens")
    slo = _map(doc.get("slo"))
    slo_text = ", ".join(
        f"{name} ≤ {_ms(slo.get(key), 0)} ms"
        for name, key in (("TTFT p99", "ttft_p99_s"), ("TPOT p99", "tpot_p99_s"))
        if _num(slo.get(key)) is not None
    )
    rows: list[list[str | Cell]] = [
        [Cell("Baseline", head=True), base_text],
        [Cell("Budget spent", head=True), "; ".join(spent)],
        [Cell("SLO", head=True), slo_text or "none"],
        [Cell("SGLang", head=True), str(doc.get("sglang_version") or _DASH)],
        [
            Cell("Started / finished", head=True),
            f"{doc.get('started_at') or _DASH} / {doc.get('finished_at') or 'not finished'}",
        ],
    ]
    return "".join(out) + table([], rows)


def _config_head(doc: Mapping[str, Any]) -> tuple[str, ...]:
    first = ranked_by(doc)
    second = next(k for k in MEASURES if k != first)
    r, o = measure_name(doc, first), measure_name(doc, second)
    return (
        "trial",
        "flags",
        "status",
        f"{r} out tok/s [spread] n (ranking)",
        f"{o} out tok/s [spread] n",
        f"{r} p99 TTFT ms [spread]",
        f"{r} TPOT p50 ms [spread]",
        "full knee",
        "full SLO capacity req/s",
        "ready s",
        "trial s",
    )


def _config_table(doc: Mapping[str, Any], trials: list[Mapping[str, Any]]) -> str:
    # One measure per column (figures.py): the ranking one, the other, then the ranking one's
    # latencies; knee and SLO capacity only a full calibration measures.
    first = ranked_by(doc)
    second = next(k for k in MEASURES if k != first)
    rows: list[list[str | Cell]] = []
    classes = []
    for t in trials:
        figs = shown_figures(t)
        rank, other, full = _map(figs.get(first)), _map(figs.get(second)), _map(figs.get("full"))
        mark = (
            " ★"
            if t.get("id") == doc.get("winner")
            else " (baseline)"
            if t.get("id") == doc.get("baseline")
            else ""
        )
        rows.append(
            [
                Cell(_tid(t) + mark, head=True),
                _flags_text(t),
                str(t.get("status") or _DASH),
                Cell(_spread(rank.get("throughput_tok_s"), 1), "num"),
                Cell(_spread(other.get("throughput_tok_s"), 1), "num"),
                Cell(_spread(rank.get("ttft_p99_s"), 0, 1e3), "num"),
                Cell(_spread(rank.get("tpot_p50_s"), 1, 1e3), "num"),
                Cell(_fmt(full.get("knee_concurrency"), 0), "num"),
                Cell(_fmt(full.get("slo_capacity_rps"), 2), "num"),
                Cell(_fmt(t.get("ready_s"), 1), "num"),
                Cell(_fmt(t.get("trial_s"), 1), "num"),
            ]
        )
        classes.append(_ROW_CLASS.get(str(t.get("status")), ""))
    if not rows:
        return "<p class=warn>The document lists no configuration.</p>"
    return table(_config_head(doc), rows, row_classes=classes)


def _dropped_table(trials: list[Mapping[str, Any]]) -> str:
    rows: list[list[str | Cell]] = []
    for t in trials:
        if t.get("status") not in _DROPPED:
            continue
        examples = [
            f"{_map(f).get('prompt')!s:.80} → {_map(f).get('why')}"
            for f in _list(_map(t.get("correctness")).get("failures"))[:3]
        ]
        rows.append(
            [
                Cell(_tid(t), head=True),
                _flags_text(t),
                str(t.get("status")),
                str(t.get("reason") or "(no reason recorded)"),
                "; ".join(examples) or _DASH,
            ]
        )
    if not rows:
        return "<p class=sub>None: every configuration was measured (or is still pending).</p>"
    return table(["trial", "flags", "status", "reason", "correctness failures (first 3)"], rows)


def _gpu_text(gpu: Any) -> str:
    devices = [d for d in _list(_map(gpu).get("devices")) if isinstance(d, Mapping)]
    if not devices:
        return _DASH
    parts = []
    for d in devices:
        clock = _num(d.get("sm_clock_hz"))
        throttle = ", ".join(map(str, _list(d.get("throttle_reasons")))) or "none"
        parts.append(
            f"GPU {d.get('index', '?')}: SM {clock / 1e9:.2f} GHz"
            if clock is not None
            else f"GPU {d.get('index', '?')}: SM clock —"
        )
        parts[-1] += f", throttling: {throttle}"
    return "; ".join(parts)


def _details(trials: list[Mapping[str, Any]]) -> str:
    out = []
    for t in trials:
        argv = [str(a) for a in _list(t.get("argv"))]
        c = _map(t.get("correctness"))
        passed = c.get("passed")
        gate = (
            _DASH
            if passed is None
            else f"{'passed' if passed else 'FAILED'} over {c.get('prompts', '?')} prompts"
        )
        rows: list[list[str | Cell]] = [
            [Cell("started", head=True), str(t.get("started_at") or _DASH)],
            [Cell("server version", head=True), str(t.get("server_version") or _DASH)],
            [Cell("GPU", head=True), _gpu_text(t.get("gpu"))],
            [Cell("correctness", head=True), gate],
        ]
        rounds = [r for r in _list(t.get("rounds")) if isinstance(r, Mapping)]
        round_rows: list[list[str | Cell]] = [
            [
                str(r.get("round", _DASH)),
                str(r.get("kind") or _DASH),
                Cell(_fmt(r.get("throughput_tok_s"), 1), "num"),
                Cell(_ms(r.get("ttft_p99_s"), 0), "num"),
                Cell(_ms(r.get("tpot_p50_s"), 1), "num"),
                Cell(_fmt(r.get("knee_concurrency"), 0), "num"),
                Cell(_fmt(r.get("slo_capacity_rps"), 2), "num"),
                Cell(_fmt(r.get("tokens"), 0), "num"),
                Cell(_fmt(r.get("duration_s"), 1), "num"),
            ]
            for r in rounds
        ]
        head = (
            "round",
            "kind",
            "out tok/s",
            "p99 TTFT ms",
            "TPOT p50 ms",
            "knee",
            "SLO req/s",
            "tokens",
            "s",
        )
        out.append(
            f"<details><summary>{esc(_tid(t))} — {esc(t.get('status') or _DASH)} — "
            f"{esc(_flags_text(t))}</summary>"
            f"<pre>{esc(shlex.join(redact_argv(argv))) if argv else '(no argv recorded)'}</pre>"
            + table([], rows)
            + (table(head, round_rows) if round_rows else "<p class=sub>No round measured.</p>")
            + "</details>"
        )
    return "\n".join(out)


def _images(doc: Mapping[str, Any], trials: list[Mapping[str, Any]]) -> tuple[dict[str, bytes], list[str]]:
    kind = ranked_by(doc)
    measured = [t for t in trials if _mean(t, "throughput_tok_s", kind) is not None]
    points = [t for t in measured if _mean(t, "ttft_p99_s", kind) is not None]
    notes = []
    if not measured:
        notes.append("No trial has a measured throughput yet: nothing to plot.")
    elif not points:
        notes.append("No trial has both a throughput and a p99 TTFT: no Pareto plot.")
    plt = load_pyplot(_WHO)
    images = draw_plots(
        plt,
        {
            "throughput.png": (lambda p: _plot_throughput(p, doc, measured)) if measured else None,
            "pareto.png": (lambda p: _plot_pareto(p, doc, points)) if points else None,
        },
    )
    return images, notes


def render_html(doc: Mapping[str, Any]) -> str:
    """The report page for one tune document (any stage: pending, running, finished)."""
    trials = _trials(doc)
    by_id = {_tid(t): t for t in trials}
    images, notes = _images(doc, trials)
    toml = doc.get("winner_toml")
    front = ", ".join(map(str, _list(doc.get("pareto")))) or _DASH
    partial = " (partial)" if is_partial(doc) else ""
    body = f"""<h1>sentinel tune — {esc(doc.get("tune_id") or _DASH)}{partial}</h1>
<div class=sub>{len(trials)} configurations; schema {esc(doc.get("schema") or _DASH)}.</div>
{_verdict(doc, by_id)}
<h2>Configurations</h2>
{_config_table(doc, trials)}
<p class=sub>Spread: [low, high] over n repeats, as the comparison used it; a winner is called only
when its lead exceeds the spread. ★ winner. {esc(measures_legend(doc))}</p>
<h2>Plots</h2>
{"".join(f"<div class=warn>{esc(n)}</div>" for n in notes)}
{"".join(img_tag(name, data) for name, data in images.items())}
<p class=sub>Pareto front (no other configuration is both faster and quicker to the first token):
{esc(front)}.</p>
<h2>Rejected, skipped, failed, eliminated</h2>
{_dropped_table(trials)}
<h2>Winning launch profile</h2>
{f"<pre>{esc(toml)}</pre>" if toml else "<p class=sub>No winner, no snippet.</p>"}
<h2>Trials</h2>
{_details(trials) or "<p class=sub>No trial.</p>"}"""
    return page(f"sentinel tune {doc.get('tune_id') or ''}", body)


def write_report(doc: Mapping[str, Any], directory: Path) -> Path:
    """Write ``directory/index.html`` and the document it shows, ``directory/tune.json``
    (created with its parents); returns the page's path.

    `ReportError` (one line) when matplotlib is missing, a plot fails or a file cannot be
    written; the tune's state is unaffected."""
    text = render_html(doc)
    path = directory / "index.html"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        # Atomic: the report is rewritten after every trial, while someone may have it open. The
        # JSON first: a page is never newer than the document beside it.
        atomic_write_bytes(directory / "tune.json", json.dumps(doc, indent=1).encode() + b"\n")
        atomic_write_bytes(path, text.encode("utf-8"))
    except OSError as exc:
        raise ReportError(f"cannot write the tune report to {directory}: {exc.strerror or exc}") from None
    return path
