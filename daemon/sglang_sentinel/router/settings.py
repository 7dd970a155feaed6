"""``[server.router]``: what sentinel reads of a router target (``[server] kind = "router"``)."""

from __future__ import annotations

from pydantic import Field

from sglang_sentinel.section import Section

__all__ = ["RouterTargetSettings"]


class RouterTargetSettings(Section):
    # The router's own Prometheus listener (``smg launch --prometheus-port``), the only place
    # the workers' circuit breakers show. Empty: breakers unknown, routable = healthy.
    metrics_url: str = ""
    # The pool size the operator expects; 0 = not declared (no sentinel_router_workers_expected).
    expected_workers: int = Field(default=0, ge=0, le=100_000)
    # /workers and the metrics port are read at scrape time, bounded by this.
    timeout_seconds: float = Field(default=2.0, gt=0, le=30)
    # [server] kind = "auto": how long to probe for a verdict at start before falling back to
    # "server" (a target still starting answers nothing useful yet).
    detect_timeout_seconds: float = Field(default=30.0, ge=0, le=3600)
