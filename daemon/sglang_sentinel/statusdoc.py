"""The server half of the status document: what state, why, and the one thing to do about it.

Built from the supervisor's published snapshot (never its live fields) by
:class:`sglang_sentinel.daemon.Daemon` for ``/``, ``/status.json`` and ``sentinel status``, so all
three say the same thing at 3 a.m.:
the state, the last crash or failed start (classified reason, detail, the log lines the verdict
rests on), the next retry or "waiting for reset", and the action that gets out of it.

Probe and canary results carry their time and age, and are marked ``stale`` while the server is
not serving: a result about the previous server life (or none yet) is no verdict on this one.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from sglang_sentinel.supervise.state import ServerState

if TYPE_CHECKING:
    from sglang_sentinel.supervise.settings import ServerSettings
    from sglang_sentinel.supervise.snapshot import SupervisorSnapshot

__all__ = [
    "RESET_COMMAND",
    "RESET_CONFIGURED_COMMAND",
    "fallback_section",
    "probe_rows",
    "server_section",
    "status_json",
]

#: The command that leaves ``failed`` (forgets the crash-loop history, starts the server again);
#: the one logs, alerts, the status page and the README tell an operator to run (daemon.py too).
RESET_COMMAND = "sentinel reset"
#: The command that ends a fallback (supervise/fallback.py): the configured launch again.
RESET_CONFIGURED_COMMAND = "sentinel reset --configured"
_WHAT = {"garbage": "answered garbage", "nan_in_sampler": "crashed on NaN"}
# Canary answers can be long (a whole paragraph of garbage): a screen shows the start.
_DETAIL_CHARS = 160
_SERVING = (ServerState.READY, ServerState.UNHEALTHY)


def _cut(text: str, n: int = _DETAIL_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _action(snap: SupervisorSnapshot, settings: ServerSettings, url: str) -> str | None:
    state = snap.state
    restart = settings.restart
    on_fallback = snap.fallback is not None and snap.fallback.source == "fallback"
    if state is ServerState.FAILED:
        if on_fallback:
            return (
                "The fallback configuration failed too (there is no second fallback). Fix the cause, "
                f"then run `{RESET_CONFIGURED_COMMAND}` to start the configured one again (or "
                f"`{RESET_COMMAND}` to retry the fallback)."
            )
        return (
            f"Fix the cause shown above, then run `{RESET_COMMAND}`: it clears the crash-loop "
            "history and starts the server again (restarting the sentinel service does too)."
        )
    if on_fallback and state is ServerState.READY:
        return (
            f"The configured launch answered wrong; the fallback answers now. Fix the configured one, then "
            f"run `{RESET_CONFIGURED_COMMAND}` to try it again."
        )
    if state is ServerState.RESTARTING:
        return (
            "Nothing yet: sentinel starts the server again at the retry time. After "
            f"{restart.max_restarts} restart{'' if restart.max_restarts == 1 else 's'} within "
            f"{restart.window:g} s it stops at failed and waits for `{RESET_COMMAND}`."
        )
    if state in (ServerState.STARTING, ServerState.WARMING):
        what = "loading weights" if state is ServerState.STARTING else "warming up (/health answers 503)"
        return (
            f"Wait: the server is {what}. sentinel gives up after {settings.start_timeout:g} s "
            "(start timeout) and restarts it."
        )
    if state is ServerState.UNHEALTHY:
        return (
            "A check fails (see Probes): sentinel restarts the server after the check's configured "
            "consecutive failures when its action is restart, else it only alerts."
        )
    if state is ServerState.RUNNING:
        return "Nothing: a group's rank >= 1 (no API of its own); rank 0's agent restarts the group."
    if state is ServerState.STOPPED:
        if snap.mode == "external":
            return f"Nothing answers at {url}: start the server (external mode: sentinel only watches it)."
        if snap.mode == "systemd":
            return f"The unit is not running: check `systemctl status {settings.systemd.unit}`."
        return "sentinel is about to start the server."
    return None


def server_section(
    snap: SupervisorSnapshot, settings: ServerSettings, url: str, now: float
) -> dict[str, Any]:
    """The ``server`` part of the status document."""
    crash = snap.last_crash
    last_crash = None
    if crash is not None:
        last_crash = {
            "reason": crash.reason,
            "detail": crash.detail,
            "at": crash.timestamp,
            "lines": list(crash.lines),
        }
    retry: dict[str, Any] = {}
    if snap.state is ServerState.FAILED:
        retry = {"retry": "waiting for reset", "next_retry_at": None}
    elif snap.state is ServerState.RESTARTING and snap.next_retry_at is not None:
        retry = {"retry": "scheduled", "next_retry_at": snap.next_retry_at}
    return {
        "state": snap.state.value,
        "since": snap.since,
        "ready_at": snap.epoch,
        "start_duration_seconds": snap.start_duration,
        "launch_hash": snap.config_hash,
        "restarts": sum(snap.restarts.values()),
        "last_crash": last_crash,
        "action": _action(snap, settings, url),
        # Who holds the server's port while a start waits for it (the cause of port_in_use).
        "port_held_by": snap.port_holders or None,
        "fallback": fallback_section(snap),
        **retry,
    }


def _utc(ts: float) -> str:
    import datetime

    return datetime.datetime.fromtimestamp(ts, datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def fallback_section(snap: SupervisorSnapshot) -> dict[str, Any] | None:
    """Which launch runs and why (child mode; systemd mode with the unit's flags known);
    ``message`` is the sentence every screen shows."""
    fb = snap.fallback
    if fb is None:
        return None
    message = None
    if fb.source == "fallback":
        since = _utc(fb.since) if fb.since is not None else "?"
        message = (
            f"running the fallback configuration {fb.running_hash} ({fb.origin}) since {since}; "
            f"the configured one ({fb.configured_hash}) {_WHAT.get(fb.reason, fb.reason)}: "
            f"{_cut(fb.example)}; run `{RESET_CONFIGURED_COMMAND}` to try it again"
        )
    elif fb.enabled and fb.exhausted:
        message = f"no fallback possible: {fb.exhausted}"
    return {
        "enabled": fb.enabled,
        "source": fb.source,
        "configured_hash": fb.configured_hash,
        "running_hash": fb.running_hash,
        "since": fb.since,
        "reason": fb.reason or None,
        "example": fb.example or None,
        "origin": fb.origin or None,
        "differences": list(fb.differences),
        "running_argv": list(fb.running_argv),
        "known_good_configs": fb.known_good,
        "recent_failures": fb.recent_failures,
        "exhausted": fb.exhausted or None,
        "message": message,
        "lives": [dict(life) for life in fb.lives],
    }


def probe_rows(snap: SupervisorSnapshot, now: float) -> list[dict[str, Any]]:
    """Every probe's last result with its age; ``stale`` while the server is not serving."""
    serving = snap.state in _SERVING
    rows = []
    for name, r in sorted(snap.probes.items()):
        # /health outside serving states: the server is not up, whatever the last check said;
        # that is a verdict about now (not stale). The other results are about a server that is gone.
        live = serving or name == "health"
        success: bool | None = r.ok if serving else (False if name == "health" else None)
        detail = r.detail or r.reason
        if not serving and name == "health" and r.ok:
            detail = f"server {snap.state.value}"
        rows.append(
            {
                "name": name,
                "success": success,
                "stale": not live,
                "at": r.at,
                "age_seconds": max(0.0, now - r.at),
                "duration_seconds": r.duration,
                "detail": _cut(detail),
                "reason": r.reason,
                # Failed `failures` times in a row on this server: what /verdict acts on.
                "confirmed": name in snap.confirmed,
                "consecutive_failures": snap.confirmed.get(name, 0),
            }
        )
    return rows


def _json_safe(value: Any) -> Any:
    # JSON has no NaN/Infinity; a figure that is not a number is "unknown" (null).
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json_safe(v) for v in value]
    return value


def status_json(value: Any) -> str:
    """``/status.json``'s encoding: NaN and infinities become null, unknown types their str()."""
    return json.dumps(_json_safe(value), default=str)
