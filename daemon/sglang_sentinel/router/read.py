"""Reading a router over HTTP: readiness, the worker pool, breakers, the served model.

Every read goes through :func:`sglang_sentinel.httpread.read` (one deadline, a byte cap).
"""

from __future__ import annotations

import time

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.httpread import HttpReadError, read
from sglang_sentinel.router.counters import RouterCounters, parse_counters
from sglang_sentinel.router.workers import RouterSnapshot, WorkerView, breakers_of, parse_workers

__all__ = ["READINESS_PATH", "RouterReadError", "read_router", "resolve_model"]

# /health is 200 with zero workers: never the readiness of a router.
READINESS_PATH = "/readiness"
_MAX_BYTES = 4 << 20  # /workers is ~3 KB per worker


class RouterReadError(Exception):
    """The router did not give a usable answer; ``reason`` is a stable label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


async def resolve_model(client: httpx.AsyncClient, timeout_s: float) -> str:
    """The first model id of ``GET /v1/models`` (the router enforces the model name of a request)."""
    try:
        resp = await read(
            client, "GET", "/v1/models", deadline_s=timeout_s, max_bytes=_MAX_BYTES, expect_ok=True
        )
        data = resp.json()
        model = data["data"][0]["id"]
    except HttpReadError as exc:
        raise RouterReadError(exc.reason, f"/v1/models: {exc.detail}") from None
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise RouterReadError("bad_reply", f"/v1/models: {type(exc).__name__}: {exc}") from None
    if not isinstance(model, str) or not model:
        raise RouterReadError("bad_reply", "/v1/models: data[0].id is not a string")
    return model


async def read_router(
    client: httpx.AsyncClient, *, timeout_s: float, metrics_url: str | None = None
) -> RouterSnapshot:
    """/readiness and /workers of the router ``client`` points at; breakers and counters from ``metrics_url``.

    Raises :class:`RouterReadError` when /workers cannot be read; an unreadable metrics port only
    leaves the breakers unknown (``breakers_read`` False): the pool is still worth reporting.
    """
    deadline = time.monotonic() + timeout_s
    try:
        ready = await read(client, "GET", READINESS_PATH, deadline_s=timeout_s, max_bytes=_MAX_BYTES)
        workers = await read(
            client,
            "GET",
            "/workers",
            deadline_s=max(0.05, deadline - time.monotonic()),
            max_bytes=_MAX_BYTES,
            expect_ok=True,
        )
        pool = parse_workers(workers.json())
    except HttpReadError as exc:
        raise RouterReadError(exc.reason, exc.detail[:200]) from None
    except ValueError as exc:  # JSONDecodeError is one
        raise RouterReadError("bad_reply", str(exc)[:200]) from None
    breakers: dict[str, str] = {}
    counters: RouterCounters | None = None
    breakers_read = False
    if metrics_url is not None:
        try:
            resp = await read(
                client,
                "GET",
                metrics_url,
                deadline_s=max(0.05, deadline - time.monotonic()),
                max_bytes=32 << 20,
                expect_ok=True,
            )
            families = list(text_string_to_metric_families(resp.text))
            breakers, counters = breakers_of(families), parse_counters(families)
            breakers_read = True
        except (HttpReadError, ValueError):
            pass
    views = tuple(
        WorkerView(url, healthy, status, breakers.get(url) if breakers_read else None)
        for url, healthy, status in pool
    )
    return RouterSnapshot(ready.status_code == 200, views, breakers_read, time.time(), counters)
