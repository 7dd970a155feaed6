"""Worst memory and time of each server reader against each hostile reply (the test's servers).

    .venv/bin/python benchmarks/hostile_memory.py

Runs the hostile loopback servers of tests/supervise/test_hostile_readers.py (endless headers,
endless body, a 50 MB body, a 50 MB Content-Length, a byte-at-a-time trickle) against every reader
with a 1 s deadline and prints the reason, the elapsed time and the peak Python allocation
(tracemalloc) of each. The test asserts the bounds; this prints the figures.
"""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from sglang_sentinel.httpread import HttpReadError, read
from sglang_sentinel.schedule.polite import ServerLoadReader
from sglang_sentinel.supervise.probes import probe_canary, probe_health, read_progress
from sglang_sentinel.supervise.settings import CanaryCheckSettings, CanarySettings
from supervise.test_hostile_readers import DEADLINE, _timed
from support.hostile_http import MODES


def _reason(result: Any) -> str:
    if isinstance(result, HttpReadError):
        return result.reason
    if isinstance(result, Exception):
        # "/metrics too_large: body over ..." -> the typed reason the reader gave
        words = [w.rstrip(":") for w in str(result).split()]
        return next((w for w in words if w in ("timeout", "too_large", "disconnected")), str(result)[:27])
    return str(getattr(result, "reason", result))[:27]


async def main() -> None:
    canary = CanaryCheckSettings(
        timeout=DEADLINE, canaries=(CanarySettings(name="a", prompt="p", expect="4"),)
    )
    readers: dict[str, Callable[[str], Awaitable[Any]]] = {}

    async def httpread(url: str) -> Any:
        async with httpx.AsyncClient(base_url=url) as c:
            return await read(c, "GET", "/metrics", deadline_s=DEADLINE, max_bytes=4 << 20)

    async def health(url: str) -> Any:
        async with httpx.AsyncClient(base_url=url) as c:
            return await probe_health(c, "/health", "health", DEADLINE)

    async def stall(url: str) -> Any:
        async with httpx.AsyncClient(base_url=url) as c:
            return await read_progress(c, DEADLINE)

    async def can(url: str) -> Any:
        async with httpx.AsyncClient(base_url=url) as c:
            return await probe_canary(c, canary.canaries[0], canary)

    async def polite(url: str) -> Any:
        return await ServerLoadReader(url, "metrics", DEADLINE).read()

    readers = {
        "httpread": httpread,
        "health": health,
        "stall /metrics": stall,
        "canary": can,
        "polite": polite,
    }
    print(f"{'reader':<16} {'mode':<16} {'outcome':<28} {'seconds':>7} {'peak MiB':>9}")
    worst = 0
    for mode, writer_fn in MODES.items():

        async def handle(r: asyncio.StreamReader, w: asyncio.StreamWriter, fn: Any = writer_fn) -> None:
            try:
                await r.readuntil(b"\r\n\r\n")
                await fn(w)
            except (ConnectionError, asyncio.IncompleteReadError, asyncio.CancelledError):
                pass
            finally:
                w.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        url = f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
        for name, fn in readers.items():
            result, elapsed, peak = await _timed(fn(url))
            worst = max(worst, peak)
            print(f"{name:<16} {mode:<16} {_reason(result):<28} {elapsed:7.2f} {peak / 2**20:9.1f}")
        server.close()
    print(f"worst peak: {worst / 2**20:.1f} MiB")


if __name__ == "__main__":
    asyncio.run(main())
