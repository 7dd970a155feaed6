"""SSE helpers for the sim tests (imported by name: tests/ has no packages)."""

from __future__ import annotations

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
