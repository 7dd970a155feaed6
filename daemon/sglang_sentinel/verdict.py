"""``/verdict``: should the orchestrator restart the SGLang container? (Kubernetes livenessProbe.)

A liveness probe that restarts a server for every doubt would restart a 744B model for a slow
scrape; one that never fails leaves a server answering NaN garbage in service. So the verdict
fails (HTTP 503, one line) only on a *confirmed* failure of the checks that catch a broken but
running server: a correctness canary (wrong or garbage answers) or the stall check (requests
waiting, no tokens). "Confirmed" is the supervisor's own confirmation: the check failed
conclusively ``failures`` times in a row on the current server (``[server.checks.canary]`` /
``[server.checks.stall]``), the point at which child mode would restart it. Everything else is
200: the server is fine ("ok"), or sentinel cannot tell ("unsure": still loading, /metrics
unreadable, a first canary miss, the server gone, where the container's own exit or the
startupProbe decides).

``/verdict?ready`` is the startupProbe/readinessProbe form: also 503 until the server has become
ready (SGLang stays on loopback, where the kubelet's probes cannot reach it, so they ask sentinel).

Read from the daemon's status snapshot (the document behind ``/status.json``), never from the
supervisor's live fields, and open without credentials like ``/healthz``: the answer names only
a probe and a reason, never model output.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

__all__ = ["SERVING_STATES", "verdict"]

SERVING_STATES = frozenset({"ready", "unhealthy"})


def _decisive(name: str) -> bool:
    return name == "stall" or name.startswith("canary_")


def verdict(status: Mapping[str, Any], *, require_ready: bool = False) -> tuple[int, str]:
    """(HTTP status, one line) from a status snapshot (``Daemon.status()``)."""
    server = status.get("server") or {}
    state = str(server.get("state", "starting"))
    probes = [p for p in status.get("probes") or [] if isinstance(p, Mapping)]
    serving = state in SERVING_STATES
    confirmed = [p for p in probes if p.get("confirmed") and _decisive(str(p.get("name")))]
    if serving and confirmed:
        why = ", ".join(
            f"{p.get('name')} {p.get('reason')} ({p.get('consecutive_failures')} in a row)" for p in confirmed
        )
        return 503, f"failed: {why}"
    if require_ready and not serving:
        return 503, f"not ready: server {state}"
    failing = [str(p.get("name")) for p in probes if p.get("success") is False]
    if state == "ready" and not failing:
        return 200, "ok: server ready"
    detail = f"; failing, not confirmed: {', '.join(failing)}" if failing and serving else ""
    return 200, f"unsure: server {state}{detail}"
