"""Every reader of the server is bounded in total time and bytes, against a hostile server on loopback.

Modes: headers that never end, a body that never ends, a 50 MB body, a server that trickles a byte
at a time (per-read timeouts never trip), and a reply too large by its Content-Length. Each reader
(sglang_sentinel.httpread itself, the /health probe, the stall check's /metrics read, polite injection's
load reader, the canary) must come back within its deadline plus scheduling slack, with a typed
reason, and without buffering the whole reply.
"""

from __future__ import annotations

import asyncio
import time
import tracemalloc
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import httpx
import pytest

from sglang_sentinel.collect.sglang_metrics import SGLangMetricsCollector
from sglang_sentinel.collect.source import CollectionFailed
from sglang_sentinel.httpread import HttpReadError, read
from sglang_sentinel.schedule.polite import LoadReadError, ServerLoadReader
from sglang_sentinel.supervise.probes import probe_canary, probe_health, read_progress
from sglang_sentinel.supervise.settings import CanaryCheckSettings, CanarySettings
from support.hostile_http import MODES

DEADLINE = 1.0
# A busy 2-core box may start the reader late; the bound being checked is "finite and near the
# deadline", not a speed.
SLACK = 3.0


@pytest.fixture
async def hostile() -> AsyncIterator[Callable[[str], Awaitable[str]]]:
    servers: list[asyncio.Server] = []

    async def start(mode: str) -> str:
        writer_fn = MODES[mode]

        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                await reader.readuntil(b"\r\n\r\n")
                await writer_fn(writer)
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    yield start
    for server in servers:
        server.close()
        await server.wait_closed()


async def _timed(coro: Awaitable[Any]) -> tuple[Any, float, int]:
    tracemalloc.start()
    t0 = time.monotonic()
    try:
        try:
            result: Any = await coro
        except Exception as exc:
            result = exc
        return result, time.monotonic() - t0, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


EXPECTED = {
    "endless_headers": {"timeout", "disconnected"},  # h11 may give up on the header block first
    "endless_body": {"timeout", "too_large"},
    "huge_body": {"too_large", "timeout"},  # a busy box may reach the deadline before the 32 MiB cap
    "declared_huge": {"too_large"},
    "trickle": {"timeout"},
}


@pytest.mark.parametrize("mode", list(MODES))
async def test_read_is_bounded_in_time_and_bytes(hostile: Any, mode: str) -> None:
    base = await hostile(mode)
    async with httpx.AsyncClient(base_url=base) as client:
        result, elapsed, peak = await _timed(
            read(client, "GET", "/metrics", deadline_s=DEADLINE, max_bytes=4 << 20)
        )
    assert isinstance(result, HttpReadError), result
    assert result.reason in EXPECTED[mode]
    assert elapsed < DEADLINE + SLACK
    assert peak < 16 << 20  # the 4 MiB cap, plus httpx's buffers; never the 50 MB


@pytest.mark.parametrize("mode", list(MODES))
async def test_health_probe_and_canary_come_back_with_a_reason(hostile: Any, mode: str) -> None:
    base = await hostile(mode)
    async with httpx.AsyncClient(base_url=base) as client:
        result, elapsed, peak = await _timed(probe_health(client, "/health", "health", DEADLINE))
        assert not result.ok
        assert result.reason in EXPECTED[mode] | {"refused"}
        assert elapsed < DEADLINE + SLACK
        assert peak < 8 << 20
        settings = CanaryCheckSettings(timeout=DEADLINE)
        canary = CanarySettings(name="c", prompt="1+1=", expect="2")
        result, elapsed, _ = await _timed(probe_canary(client, canary, settings))
        assert not result.ok
        assert result.reason in EXPECTED[mode]
        assert elapsed < DEADLINE + SLACK


@pytest.mark.parametrize("mode", list(MODES))
async def test_stall_check_and_polite_reader_are_bounded(hostile: Any, mode: str) -> None:
    base = await hostile(mode)
    async with httpx.AsyncClient(base_url=base) as client:
        result, elapsed, peak = await _timed(read_progress(client, DEADLINE))
    assert isinstance(result, ValueError), result
    assert any(reason in str(result) for reason in EXPECTED[mode])
    assert elapsed < DEADLINE + SLACK
    assert peak < 48 << 20  # the /metrics cap is 32 MiB (the collector's); the body is 50 MB
    reader = ServerLoadReader(base, "metrics", DEADLINE)
    try:
        result, elapsed, _ = await _timed(reader.read())
    finally:
        await reader.aclose()
    assert isinstance(result, LoadReadError), result
    assert elapsed < DEADLINE + SLACK


@pytest.mark.parametrize("mode", list(MODES))
async def test_sglang_metrics_collector_is_bounded(hostile: Any, mode: str) -> None:
    """The scrape-time collector (a blocking caller in the exporter's worker threads)."""
    base = await hostile(mode)
    collector = SGLangMetricsCollector(base + "/metrics", timeout=DEADLINE, max_bytes=4 << 20)

    def scrape() -> None:
        list(collector.collect())

    try:
        result, elapsed, _ = await _timed(asyncio.to_thread(scrape))
    finally:
        collector.close()
    assert isinstance(result, CollectionFailed), result
    assert any(reason in str(result) for reason in EXPECTED[mode] | {"over"}), result
    assert elapsed < DEADLINE + SLACK
