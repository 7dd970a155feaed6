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

__all__ = ["RESET_COMMAND", "probe_rows", "server_section", "status_json"]

#: The command that leaves ``failed`` (forgets the crash-loop history, starts the server again);
#: the one logs, alerts, the status page and the README tell an operator to run (daemon.py too).
RESET_COMMAND = "sentinel reset"
# Canary answers can be long (a whole paragraph of garbage): a screen shows the start.
_DETAIL_CHARS = 160
_SERVING = (ServerState.READY, ServerState.UNHEALTHY)


def _cut(text: str, n: int = _DETAIL_CHARS) -> str:
    text = " ".join(text.split())
    return text if len(text) <= n else text[: n - 1] + "…"


def _action(snap: SupervisorSnapshot, settings: ServerSettings, url: str) -> str | None:
    state = snap.state
    restart = settings.restart
    if state is ServerState.FAILED:
        return (
            f"Fix the cause shown above, then run `{RESET_COMMAND}`: it clears the crash-loop "
            "history and starts the server again (restarting the sentinel service does too)."
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
        **retry,
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
