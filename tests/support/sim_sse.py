"""SSE helpers for the sim tests (imported by name: tests/ has no packages)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import httpx


async def sse(client: httpx.AsyncClient, path: str, body: dict[str, Any], **kw: Any) -> tuple[int, list[str]]:
    """POST and return (status, raw SSE payloads after 'data: ')."""
    events: list[str] = []
    async with client.stream("POST", path, json=body, **kw) as resp:
        if resp.status_code == 200:
            assert resp.headers["content-type"] == "text/event-stream; charset=utf-8"
        buf = ""
        async for text in resp.aiter_text():
            buf += text
            while "\n\n" in buf:
                event, buf = buf.split("\n\n", 1)
                assert event.startswith("data: "), f"not an SSE data event: {event!r}"
                events.append(event[len("data: ") :])
        assert buf == ""
        return resp.status_code, events


def decode(events: list[str]) -> list[dict[str, Any]]:
    assert events[-1] == "[DONE]"
    return [json.loads(e) for e in events[:-1]]


async def raw_post(
    port: int, path: str, body: dict[str, Any], *, version: str = "1.1", read_s: float
) -> bytes:
    """One POST on a fresh loopback connection (``Connection: close``): the whole reply, headers
    included, exactly as the server wrote it."""
    data = json.dumps(body).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            f"POST {path} HTTP/{version}\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n".encode()
            + data
        )
        await writer.drain()
        return await asyncio.wait_for(reader.read(), read_s)
    finally:
        writer.close()


def dechunk(body: bytes) -> list[bytes]:
    """Decode chunked transfer encoding strictly; the list of chunks, the last one empty."""
    out = []
    while True:
        size_line, sep, body = body.partition(b"\r\n")
        assert sep, "truncated chunk size line"
        size = int(size_line, 16)
        out.append(body[:size])
        assert body[size : size + 2] == b"\r\n"
        body = body[size + 2 :]
        if size == 0:
            assert body == b""
            return out
