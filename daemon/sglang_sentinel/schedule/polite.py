"""Polite injection: how busy the server is with *other people's* requests, and what to do about it.

Foreign traffic = the server's running + queued requests - sentinel's own requests in flight.
The server's figures come from its ``/metrics`` gauges (``sglang:num_running_reqs`` and
``sglang:num_queue_reqs``, which need ``--enable-metrics``) or from ``/v1/loads`` (newer SGLang,
computed on request). ``sglang:token_usage`` (KV-cache fill) is read in the same request because
the circuit breaker needs it.

With ``--enable-metrics-for-all-schedulers`` every TP rank of one data-parallel replica reports
the same scheduler figures, and with ``--enable-priority-scheduling`` (0.5.23) the queue gauges are
written as a total plus once per priority: :func:`sglang_sentinel.sglang.series.server_total` takes each
figure once (otherwise an 8-GPU server would report 8x, or a prioritised one 2x, its real load).
``/v1/loads`` carries an ``aggregate`` up to 0.5.9 only; 0.5.23 sends per-DP-rank ``loads`` alone.

Freshness: ``/v1/loads`` is computed on request (live), but the ``/metrics`` gauges are written
only when the scheduler logs (every ``decode_log_interval`` decode steps, every 30 s when idle).
Compared with sentinel's own in-flight count *now*, a stale gauge at the tail of a run (our own
count falling, the gauge still showing our earlier peak) reads as foreign traffic: in a real
Prometheus run (64 prompts at 16 req/s every 30 s, no other client) 32 of 37 runs were aborted
that way. So a sampled figure is compared with the highest own count of the window it may date
from (:class:`OwnTraffic`, ``gauge_max_age_seconds``), a live one with the own count now; and
every skip, shrink and abort logs the numbers it decided on (:class:`Assessment`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.httpread import HttpReadError, read, tls_context
from sglang_sentinel.schedule.settings import PoliteSettings
from sglang_sentinel.sglang.series import loads_totals, server_total

__all__ = [
    "Assessment",
    "Decision",
    "LoadReadError",
    "OwnTraffic",
    "ServerLoad",
    "ServerLoadReader",
    "assess",
    "decide",
    "parse_loads_json",
    "parse_metrics_text",
    "too_busy_now",
]

# Replies bigger than this are parsed in a worker thread, not on the daemon's event loop.
_PARSE_INLINE = 256 * 1024
_RUNNING = "sglang:num_running_reqs"
_QUEUED = "sglang:num_queue_reqs"
_USAGE = "sglang:token_usage"
_Sample = tuple[dict[str, str], float]
# (loads document, metrics text) per target kind. A router has neither /v1/loads nor /metrics:
# /engine_metrics is its workers' /metrics fetched on request, with a worker_addr label;
# /get_loads is their /v1/loads as the router's load monitor last polled them (every 10 s with
# smg 1.13.0: a sampled figure, not a live one). Either way the figures cover the whole pool.
_PATHS = {"server": ("/v1/loads", "/metrics"), "router": ("/get_loads", "/engine_metrics")}


class LoadReadError(Exception):
    """The server's load could not be read; the message says why in a few words.

    ``no_endpoint``: the server has no such endpoint (404/405, or a reply that is no loads
    document), as opposed to a failure of this one read."""

    def __init__(self, message: str, *, no_endpoint: bool = False) -> None:
        super().__init__(message)
        self.no_endpoint = no_endpoint


@dataclass(frozen=True)
class ServerLoad:
    running: float
    queued: float
    # KV-cache fill 0..1; None when the server does not report it.
    token_usage: float | None = None
    # True: computed on request (/v1/loads); False: sampled gauges of unknown age (/metrics).
    live: bool = False

    def foreign(self, own_in_flight: int) -> int:
        """Requests that are not ours (never negative: our just-sent ones may not be counted yet)."""
        return max(0, math.ceil(self.running + self.queued - own_in_flight))


def _one_spelling(colon: list[_Sample], underscore: list[_Sample]) -> list[_Sample]:
    """Per worker, SGLang's own ``sglang:x`` if present, else sglang-router 0.3.2's ``sglang_x``.

    Never both for one worker: a router that sent the two spellings would count its load twice.
    """
    have = {labels.get("worker_addr", "") for labels, _ in colon}
    return colon + [(labels, v) for labels, v in underscore if labels.get("worker_addr", "") not in have]


def parse_metrics_text(text: str) -> ServerLoad:
    """Parse SGLang's Prometheus exposition; raises :class:`LoadReadError` when gauges are missing.

    Also a router's ``/engine_metrics``: every worker's series with a ``worker_addr`` label (a
    replica of its own to :func:`server_total`, so the figures add up over the pool), spelled
    ``sglang:x`` (smg) or ``sglang_x`` (sglang-router 0.3.2 renames them).
    """
    names = (_RUNNING, _QUEUED, _USAGE)
    wanted: dict[str, list[_Sample]] = {n: [] for n in names}
    renamed: dict[str, list[_Sample]] = {n.replace(":", "_", 1): [] for n in names}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                bucket = wanted.get(sample.name)
                if bucket is None:
                    bucket = renamed.get(sample.name)
                if bucket is not None:
                    bucket.append((dict(sample.labels), float(sample.value)))
    except (ValueError, TypeError, IndexError) as exc:
        raise LoadReadError(f"malformed /metrics: {exc}") from None
    wanted = {n: _one_spelling(wanted[n], renamed[n.replace(":", "_", 1)]) for n in names}
    running = server_total(wanted[_RUNNING])
    queued = server_total(wanted[_QUEUED])
    if running is None or queued is None:
        raise LoadReadError("/metrics lacks sglang:num_running_reqs / sglang:num_queue_reqs")
    # KV usage: the fullest replica is the one that will start retracting first.
    usage = server_total(wanted[_USAGE], across_replicas="max")
    return ServerLoad(running=running, queued=queued, token_usage=usage)


def parse_loads_json(document: Any, *, live: bool = True) -> ServerLoad:
    """Parse ``/v1/loads``: prefers ``aggregate`` (≤ 0.5.9), else sums the per-DP-rank entries (0.5.23).

    A router's ``/get_loads`` has the same shape (one entry per worker and DP rank, an
    ``aggregate`` over the pool) but is the router's cached poll: ``live=False``.
    """
    try:
        totals = loads_totals(document)
    except ValueError as exc:
        raise LoadReadError(str(exc)) from None
    return ServerLoad(totals.running, totals.waiting, totals.token_usage, live=live)


class ServerLoadReader:
    """Reads the server's live load over HTTP with a short deadline."""

    def __init__(
        self,
        base_url: str,
        source: Literal["auto", "metrics", "loads"],
        timeout: float,
        api_key: str = "",
        transport: httpx.AsyncBaseTransport | None = None,
        max_bytes: int = 32 << 20,
        kind: Literal["server", "router"] = "server",
    ) -> None:
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self.source = source
        self._router = kind == "router"
        self._loads_path, self._metrics_path = _PATHS[kind]
        # auto, server: /v1/loads until the server shows it has none (404 or not a loads
        # document), then the /metrics gauges for the rest of this reader's life.
        # auto, router: /engine_metrics (fresher under load: the workers' gauges now, not the
        # router's poll of up to 10 s ago), else /get_loads for this read (workers without
        # --enable-metrics, or none in the pool right now).
        self._loads_missing = False
        self._timeout = timeout
        self.max_bytes = max_bytes
        self._client = httpx.AsyncClient(
            base_url=base_url.rstrip("/"),
            timeout=timeout,
            headers=headers,
            transport=transport,
            verify=tls_context(),
        )

    async def read(self) -> ServerLoad:
        if self._router and self.source == "auto":
            try:
                return await self._read(self._metrics_path)
            except LoadReadError as exc:
                if not exc.no_endpoint:
                    raise
                return await self._read(self._loads_path)
        if self.source == "auto" and not self._loads_missing:
            try:
                return await self._read(self._loads_path)
            except LoadReadError as exc:
                if not exc.no_endpoint:
                    raise  # a timeout, a refused port or a 503 says nothing about the endpoint
                self._loads_missing = True
        return await self._read(self._metrics_path if self.source != "loads" else self._loads_path)

    async def _read(self, path: str) -> ServerLoad:
        try:
            # One deadline over the whole reply and a byte cap (httpread): a trickling or endless
            # /metrics must not hold a scheduled run past its timeout, nor fill memory.
            response = await read(
                self._client, "GET", path, deadline_s=self._timeout, max_bytes=self.max_bytes, expect_ok=True
            )
        except HttpReadError as exc:
            raise LoadReadError(f"GET {path}: {exc}", no_endpoint=exc.status_code in (404, 405)) from None
        big = len(response.content) > _PARSE_INLINE
        if path == self._metrics_path:
            text = response.text
            try:
                return await asyncio.to_thread(parse_metrics_text, text) if big else parse_metrics_text(text)
            except LoadReadError as exc:
                # A router's pool without a metrics-enabled worker: /get_loads may still answer.
                raise LoadReadError(str(exc), no_endpoint=self._router) from None
        try:
            document = await asyncio.to_thread(response.json) if big else response.json()
        except ValueError:
            raise LoadReadError(f"{path}: not JSON", no_endpoint=True) from None
        try:
            return parse_loads_json(document, live=not self._router)
        except LoadReadError as exc:
            raise LoadReadError(str(exc), no_endpoint=True) from None

    async def aclose(self) -> None:
        await self._client.aclose()


@dataclass(frozen=True)
class Decision:
    action: Literal["run", "shrink", "skip"]
    # Share of the profile's prompts, rate and concurrency to keep (1.0 for run, 0 for skip).
    scale: float
    foreign: int | None
    reason: str = ""


class OwnTraffic:
    """sentinel's own requests in flight over the last minutes, to match a sampled gauge.

    The scheduler notes the own count as it changes (several times a second during a run, 0 at
    its end); :meth:`for_load` answers the count a server figure is to be compared with.
    """

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._samples: deque[tuple[float, int]] = deque()
        self._now = 0

    def note(self, in_flight: int) -> None:
        now = self._clock()
        self._now = in_flight
        self._samples.append((now, in_flight))
        while len(self._samples) > 1 and now - self._samples[1][0] > 600:
            self._samples.popleft()

    def peak(self, window_seconds: float) -> int:
        """The highest own count of the last ``window_seconds`` (and now)."""
        since = self._clock() - window_seconds
        # The sample just before the window still held at its start.
        peak = self._now
        before: int | None = None
        for t, n in self._samples:
            if t < since:
                before = n
            else:
                peak = max(peak, n)
        return max(peak, before or 0)

    def for_load(self, load: ServerLoad, window_seconds: float) -> tuple[int, float]:
        """(own count, the window it covers): now for a live figure, the window's peak for a gauge."""
        if load.live:
            return self._now, 0.0
        return self.peak(window_seconds), window_seconds


@dataclass(frozen=True)
class Assessment:
    """The numbers a polite decision rests on (logged with every skip, shrink and abort)."""

    foreign: int  # after the tolerance
    running: float
    queued: float
    own: int
    source: str  # "loads" (live) or "metrics" (sampled)
    own_window_seconds: float  # 0 for a live figure: the own count now

    def fields(self) -> dict[str, float | int | str]:
        return {
            "foreign": self.foreign,
            "server_running": self.running,
            "server_queued": self.queued,
            "own_in_flight": self.own,
            "source": self.source,
            "own_window_seconds": self.own_window_seconds,
        }


def assess(load: ServerLoad, own: OwnTraffic, settings: PoliteSettings) -> Assessment:
    own_count, window = own.for_load(load, settings.gauge_max_age_seconds)
    foreign = max(0, load.foreign(own_count) - settings.tolerance)
    return Assessment(
        foreign, load.running, load.queued, own_count, "loads" if load.live else "metrics", window
    )


def decide(load: ServerLoad | None, own_in_flight: int, settings: PoliteSettings) -> Decision:
    """Before a run: run it whole, scale it down, or skip it, given the foreign traffic."""
    if not settings.enabled:
        return Decision("run", 1.0, None)
    if load is None:
        if settings.on_unknown == "skip":
            return Decision("skip", 0.0, None, "load_unknown")
        return Decision("run", 1.0, None)
    foreign = max(0, load.foreign(own_in_flight) - settings.tolerance)
    if foreign >= settings.skip_above:
        return Decision("skip", 0.0, foreign, "foreign_traffic")
    if foreign >= settings.shrink_above:
        if settings.action == "skip":
            return Decision("skip", 0.0, foreign, "foreign_traffic")
        scale = max(0.0, 1.0 - foreign / settings.shrink_capacity_requests)
        if scale <= 0.0:
            return Decision("skip", 0.0, foreign, "foreign_traffic")
        return Decision("shrink", scale, foreign, "foreign_traffic")
    return Decision("run", 1.0, foreign)


def too_busy_now(load: ServerLoad, own_in_flight: int, settings: PoliteSettings) -> int | None:
    """During a run: the foreign request count when it reached ``skip_above`` (abort), else None."""
    if not settings.enabled:
        return None
    foreign = max(0, load.foreign(own_in_flight) - settings.tolerance)
    return foreign if foreign >= settings.skip_above else None
