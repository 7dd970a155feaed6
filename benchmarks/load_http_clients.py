"""Which HTTP client should the engine stream with? httpx, aiohttp, our httptools transport: CPU per event.

A local server (separate process, so its CPU is not counted) streams SGLang-native SSE events
(cumulative text + meta_info, as v0.5.9 does) to C concurrent requests, either paced
(`--pace-ms`: one event per stream every P ms, as a real server's forward steps: the client
keeps up, so nearly every socket read holds ONE event and per-read costs show) or, with
`--pace-ms 0`, as fast as it can (the client falls behind and reads hold many events: this hides
per-read costs, and overstates how close the clients are). Each
client variant consumes the same total number of events with the same event handling (split
events, json.loads, read completion_tokens), and we report the client process's CPU seconds
per 1,000 events and events per CPU-second. The event handling is identical, so differences
are the HTTP stack's.

Variants:
- httpx  aiter_raw: httpx.AsyncClient (pooled), raw byte chunks, our event splitter.
- httpx  aiter_lines: httpx's own line iterator (the common way to read SSE with httpx).
- aiohttp readany: aiohttp ClientSession (pooled), whole reads, our splitter.
- sglang_sentinel.load.transport: the engine's client (asyncio protocol + httptools), our splitter.
- aiohttp readuntil: aiohttp ClientSession (pooled), one `readuntil(b"\\n\\n")` per event.
- aiohttp lines, session per request: bench_serving v0.5.9's way (`async for line in content`,
  a new ClientSession per request).

Usage: .venv/bin/python benchmarks/load_http_clients.py [--concurrency 64] [--requests 256]
       [--tokens 256] [--pace-ms 5] [--repeat 2]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import resource
import time
from collections.abc import Callable, Coroutine
from typing import Any

import aiohttp
import httpx

from sglang_sentinel.load.sink import split_events
from sglang_sentinel.load.transport import HttpClient


def _serve(port_q: Any, tokens: int, pace_s: float) -> None:
    from aiohttp import web

    async def generate(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        text = ""
        for i in range(1, tokens + 1):
            text += " tok"
            meta = {
                "id": "x",
                "finish_reason": None,
                "prompt_tokens": 16,
                "completion_tokens": i,
                "cached_tokens": 0,
            }
            ev = {"text": text, "output_ids": [], "meta_info": meta}
            await resp.write(b"data: " + json.dumps(ev).encode() + b"\n\n")
            if pace_s > 0:
                await asyncio.sleep(pace_s)
            elif i % 8 == 0:
                await asyncio.sleep(0)  # interleave streams like a batching server
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def main() -> None:
        app = web.Application()
        app.router.add_post("/generate", generate)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port_q.put(site._server.sockets[0].getsockname()[1])  # type: ignore[union-attr]
        await asyncio.Event().wait()

    asyncio.run(main())


BODY = json.dumps({"input_ids": [1] * 16, "sampling_params": {"max_new_tokens": 1}, "stream": True}).encode()


def _consume(events: list[bytes], counter: list[int]) -> None:
    for payload in events:
        if payload == b"[DONE]":
            continue
        obj = json.loads(payload)
        counter[0] += obj["meta_info"]["completion_tokens"] > 0


async def httpx_raw(url: str, n: int, conc: int, counter: list[int]) -> None:
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(limits=limits, timeout=None) as client:
        sem = asyncio.Semaphore(conc)

        async def one() -> None:
            async with sem, client.stream("POST", url, content=BODY) as resp:
                buf = b""
                async for data in resp.aiter_raw():
                    events, buf = split_events(buf + data if buf else data)
                    _consume(events, counter)

        await asyncio.gather(*(one() for _ in range(n)))


async def httpx_lines(url: str, n: int, conc: int, counter: list[int]) -> None:
    limits = httpx.Limits(max_connections=conc, max_keepalive_connections=conc)
    async with httpx.AsyncClient(limits=limits, timeout=None) as client:
        sem = asyncio.Semaphore(conc)

        async def one() -> None:
            async with sem, client.stream("POST", url, content=BODY) as resp:
                async for line in resp.aiter_lines():
                    if line.startswith("data: "):
                        _consume([line[6:].encode()], counter)

        await asyncio.gather(*(one() for _ in range(n)))


async def aiohttp_readany(url: str, n: int, conc: int, counter: list[int]) -> None:
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), read_bufsize=1 << 20, auto_decompress=False
    ) as session:
        sem = asyncio.Semaphore(conc)

        async def one() -> None:
            async with sem, session.post(url, data=BODY) as resp:
                buf = b""
                while data := await resp.content.readany():
                    events, buf = split_events(buf + data if buf else data)
                    _consume(events, counter)

        await asyncio.gather(*(one() for _ in range(n)))


async def aiohttp_readuntil(url: str, n: int, conc: int, counter: list[int]) -> None:
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0), read_bufsize=1 << 20, auto_decompress=False
    ) as session:
        sem = asyncio.Semaphore(conc)

        async def one() -> None:
            async with sem, session.post(url, data=BODY) as resp:
                readuntil = resp.content.readuntil
                while ev := await readuntil(b"\n\n", max_size=1 << 26):
                    if ev.startswith(b"data: "):
                        _consume([ev[6:].rstrip(b"\n")], counter)

        await asyncio.gather(*(one() for _ in range(n)))


async def aiohttp_bench_serving(url: str, n: int, conc: int, counter: list[int]) -> None:
    sem = asyncio.Semaphore(conc)

    async def one() -> None:
        timeout = aiohttp.ClientTimeout(total=6 * 60 * 60)
        async with (
            sem,
            aiohttp.ClientSession(timeout=timeout, read_bufsize=10 * 1024**2) as session,
            session.post(url, json=json.loads(BODY)) as resp,
        ):
            async for chunk in resp.content:
                chunk = chunk.strip()
                if chunk:
                    _consume([chunk.removeprefix(b"data: ")], counter)

    await asyncio.gather(*(one() for _ in range(n)))


class _Sink:
    def __init__(self, counter: list[int]) -> None:
        self.counter = counter
        self.buf = b""

    def on_sent(self, now: float) -> None:
        pass

    def on_status(self, status: int) -> None:
        pass

    def on_data(self, data: bytes, now: float) -> None:
        events, self.buf = split_events(self.buf + data if self.buf else data)
        _consume(events, self.counter)


async def sentinel_transport(url: str, n: int, conc: int, counter: list[int]) -> None:
    base, _, path = url.rpartition("/")
    client = HttpClient(base, {"Content-Type": "application/json"})
    sem = asyncio.Semaphore(conc)

    async def one() -> None:
        async with sem:
            await client.post("/" + path, BODY, _Sink(counter))

    try:
        await asyncio.gather(*(one() for _ in range(n)))
    finally:
        await client.close()


Variant = Callable[[str, int, int, list[int]], Coroutine[Any, Any, None]]
VARIANTS: dict[str, Variant] = {
    "httpx aiter_raw": httpx_raw,
    "httpx aiter_lines": httpx_lines,
    "aiohttp readany": aiohttp_readany,
    "aiohttp readuntil": aiohttp_readuntil,
    "sglang_sentinel.load.transport (httptools)": sentinel_transport,
    "aiohttp lines, session/req (bench_serving)": aiohttp_bench_serving,
}


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--concurrency", type=int, default=64)
    ap.add_argument("--requests", type=int, default=256)
    ap.add_argument("--tokens", type=int, default=256)
    ap.add_argument("--pace-ms", type=float, default=5.0, help="per-stream event interval; 0 = flat out")
    ap.add_argument("--repeat", type=int, default=2, help="runs per variant; the best is kept")
    args = ap.parse_args()
    q: Any = mp.get_context("spawn").Queue()
    serve_args = (q, args.tokens, args.pace_ms / 1e3)
    server = mp.get_context("spawn").Process(target=_serve, args=serve_args, daemon=True)
    server.start()
    try:
        url = f"http://127.0.0.1:{q.get(timeout=30)}/generate"
        rows = []
        for name, fn in VARIANTS.items():
            best: tuple[float, float, int] | None = None
            for _ in range(args.repeat):
                counter = [0]
                c0, w0 = _cpu(), time.perf_counter()
                asyncio.run(fn(url, args.requests, args.concurrency, counter))
                cpu, wall = _cpu() - c0, time.perf_counter() - w0
                if best is None or cpu < best[0]:
                    best = (cpu, wall, counter[0])
            assert best is not None
            rows.append((name, *best))
        print(
            f"\n{args.requests} requests x {args.tokens} events, concurrency {args.concurrency}, "
            f"pace {args.pace_ms:g} ms/event/stream "
            f"(best of {args.repeat}; same event handling in every variant)"
        )
        cols = f"{'events':>8} {'CPU s':>7} {'wall s':>7} {'CPU us/event':>13} {'events/CPU-s':>13}"
        print(f"{'client':<44} {cols}")
        base = rows[-1][1] / max(rows[-1][3], 1)
        for name, cpu, wall, events in rows:
            per = cpu / max(events, 1)
            print(
                f"{name:<44} {events:>8} {cpu:>7.2f} {wall:>7.2f} {per * 1e6:>13.1f} {1 / per:>13,.0f}"
                f"  ({base / per:.2f}x bench_serving)"
            )
    finally:
        server.terminate()
        server.join(5)


if __name__ == "__main__":
    main()
