"""Is the target at host:port an SGLang server or SGLang's router? (``[server] kind = "auto"``)

What each side serves (checked against smg 1.13.0 in front of simulators, and the route tables of
SGLang 0.5.9 / 0.5.23 ``srt/entrypoints/http_server.py``):

============== =============================================== ===================================
route          router (smg)                                    SGLang server
============== =============================================== ===================================
/readiness     200 ``{"status", "healthy_workers",             404 (no such route)
               "total_workers"}``, 503 ``{"status", "reason"}``
/workers       200 ``{"workers": [...]}``                      404
/server_info   404                                             200 ``{..., "version": "0.5.x"}``
/health        200 even with no worker                         200 when up
============== =============================================== ===================================

The router *proxies* /get_server_info and /get_model_info to a worker, so those say nothing.
A verdict needs agreement: ``router`` when /readiness and /workers both answer in the router's
shape; ``server`` when /server_info answers in SGLang's shape and neither router route does.
Anything else (unreachable, half the evidence, both) is ``None``: undecided, and the caller falls
back to the safe kind (``server``: what an external target was before ``auto`` existed).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from sglang_sentinel.httpread import HttpReadError, read, tls_context
from sglang_sentinel.log import get_logger

__all__ = ["Detection", "TargetInfo", "classify", "detect_kind", "probe_once", "resolve_kind"]

_log = get_logger(__name__)

Kind = Literal["server", "router"]
_MAX_BYTES = 4 << 20


@dataclass(frozen=True, slots=True)
class Detection:
    kind: Kind | None  # None: undecided
    # Which routes answered in which shape, e.g. "readiness=router workers=router server_info=absent".
    evidence: str


def _router_readiness(status: int, body: Any) -> bool:
    # smg 1.13.0: 200 {"status": "ready", "healthy_workers": 2, "total_workers": 2};
    # 503 {"status": "not ready", "reason": "..."} (no healthy worker, or "draining" as it stops).
    if not isinstance(body, dict) or not isinstance(body.get("status"), str):
        return False
    if status == 200:
        return isinstance(body.get("healthy_workers"), int) and isinstance(body.get("total_workers"), int)
    return status == 503 and isinstance(body.get("reason"), str)


def _router_workers(status: int, body: Any) -> bool:
    return status == 200 and isinstance(body, dict) and isinstance(body.get("workers"), list)


def _sglang_server_info(status: int, body: Any) -> bool:
    return (
        status == 200
        and isinstance(body, dict)
        and isinstance(body.get("version"), str)
        and ("model_path" in body or "tp_size" in body)
    )


def classify(replies: dict[str, tuple[int, Any] | None]) -> Detection:
    """The verdict of one round of replies: path -> (status, parsed JSON or None), None = no answer."""
    checks = {
        "/readiness": _router_readiness,
        "/workers": _router_workers,
        "/server_info": _sglang_server_info,
    }
    seen: dict[str, str] = {}
    for path, check in checks.items():
        reply = replies.get(path)
        if reply is None:
            seen[path] = "no_answer"
        elif check(*reply):
            seen[path] = "server" if path == "/server_info" else "router"
        else:
            seen[path] = "absent" if reply[0] == 404 else f"other_{reply[0]}"
    evidence = " ".join(f"{p.lstrip('/')}={v}" for p, v in seen.items())
    router_votes = [seen["/readiness"] == "router", seen["/workers"] == "router"]
    if all(router_votes):
        return Detection("router", evidence)
    # A server is only called one when the router routes are positively absent (404), not just
    # unanswered: a router that timed out on /readiness must not read as a server.
    if seen["/server_info"] == "server" and seen["/readiness"] == "absent" and seen["/workers"] == "absent":
        return Detection("server", evidence)
    return Detection(None, evidence)


async def _get(client: httpx.AsyncClient, path: str, timeout_s: float) -> tuple[int, Any] | None:
    try:
        reply = await read(client, "GET", path, deadline_s=timeout_s, max_bytes=_MAX_BYTES)
    except HttpReadError:
        return None
    try:
        body = reply.json()
    except ValueError:
        body = None
    return reply.status_code, body


async def probe_once(client: httpx.AsyncClient, timeout_s: float) -> Detection:
    paths = ("/readiness", "/workers", "/server_info")
    answers = await asyncio.gather(*(_get(client, p, timeout_s) for p in paths))
    return classify(dict(zip(paths, answers, strict=True)))


async def detect_kind(
    base_url: str,
    *,
    within_s: float,
    interval_s: float = 1.0,
    timeout_s: float = 2.0,
    api_key: str = "",
    transport: httpx.AsyncBaseTransport | None = None,
) -> Detection:
    """Probe until a verdict or ``within_s`` seconds have passed; the last round's evidence if none."""
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    deadline = time.monotonic() + within_s
    async with httpx.AsyncClient(
        base_url=base_url,
        headers=headers,
        transport=transport,
        trust_env=False,
        verify=tls_context(trust_env=False),
    ) as client:
        while True:
            found = await probe_once(client, timeout_s)
            if found.kind is not None or time.monotonic() + interval_s > deadline:
                return found
            await asyncio.sleep(interval_s)


async def resolve_kind(
    base_url: str,
    *,
    stop: asyncio.Event,
    within_s: float,
    interval_s: float,
    timeout_s: float,
    api_key: str = "",
) -> Detection | None:
    """:func:`detect_kind` at a daemon's start, logged; ``None`` when ``stop`` is set first.

    A target that is down makes detection take ``within_s``: a stop request must not wait that out.
    """
    detect = asyncio.create_task(
        detect_kind(base_url, within_s=within_s, interval_s=interval_s, timeout_s=timeout_s, api_key=api_key)
    )
    stopped = asyncio.create_task(stop.wait())
    await asyncio.wait({detect, stopped}, return_when=asyncio.FIRST_COMPLETED)
    stopped.cancel()
    if not detect.done():
        detect.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await detect
        return None
    found = detect.result()
    if found.kind is None:
        _log.warning(
            "target_kind_undetermined", fallback="server", evidence=found.evidence, waited_seconds=within_s
        )
    else:
        _log.info("target_kind_detected", kind=found.kind, evidence=found.evidence)
    return found


class TargetInfo:
    """``sentinel_target_info{kind, declared, evidence}``: what sentinel treats the target as (constant 1);
    for ``kind = "auto"`` also ``sentinel_target_kind_undecided``: 1 while the routes decided nothing
    (the target is read as a server then, which a router with no worker would pass as up)."""

    def __init__(self, kind: str, declared: str, evidence: str = "", *, undecided: bool = False) -> None:
        self._labels = [kind, declared, evidence]
        self._declared = declared
        self._undecided = undecided

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "sentinel_target_info",
            "What sentinel treats the target as (kind: server or router), what [server] kind declared"
            " (server, router, auto) and, for auto, the routes that decided it (constant 1).",
            labels=["kind", "declared", "evidence"],
        )
        family.add_metric(self._labels, 1.0)
        yield family
        if self._declared == "auto":
            yield GaugeMetricFamily(
                "sentinel_target_kind_undecided",
                "1 when [server] kind = auto could not tell a server from a router by its routes "
                "(read as a server until decided), else 0.",
                value=1.0 if self._undecided else 0.0,
            )
