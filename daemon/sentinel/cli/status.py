"""``sentinel status``: a human summary from the running daemon, with an exit code for scripts.

It asks the daemon's exporter for ``/status.json`` (the snapshot behind the status page), so it
shows what the daemon knows, not a second opinion. Exit codes (monitoring-plugin style, with 2
kept for configuration errors as everywhere in the CLI):

- 0: the server is ready and every probe and canary passes;
- 1: degraded: the server is not ready, or a probe or canary fails;
- 3: the daemon cannot be reached (not running, wrong address) or answered nonsense.
"""

from __future__ import annotations

import argparse
import math
import time
from datetime import UTC, datetime
from typing import Any

from sentinel.cli.common import CliError, add_common_options

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
    from sentinel.config import load_settings
    from sentinel.netloc import url_host

    exporter = load_settings(config).exporter
    scheme = "https" if exporter.tls is not None else "http"
    return f"{scheme}://{url_host(exporter.host)}:{exporter.port}"


def _ago(ts: Any, now: float) -> str:
    if not isinstance(ts, int | float) or not math.isfinite(ts) or ts <= 0:
        return "never"
    seconds = max(0.0, now - ts)
    for unit, size in (("d", 86400), ("h", 3600), ("m", 60)):
        if seconds >= size:
            return f"{seconds / size:.1f}{unit} ago"
    return f"{seconds:.0f}s ago"


def _num(value: Any, digits: int = 1) -> str:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return "—"
    return f"{value:,.{digits}f}"


def health_code(status: dict[str, Any]) -> int:
    server = status.get("server") or {}
    if server.get("state") != "ready":
        return EXIT_DEGRADED
    if any(p.get("success") is False for p in status.get("probes") or []):
        return EXIT_DEGRADED
    return EXIT_OK


def summarize(status: dict[str, Any], now: float | None = None) -> str:
    now = time.time() if now is None else now
    server = status.get("server") or {}
    lines = [
        f"server      {server.get('state', 'unknown')} ({server.get('mode')}, {server.get('url')}), "
        f"ready {_ago(server.get('ready_at'), now)}, restarts {server.get('restarts', 0)}",
    ]
    if server.get("last_crash"):
        lines.append(f"last crash  {server['last_crash']}")
    for probe in status.get("probes") or []:
        mark = "ok  " if probe.get("success") else "FAIL"
        lines.append(
            f"probe       {mark} {probe.get('name')}  "
            f"{_num((probe.get('duration_seconds') or 0) * 1000, 0)} ms"
            + ("" if probe.get("success") else f"  ({probe.get('detail')})")
        )
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
        lines.append(
            f"run         {record.get('profile')} {record.get('outcome')}{reason} "
            f"{_ago(record.get('started_at'), now)}: "
            f"{_num(summary.get('output_throughput'))} out tok/s, TTFT p99 "
            f"{_num((summary.get('ttft_p99') or float('nan')) * 1000, 0)} ms{ref}"
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
        lines.append(
            f"capacity    {_num(capacity.get('output_throughput'))} out tok/s at saturation, knee "
            f"{_num(capacity.get('knee_concurrency'), 0)}, "
            f"calibrated {_ago(capacity.get('finished_at'), now)}"
        )
    else:
        lines.append(
            "capacity    not calibrated yet" + (" (calibrating now)" if status.get("calibrating") else "")
        )
    failing = [c for c in status.get("collectors") or [] if c.get("success") is False]
    for c in failing:
        lines.append(f"collector   FAIL {c.get('name')}: {c.get('detail')}")
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
