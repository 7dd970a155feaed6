"""``sentinel status``: a human summary from the running daemon, with an exit code for scripts.

It asks the daemon's exporter for ``/status.json`` (the snapshot behind the status page), so it
shows what the daemon knows, not a second opinion. Exit codes (monitoring-plugin style, with 2
kept for configuration errors as everywhere in the CLI):

- 0: the server is ready, every probe and canary passes and every collector collects;
- 1: degraded: the server is not ready, a probe or canary fails, or a collector fails (a GPU
  host that lost NVML is not healthy; a collector that is *not applicable*, such as the GPU
  collector on a host without an NVIDIA driver whose launch needs no GPU, is not a failure);
- 3: the daemon cannot be reached (not running, wrong address) or answered nonsense.
"""

from __future__ import annotations

import argparse
import math
import time
from datetime import UTC, datetime
from typing import Any

from sglang_sentinel.cli.common import CliError, add_common_options
from sglang_sentinel.status_page import capacity_text, energy_text, relative

__all__ = ["exporter_url", "health_code", "positive_seconds", "register", "summarize"]

EXIT_OK, EXIT_DEGRADED, EXIT_UNREACHABLE = 0, 1, 3


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "status",
        help="summarize the running daemon's state (exit 0 healthy, 1 degraded, 3 unreachable)",
    )
    add_common_options(p)
    p.add_argument(
        "--url",
        default=None,
        help="the daemon's exporter URL (default: from [exporter] host/port of the config)",
    )
    p.add_argument(
        "--timeout", type=positive_seconds, default=5.0, help="seconds to wait for the daemon (default 5)"
    )
    p.add_argument("--json", action="store_true", help="print the raw status document instead")
    p.set_defaults(handler=_handle)


def positive_seconds(text: str) -> float:
    """argparse type: a finite number of seconds > 0 (a usage error, exit 2, otherwise)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a positive number of seconds")
    return value


def exporter_url(config: str | None) -> str:
    """The running daemon's exporter URL, from the [exporter] section of ``config``."""
    from sglang_sentinel.config import load_settings
    from sglang_sentinel.netloc import url_host

    exporter = load_settings(config).exporter
    scheme = "https" if exporter.tls is not None else "http"
    return f"{scheme}://{url_host(exporter.host)}:{exporter.port}"


def _ago(ts: Any, now: float) -> str:
    """Relative and absolute: "12 s ago (03:12:09 UTC)"."""
    if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts) or ts <= 0:
        return "never"
    clock = datetime.fromtimestamp(ts, UTC).strftime("%H:%M:%S UTC")
    return f"{relative(ts, now)} ({clock})"


def _num(value: Any, digits: int = 1) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "—"
    return f"{value:,.{digits}f}"


def _server_up(status: dict[str, Any]) -> bool:
    state = (status.get("server") or {}).get("state")
    group = status.get("group") or {}
    # A group's rank >= 1 has no API: "running" (process up, joined) is as good as it gets.
    if group and group.get("rank", 0) >= 1:
        return state == "running"
    if group and group.get("members_ready") != group.get("nnodes"):
        return False  # rank 0 of a half-up group
    return state == "ready"


def _group_lines(status: dict[str, Any]) -> list[str]:
    group = status.get("group") or {}
    if not group:
        return []
    ready = group.get("members_ready")
    head = f"group       rank {group.get('rank')} of {group.get('nnodes')}"
    head += f", {ready}/{group.get('nnodes')} ranks up" if ready is not None else ""
    head += ", orchestrated (observe only)" if group.get("orchestrated") else f", phase {group.get('phase')}"
    lines = [head]
    for m in group.get("members") or []:
        where = "" if m.get("reachable", True) else f" (agent unreachable: {m.get('error')})"
        lines.append(f"  rank {m.get('rank')}    {m.get('state')}, pid {m.get('pid')}{where}")
    return lines


def health_code(status: dict[str, Any]) -> int:
    if not _server_up(status):
        return EXIT_DEGRADED
    if any(p.get("success") is False for p in status.get("probes") or []):
        return EXIT_DEGRADED
    if any(c.get("success") is False for c in status.get("collectors") or []):
        return EXIT_DEGRADED
    return EXIT_OK


def summarize(status: dict[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    server = status.get("server") or {}
    lines = [
        f"server      {server.get('state', 'unknown')} ({server.get('mode')}, {server.get('url')}), "
        f"since {_ago(server.get('since'), now)}, restarts {server.get('restarts', 0)}",
    ]
    sglang = server.get("sglang")
    if isinstance(sglang, dict):
        mark = "" if sglang.get("known") else "WARN "
        lines.append(f"sglang      {mark}{sglang.get('reported') or 'not detected'}: {sglang.get('note')}")
    crash = server.get("last_crash")
    if isinstance(crash, dict):
        lines.append(f"last crash  {crash.get('reason')} {_ago(crash.get('at'), now)}: {crash.get('detail')}")
        for line in crash.get("lines") or []:
            lines.append(f"  log       {line}")
    if server.get("retry") == "waiting for reset":
        lines.append("next retry  none: waiting for reset")
    elif server.get("next_retry_at"):
        lines.append(f"next retry  {_ago(server.get('next_retry_at'), now)}")
    fallback = server.get("fallback")
    if isinstance(fallback, dict) and fallback.get("message"):
        lines.append(f"fallback    {fallback['message']}")
        for diff in fallback.get("differences") or []:
            lines.append(f"  differs   {diff}")
    if server.get("action"):
        lines.append(f"do          {server['action']}")
    if server.get("kind_undecided"):
        lines.append(
            "target      kind undecided: neither a server nor a router answered in time, read as a server "
            "(a router with no worker would pass as up); set [server] kind = router or server"
        )
    for probe in status.get("probes") or []:
        ok = probe.get("success")
        mark = "?   " if ok is None else "ok  " if ok else "FAIL"
        stale = " (stale: server not serving)" if probe.get("stale") else ""
        lines.append(
            f"probe       {mark} {probe.get('name')}  "
            f"{_num((probe.get('duration_seconds') or 0) * 1000, 0)} ms, {_ago(probe.get('at'), now)}"
            + stale
            + ("" if ok else f"  ({probe.get('detail')})")
        )
    lines += _group_lines(status)
    sched = status.get("schedule") or {}
    current = sched.get("current")
    if current:
        lines.append(
            f"running     {current.get('profile')} since {_ago(current.get('started_at'), now)}: "
            f"{current.get('completed')} done, {current.get('failed')} failed, "
            f"{current.get('in_flight')} in flight"
        )
    runs = [r for r in sched.get("recent") or [] if r.get("kind") == "run"]
    for record in runs[-3:]:
        summary = record.get("summary") or {}
        reason = f" ({record['abort_reason']})" if record.get("abort_reason") else ""
        ref = "" if record.get("reference") else ", not reference"
        if summary.get("client_bound"):
            ref += ", CLIENT-BOUND (" + "; ".join(summary.get("client_bound_reasons") or []) + ")"
        lines.append(
            f"run         {record.get('profile')} {record.get('outcome')}{reason} "
            f"{_ago(record.get('started_at'), now)}: "
            f"{_num(summary.get('output_throughput'))} out tok/s, TTFT p99 "
            f"{_num((summary.get('ttft_p99') or float('nan')) * 1000, 0)} ms"
            + (f", {energy_text(record.get('energy'))}" if record.get("energy") else "")
            + ref
        )
    if not runs:
        lines.append("run         none yet")
    budget = sched.get("budget") or {}
    if budget:
        lines.append(
            f"budget      {_num(budget.get('spent'), 0)} of {_num(budget.get('tokens_per_hour'), 0)} "
            "tokens this hour (spent or reserved by the run in progress)"
        )
    capacity = status.get("capacity") or {}
    if capacity:
        at = "" if capacity.get("bound") == "lower" else " at saturation"
        slo = capacity.get("slo_concurrency")
        lines.append(
            f"capacity    {capacity_text(capacity)} output{at}, knee "
            f"{_num(capacity.get('knee_concurrency'), 0)}"
            + (f", {_num(slo, 0)} within SLO" if slo is not None else "")
            + f", calibrated {_ago(capacity.get('finished_at'), now)}"
        )
    else:
        lines.append(
            "capacity    no conclusive calibration yet"
            + (" (calibrating now)" if status.get("calibrating") else "")
        )
    energy = status.get("energy") or {}
    if energy.get("metered"):
        price = energy.get("price_per_kwh")
        lines.append(
            f"energy      idle baseline {_num(energy.get('baseline_power_watts'))} W"
            + (f", energy price {price:g} {energy.get('currency') or ''}/kWh" if price is not None else "")
            + (
                f", {_num(capacity.get('knee_tokens_per_joule'), 3)} tok/J at the knee, most efficient at "
                f"concurrency {_num(capacity.get('efficient_concurrency'), 0)}"
                if capacity.get("efficient_concurrency") is not None
                else ""
            )
        )
    failing = [c for c in status.get("collectors") or [] if c.get("success") is False]
    for c in failing:
        lines.append(f"collector   FAIL {c.get('name')}: {c.get('detail')}")
    for c in status.get("collectors") or []:
        if c.get("state") == "not_applicable":
            lines.append(f"collector   n/a  {c.get('name')}: {c.get('detail')}")
    code = health_code(status)
    lines.insert(0, "sentinel: " + ("healthy" if code == EXIT_OK else "DEGRADED"))
    return "\n".join(lines)


def _handle(args: argparse.Namespace) -> int:
    import json

    import httpx

    url = args.url or exporter_url(args.config)
    target = url.rstrip("/") + "/status.json"
    try:
        # The daemon's own certificate is often self-signed; this reads local state only.
        response = httpx.get(target, timeout=args.timeout, verify=False)
    except httpx.HTTPError as exc:
        raise CliError(
            f"cannot reach the daemon at {url}: {type(exc).__name__}: {exc}", EXIT_UNREACHABLE
        ) from None
    if response.status_code == 401:
        raise CliError(
            f"{target}: 401 (the exporter wants basic auth; pass --url with credentials)", EXIT_UNREACHABLE
        )
    if response.status_code != 200:
        raise CliError(f"{target}: HTTP {response.status_code}", EXIT_UNREACHABLE)
    try:
        status = response.json()
    except ValueError:
        raise CliError(f"{target}: not JSON (is this a sentinel exporter?)", EXIT_UNREACHABLE) from None
    if not isinstance(status, dict) or "server" not in status:
        raise CliError(f"{target}: not a sentinel status document", EXIT_UNREACHABLE)
    if args.json:
        print(json.dumps(status, indent=2, sort_keys=True))
    else:
        print(summarize(status))
        generated = status.get("generated_at")
        if isinstance(generated, int | float):
            print(f"(as of {datetime.fromtimestamp(generated, UTC).isoformat(timespec='seconds')})")
    return health_code(status)
