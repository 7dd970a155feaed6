"""SGLang's router (PyPI ``smg``, successor of ``sglang-router``) as a target: what it says of its workers.

The router answers ``/health`` 200 even with no worker at all; whether it can serve is
``/readiness`` (200 with at least one healthy worker, 503 otherwise). ``/workers`` lists the pool
(``url``, ``is_healthy``, ``status``); the circuit breaker of each worker is only on the router's
own metrics port (``smg_worker_cb_state{worker}``: 0 closed, 1 open, 2 half-open). A worker is
*routable* when it is healthy and its breaker is closed. The router enforces the model name, so a
canary must name the model that ``/v1/models`` lists.

Public surface::

    from sglang_sentinel.router import RouterSnapshot, read_router, resolve_model
    snap = await read_router(client, metrics_url="http://127.0.0.1:29000/metrics")
    snap.routable("http://10.0.0.5:30000")   # True / False
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_sentinel.lazy import lazy_exports

if TYPE_CHECKING:
    from sglang_sentinel.router.read import READINESS_PATH, RouterReadError, read_router, resolve_model
    from sglang_sentinel.router.workers import RouterSnapshot, WorkerView, parse_breakers, parse_workers

__all__ = [
    "READINESS_PATH",
    "RouterReadError",
    "RouterSnapshot",
    "WorkerView",
    "parse_breakers",
    "parse_workers",
    "read_router",
    "resolve_model",
]

# Imported on first use: the config imports sglang_sentinel.router.settings (and so this package) for
# every CLI command; httpx and prometheus_client are not needed for that.
__getattr__ = lazy_exports(
    __name__,
    {
        "READINESS_PATH": "sglang_sentinel.router.read",
        "RouterReadError": "sglang_sentinel.router.read",
        "read_router": "sglang_sentinel.router.read",
        "resolve_model": "sglang_sentinel.router.read",
        "RouterSnapshot": "sglang_sentinel.router.workers",
        "WorkerView": "sglang_sentinel.router.workers",
        "parse_breakers": "sglang_sentinel.router.workers",
        "parse_workers": "sglang_sentinel.router.workers",
    },
)
