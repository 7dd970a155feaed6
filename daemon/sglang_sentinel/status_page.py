"""The small self-contained HTML status page served at the exporter's ``/``.

For the person who has no Grafana yet (the embedded default) and for a quick look at 3 a.m.:
server state and restart history, probe and canary results, the run in progress, recent runs
with their figures, the budget, the current capacity, and links to ``/metrics``,
``/status.json`` and the latest calibration report. One HTML document, inline CSS, no script,
no external resource; it reloads itself every 15 seconds. Rendered from the same snapshot that
``/status.json`` serves, so the page and ``sentinel status`` never disagree.
"""

from __future__ import annotations

import html
import math
import time
from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

__all__ = ["render_status_page"]

_STATE_CLASS = {
    "ready": "ok",
    "starting": "warn",
    "warming": "warn",
    "restarting": "warn",
    "unhealthy": "bad",
    "failed": "bad",
    "stopped": "bad",
}

# Cells stay on one line. A detail cell that may break anywhere lets the table squeeze its column
# to one character (a long canary answer read one letter per line); width:100% + max-width:0 give
# the detail column what the other columns leave, cut there with an ellipsis.
_CSS = """
body{font:14px/1.45 system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;background:#f6f7f9;
color:#1d232b}
header{background:#1d232b;color:#fff;padding:12px 24px;display:flex;gap:24px;align-items:baseline}
header h1{font-size:18px;margin:0}header a{color:#9cc3ff}
main{padding:16px 24px;display:grid;grid-template-columns:repeat(auto-fit,minmax(420px,1fr));gap:16px}
section{background:#fff;border:1px solid #dde1e6;border-radius:6px;padding:12px 16px}
section.wide{grid-column:1/-1}
h2{font-size:15px;margin:0 0 8px}
table{border-collapse:collapse;width:100%}
th,td{text-align:left;padding:3px 8px 3px 0;border-bottom:1px solid #eef0f3}
th{font-weight:600;color:#56606b}td.num{text-align:right;font-variant-numeric:tabular-nums}
.badge{display:inline-block;white-space:nowrap;padding:1px 8px;border-radius:10px;font-weight:600;
font-size:13px}
.ok{background:#d7f5dd;color:#135c24}.na{background:#eef0f3;color:#56606b}.warn{background:#fff1c9;color:#6b4d00}.bad{background:#fddcdc;color:#8a1111}
.muted{color:#7a838c}.big{font-size:22px;font-weight:600}
.why h2{font-size:17px}.badbox{border-left:5px solid #c62828}.warnbox{border-left:5px solid #e0a800}
.why pre{background:#1d232b;color:#e6e6e6;padding:8px;border-radius:4px;white-space:pre-wrap;
word-break:break-all;font-size:12px;margin:6px 0}.action{font-size:15px}
code{background:#eef0f3;padding:0 4px;border-radius:3px}
section{min-width:0;overflow-x:auto}th,td.num,td.detail{white-space:nowrap}
td.detail{width:100%;max-width:0;overflow:hidden;text-overflow:ellipsis}
td.detail summary{overflow:hidden;text-overflow:ellipsis;cursor:pointer}
td.detail .full{white-space:pre-wrap;overflow-wrap:anywhere;font-size:12px;color:#56606b}
@media (min-width:1000px){section.probes{grid-column:span 2}}
"""


def _e(value: Any) -> str:
    return html.escape("" if value is None else str(value), quote=True)


def _valid_ts(value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return False
    return math.isfinite(value) and value > 0


def _abs(value: Any) -> str:
    if not _valid_ts(value):
        return "—"
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def relative(value: Any, now: float) -> str:
    """'12 s ago', 'in 4 s', '3.2 h ago': what someone woken at 3 a.m. reads first."""
    if not _valid_ts(value):
        return "never"
    delta = now - value
    seconds = abs(delta)
    text = f"{seconds:.0f} s"
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            text = f"{seconds / size:.1f} {unit}"
            break
    return f"{text} ago" if delta >= 0 else f"in {text}"


def _ts(value: Any, now: float | None = None) -> str:
    """Absolute and relative: '2026-12-01 03:12:09 UTC (12 s ago)'."""
    if not _valid_ts(value):
        return "—"
    if now is None:
        return _abs(value)
    return f"{_abs(value)} ({relative(value, now)})"


def _num(value: Any, digits: int = 1) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "—"
    return f"{value:,.{digits}f}"


def _ms(value: Any) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "—"
    return f"{value * 1000:,.0f} ms"


def _badge(text: str, cls: str) -> str:
    return f'<span class="badge {cls}">{_e(text)}</span>'


def _table(headers: Sequence[str], rows: Iterable[Sequence[str]], empty: str) -> str:
    body = "".join("<tr>" + "".join(rows_cell for rows_cell in row) + "</tr>" for row in rows)
    if not body:
        return f'<p class="muted">{_e(empty)}</p>'
    head = "".join(f"<th>{_e(h)}</th>" for h in headers)
    return f"<table><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def _td(value: str, num: bool = False) -> str:
    return f'<td class="num">{value}</td>' if num else f"<td>{value}</td>"


_WHY_STATES = ("failed", "restarting", "stopped", "starting", "warming", "unhealthy")


def _why(server: Mapping[str, Any], now: float) -> str:
    """The box at the top when the server is not ready: what happened, when it retries, what to do."""
    state = str(server.get("state", "unknown"))
    if state not in _WHY_STATES:
        return ""
    cls = "bad" if state in ("failed", "stopped", "unhealthy") else "warn"
    parts = [f"<h2>Server {_e(state)} since {_e(_ts(server.get('since'), now))}</h2>"]
    crash = server.get("last_crash")
    if isinstance(crash, Mapping):
        parts.append(
            f"<p><b>Last crash / failed start:</b> {_badge(str(crash.get('reason')), 'bad')} "
            f"{_e(_ts(crash.get('at'), now))}<br>{_e(crash.get('detail'))}</p>"
        )
        lines = [str(line) for line in crash.get("lines") or []]
        if lines:
            parts.append("<pre>" + _e("\n".join(lines)) + "</pre>")
    if server.get("retry") == "waiting for reset":
        parts.append("<p><b>Next retry:</b> none, waiting for reset</p>")
    elif server.get("next_retry_at"):
        parts.append(f"<p><b>Next retry:</b> {_e(_ts(server.get('next_retry_at'), now))}</p>")
    if server.get("action"):
        parts.append(f'<p class="action"><b>What to do:</b> {_code(str(server["action"]))}</p>')
    return f'<section class="wide why {cls}box">{"".join(parts)}</section>'


def _fallback(server: Mapping[str, Any]) -> str:
    """The box while the fallback configuration runs (or when none was possible)."""
    fb = server.get("fallback")
    if not isinstance(fb, Mapping) or not fb.get("message"):
        return ""
    parts = [f"<h2>Launch configuration: {_e(fb.get('source'))}</h2><p>{_code(str(fb['message']))}</p>"]
    diffs = [str(d) for d in fb.get("differences") or []]
    if diffs:
        parts.append(
            "<p><b>Differences (configured → fallback):</b></p><pre>" + _e("\n".join(diffs)) + "</pre>"
        )
    return f'<section class="wide why warnbox">{"".join(parts)}</section>'


def _code(text: str) -> str:
    """Escaped text with `backticked` spans as <code>."""
    pieces = _e(text).split("`")
    return "".join(f"<code>{p}</code>" if i % 2 else p for i, p in enumerate(pieces))


def _server(server: Mapping[str, Any], now: float) -> str:
    state = str(server.get("state", "unknown"))
    crash = server.get("last_crash")
    rows = [
        (
            "State",
            _badge(state, _STATE_CLASS.get(state, "warn"))
            + f' <span class="muted">since {_e(_ts(server.get("since"), now))}</span>',
        ),
        ("Ready since", _e(_ts(server.get("ready_at"), now))),
        ("Last time to ready", _e(_seconds(server.get("start_duration_seconds")))),
        ("Launch config", f"<code>{_e(server.get('launch_hash') or '—')}</code>"),
        ("Mode", _e(server.get("mode"))),
        ("Target kind", _kind(server)),
        ("Address", _e(server.get("url"))),
        ("Restarts", _e(server.get("restarts", "—"))),
        (
            "Last crash",
            _e(f"{crash.get('reason')}, {_ts(crash.get('at'), now)}")
            if isinstance(crash, Mapping)
            else "none",
        ),
    ]
    body = "".join(f"<tr><th>{_e(k)}</th><td>{v}</td></tr>" for k, v in rows)
    return f"<section><h2>Server</h2><table>{body}</table></section>"


def _kind(server: Mapping[str, Any]) -> str:
    if server.get("kind_undecided"):
        return _badge("undecided", "warn") + (
            ' <span class="muted">neither a server nor a router answered in time: read as a server; '
            "set <code>[server] kind</code></span>"
        )
    return _e(server.get("kind") or "—")


def _seconds(value: Any) -> str:
    text = _num(value, 1)
    return text if text == "—" else f"{text} s"


def _detail_td(text: Any, n: int = 90) -> str:
    """A detail cell: one line, cut with an ellipsis to the card's width (CSS), the whole text (as
    the status document has it) on hover and, for a long one, behind a click (<details>)."""
    full = "" if text is None else str(text)
    if len(full) <= n:
        return f'<td class="detail" title="{_e(full)}">{_e(full)}</td>'
    shown = full[: n - 1] + "…"
    return (
        f'<td class="detail" title="{_e(full)}"><details><summary>{_e(shown)}</summary>'
        f'<div class="full">{_e(full)}</div></details></td>'
    )


def _outcome_badge(ok: object, stale: bool = False) -> str:
    """ok / failing, or "unknown" when there is no outcome (not run, not collected, server down)."""
    if ok is None:
        return _badge("unknown", "warn")
    badge = _badge("ok", "ok") if ok else _badge("failing", "bad")
    return badge + (' <span class="muted">(stale)</span>' if stale else "")


def _probes(probes: Sequence[Mapping[str, Any]], state: str, now: float) -> str:
    rows = []
    for p in probes:
        stale = bool(p.get("stale"))
        rows.append(
            [
                _td(_e(p.get("name"))),
                _td(_outcome_badge(p.get("success"), stale and p.get("success") is not None)),
                _td(_e(relative(p.get("at"), now)), num=True),
                _td(_e(_ms(p.get("duration_seconds"))), num=True),
                _detail_td(p.get("detail") or ""),
            ]
        )
    note = ""
    if any(p.get("stale") for p in probes):
        note = (
            f'<p class="muted">The server is {_e(state)}: these are the last results of the previous '
            "life, no verdict on the server now (unknown until it serves again).</p>"
        )
    table = _table(["Probe", "Result", "Age", "Duration", "Detail"], rows, "No probe has run yet.")
    return f'<section class="probes"><h2>Probes and canaries</h2>{note}{table}</section>'


def _restarts(restarts: Sequence[Mapping[str, Any]], now: float) -> str:
    rows = [
        [
            _td(_e(_ts(r.get("ready_at"), now))),
            _td(f"<code>{_e(r.get('launch_hash') or '—')}</code>"),
        ]
        for r in reversed(list(restarts)[-10:])
    ]
    table = _table(["Ready at", "Launch config"], rows, "No server start seen yet.")
    return f"<section><h2>Server lives (newest first)</h2>{table}</section>"


def _runs(recent: Sequence[Mapping[str, Any]], current: Mapping[str, Any] | None, now: float) -> str:
    head = ""
    if current:
        head = (
            f"<p>Running now: <b>{_e(current.get('profile'))}</b> "
            f"since {_e(_ts(current.get('started_at'), now))} — "
            f"{_e(current.get('completed'))} done, {_e(current.get('failed'))} failed, "
            f"{_e(current.get('in_flight'))} in flight</p>"
        )
    rows = []
    for r in reversed(list(recent)[-25:]):
        summary = r.get("summary") if isinstance(r.get("summary"), Mapping) else {}
        assert isinstance(summary, Mapping)
        if r.get("kind") == "skip":
            outcome = _badge("skipped", "warn") + f" {_e(r.get('reason'))}"
        else:
            o = str(r.get("outcome"))
            cls = "ok" if o == "completed" else "warn" if o == "cancelled" else "bad"
            outcome = _badge(o, cls) + (f" {_e(r.get('abort_reason'))}" if r.get("abort_reason") else "")
        if summary.get("client_bound"):
            why = "; ".join(str(x) for x in summary.get("client_bound_reasons") or [])
            outcome += " " + f'<span class="badge warn" title="{_e(why)}">client-bound</span>'
        ref = "yes" if r.get("reference") else ("no" if r.get("kind") == "run" else "")
        if r.get("untrusted") == "time_gap":
            # Sentinel was stopped or frozen during the run: its figures are not the server's.
            outcome += " " + _badge("time gap", "warn")
        if ref == "no" and r.get("excluded_reason"):
            ref = f"no ({str(r.get('excluded_reason')).replace('_', ' ')})"
        requests = r.get("requests") if isinstance(r.get("requests"), Mapping) else {}
        assert isinstance(requests, Mapping)
        failed = sum(v for k, v in requests.items() if k != "success" and isinstance(v, int))
        rows.append(
            [
                _td(_e(_ts(r.get("started_at", r.get("at")), now))),
                _td(_e(r.get("profile"))),
                _td(outcome),
                _td(_e(ref)),
                _td(_e(r.get("num_prompts", "")), num=True),
                _td(_e(f"{requests.get('success', '')}/{failed}" if requests else ""), num=True),
                _td(_e(_num(summary.get("output_throughput"))), num=True),
                _td(_e(_num(summary.get("total_throughput"))), num=True),
                _td(_e(_ms(summary.get("ttft_p50"))), num=True),
                _td(_e(_ms(summary.get("ttft_p99"))), num=True),
                _td(_e(_ms(summary.get("tpot_p50"))), num=True),
                _td(_e(_num(summary.get("concurrency_mean"))), num=True),
                _td(energy_cell(r.get("energy")), num=True),
            ]
        )
    table = _table(
        [
            "Started",
            "Profile",
            "Outcome",
            "Ref.",
            "Prompts",
            "OK/failed",
            "Out tok/s",
            "Total tok/s",
            "TTFT p50",
            "TTFT p99",
            "TPOT p50",
            "Conc.",
            "GPU J/tok",
        ],
        rows,
        "No load run yet.",
    )
    note = (
        '<p class="muted">client-bound: the load generator, not the server, limited the run '
        "(its latencies include the client's own delay); such runs do not feed the throughput alert.</p>"
        if any(isinstance(r.get("summary"), Mapping) and r["summary"].get("client_bound") for r in recent)
        else ""
    )
    return f'<section class="wide"><h2>Load runs (newest first)</h2>{head}{table}{note}</section>'


def _firing(job: str, ts: Any, now: float, server_ready: bool) -> str:
    when = _e(_ts(ts, now))
    if not server_ready and job.startswith(("load:", "ready:")):
        # A load job fires on schedule but skips (counted, reason server_not_ready) while the server is not
        # ready; listing it bare would promise a run that will not happen.
        when += ' <span class="muted">(skips unless the server is ready)</span>'
    return f"<tr><th>{_e(job)}</th><td>{when}</td></tr>"


def _budget(budget: Mapping[str, Any], next_runs: Mapping[str, Any], now: float, server_ready: bool) -> str:
    limit = budget.get("tokens_per_hour")
    spent = budget.get("spent")
    share = (
        spent / limit if isinstance(spent, int | float) and isinstance(limit, int | float) and limit else None
    )
    rows = "".join(
        _firing(str(job), ts, now, server_ready)
        for job, ts in sorted(next_runs.items(), key=lambda kv: kv[1])
        if not str(job).startswith("server_watch")
    )
    return (
        "<section><h2>Synthetic-token budget</h2>"
        f'<p class="big">{_e(_num(spent, 0))} / {_e(_num(limit, 0))}</p>'
        f'<p class="muted">tokens spent or reserved in the sliding hour '
        f"({_e(_num((share or 0) * 100, 0))}% of the budget)</p>"
        f"<h2>Next firings</h2><table>{rows}</table></section>"
    )


def capacity_text(capacity: Mapping[str, Any]) -> str:
    """The throughput as it should be read: "≥ X tok/s (lower bound: ...)" when it did not saturate."""
    figure = _num(capacity.get("output_throughput")) + " tok/s"
    if capacity.get("bound") == "lower":
        up_to = capacity.get("max_concurrency")
        return f"≥ {figure} (lower bound: did not saturate up to concurrency {up_to})"
    return figure


def energy_text(energy: Any) -> str:
    """A run's GPU energy per output token, or why it has none ("" when the run was not metered)."""
    if not isinstance(energy, Mapping):
        return ""
    per_token = energy.get("joules_per_output_token")
    if isinstance(per_token, int | float):
        return f"{per_token:.3g} J/tok"
    return f"no energy ({energy.get('reason') or 'unknown'})"


def energy_cell(energy: Any) -> str:
    if not isinstance(energy, Mapping):
        return ""
    text = energy_text(energy).removesuffix(" J/tok")
    watts = energy.get("mean_power_watts")
    title = f"{_num(watts)} W mean over {_num(energy.get('seconds'))} s" if watts is not None else ""
    if energy.get("detail"):
        title = str(energy["detail"])
    return f'<span title="{_e(title)}">{_e(text)}</span>'


def _energy(energy: Mapping[str, Any], now: float) -> str:
    if not energy.get("metered"):
        return ""
    rows = [
        ("Idle baseline", _num(energy.get("baseline_power_watts")) + " W"),
        ("Baseline measured", _ts(energy.get("baseline_measured_at"), now)),
    ]
    if energy.get("price_per_kwh") is not None:
        rows.append(("Energy price", f"{energy['price_per_kwh']:g} {energy.get('currency') or ''}/kWh"))
    body = "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"
    note = (
        "<p class=\"muted\">GPU energy of the server's GPUs from their energy counters; each run's "
        "joules per token are in the runs table. Costs are energy cost only.</p>"
    )
    return f"<section><h2>GPU energy</h2>{body}{note}</section>"


def _capacity(capacity: Mapping[str, Any], report_url: str | None, calibrating: bool, now: float) -> str:
    if not capacity:
        now_text = " (calibrating now)." if calibrating else "."
        body = f'<p class="muted">No conclusive calibration yet{now_text}</p>'
    else:
        lower = capacity.get("bound") == "lower"
        rows = [
            ("Output throughput" if lower else "Saturation output throughput", capacity_text(capacity)),
            ("Knee concurrency", ("≥ " if lower else "") + _num(capacity.get("knee_concurrency"), 0)),
        ]
        if capacity.get("slo_concurrency") is not None:
            rows.append(("Max concurrency within SLO", _num(capacity.get("slo_concurrency"), 0)))
        if capacity.get("knee_tokens_per_joule") is not None:
            rows.append(("Tokens per joule at the knee", _num(capacity.get("knee_tokens_per_joule"), 3)))
        if capacity.get("efficient_concurrency") is not None:
            rows.append(
                ("Efficient concurrency (fewest J/tok)", _num(capacity.get("efficient_concurrency"), 0))
            )
        rows.append(("Calibrated", _ts(capacity.get("finished_at"), now)))
        body = "<table>" + "".join(f"<tr><th>{_e(k)}</th><td>{_e(v)}</td></tr>" for k, v in rows) + "</table>"
    link = f'<p><a href="{_e(report_url)}">Latest calibration report</a></p>' if report_url else ""
    return f"<section><h2>Capacity</h2>{body}{link}</section>"


def _collectors(collectors: Sequence[Mapping[str, Any]], state: str) -> str:
    serving = state in ("ready", "unhealthy")
    rows = []
    for c in collectors:
        badge = _outcome_badge(c.get("success"))
        if c.get("state") == "not_applicable":
            badge = _badge("not applicable", "na")
        if c.get("name") == "sglang" and c.get("success") is False and not serving:
            # Expected while there is no server to scrape: the server state says why.
            badge = _badge("no server", "warn")
        rows.append([_td(_e(c.get("name"))), _td(badge), _detail_td(c.get("detail") or "")])
    table = _table(["Collector", "Status", "Detail"], rows, "None enabled.")
    return f"<section><h2>Collectors</h2>{table}</section>"


def render_status_page(snapshot: Mapping[str, Any]) -> str:
    """The whole page from a status snapshot (see ``sglang_sentinel.daemon.Daemon.status``)."""
    server = snapshot.get("server") or {}
    sched = snapshot.get("schedule") or {}
    state = str(server.get("state", "unknown"))
    report_url = snapshot.get("calibration_report_url")
    generated = snapshot.get("generated_at")
    now = float(generated) if isinstance(generated, int | float) and _valid_ts(generated) else time.time()
    return (
        "<!doctype html><html lang=en><head><meta charset=utf-8>"
        '<meta http-equiv="refresh" content="15">'
        '<meta name="viewport" content="width=device-width,initial-scale=1">'
        f"<title>sentinel — {_e(state)}</title><style>{_CSS}</style></head><body>"
        f"<header><h1>sglang-sentinel</h1><span>{_badge(state, _STATE_CLASS.get(state, 'warn'))}</span>"
        f'<span class="muted">{_e(_abs(generated))} · v{_e(snapshot.get("version"))}</span>'
        '<a href="/metrics">/metrics</a><a href="/status.json">/status.json</a>'
        + (f'<a href="{_e(report_url)}">calibration report</a>' if report_url else "")
        + "</header><main>"
        + _why(server, now)
        + _fallback(server)
        + _server(server, now)
        + _probes(snapshot.get("probes") or [], state, now)
        + _runs(sched.get("recent") or [], sched.get("current"), now)
        + _budget(sched.get("budget") or {}, sched.get("next_runs") or {}, now, state == "ready")
        + _capacity(snapshot.get("capacity") or {}, report_url, bool(snapshot.get("calibrating")), now)
        + _energy(snapshot.get("energy") or {}, now)
        + _restarts(sched.get("restarts") or [], now)
        + _collectors(snapshot.get("collectors") or [], state)
        + "</main></body></html>"
    )
