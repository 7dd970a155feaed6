"""One bounded HTTP read: a deadline over the *whole* response and a cap on its bytes.

httpx's timeouts apply per operation (connect, each read): a server that trickles one byte a
second, or sends headers or a body that never end, never trips them, and ``response.text``
buffers whatever arrives. Every reader of the server's endpoints (probes, the stall check, polite
injection, server_info) goes through :func:`read`, which

- puts one deadline over connecting, sending, the headers and the body together;
- counts the body as it streams (decoded, so a gzip bomb counts at its real size) and stops at
  ``max_bytes``; a Content-Length over the cap is refused before reading;
- returns a :class:`Reply` or raises :class:`HttpReadError` with a stable ``reason``.

Parsing a big body is the caller's business: do it with ``asyncio.to_thread`` (see
:func:`read_json`) so that it does not stall the event loop.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx

__all__ = ["HttpReadError", "ReadReason", "Reply", "read", "read_json"]

ReadReason = Literal["timeout", "too_large", "http_status", "connect", "disconnected", "error"]


class HttpReadError(Exception):
    """A read that did not produce a usable reply; ``reason`` is a stable label for metrics."""

    def __init__(self, reason: ReadReason, detail: str, status_code: int | None = None) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: ReadReason = reason
        self.detail = detail
        self.status_code = status_code


@dataclass(frozen=True, slots=True)
class Reply:
    status_code: int
    headers: httpx.Headers
    content: bytes
    elapsed: float  # seconds, the whole exchange

    @property
    def text(self) -> str:
        return self.content.decode(_charset(self.headers), "replace")

    def json(self) -> Any:
        return json.loads(self.content)


def _charset(headers: httpx.Headers) -> str:
    content_type: str = headers.get("content-type", "")
    for part in content_type.split(";")[1:]:
        key, _, value = part.strip().partition("=")
        name = value.strip('"')
        if key.lower() == "charset" and name:
            try:
                "".encode(name)
            except LookupError:
                break  # an unknown charset from a hostile server: not our crash
            return name
    return "utf-8"


async def read(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    deadline_s: float,
    max_bytes: int,
    params: Mapping[str, str] | None = None,
    json_body: Any = None,
    headers: Mapping[str, str] | None = None,
    expect_ok: bool = False,
) -> Reply:
    """One request, bounded in total time and body size. ``expect_ok``: non-2xx raises http_status."""
    t0 = time.monotonic()
    try:
        async with asyncio.timeout(deadline_s):
            async with client.stream(
                method, url, params=params, json=json_body, headers=headers, timeout=deadline_s
            ) as resp:
                length = resp.headers.get("content-length", "")
                if length.isdigit() and int(length) > max_bytes:
                    raise HttpReadError(
                        "too_large", f"Content-Length {length} over {max_bytes} bytes", resp.status_code
                    )
                chunks: list[bytes] = []
                size = 0
                async for chunk in resp.aiter_bytes():
                    size += len(chunk)
                    if size > max_bytes:
                        raise HttpReadError("too_large", f"body over {max_bytes} bytes", resp.status_code)
                    chunks.append(chunk)
                status, got_headers = resp.status_code, resp.headers
    except TimeoutError:
        raise HttpReadError("timeout", f"no complete reply within {deadline_s:g} s") from None
    except httpx.TimeoutException:
        raise HttpReadError("timeout", f"no complete reply within {deadline_s:g} s") from None
    except httpx.ConnectError as exc:
        raise HttpReadError("connect", str(exc)[:200] or "connection refused") from None
    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError) as exc:
        raise HttpReadError("disconnected", str(exc)[:200] or type(exc).__name__) from None
    except httpx.HTTPError as exc:
        raise HttpReadError("error", f"{type(exc).__name__}: {str(exc)[:200]}") from None
    reply = Reply(status, got_headers, b"".join(chunks), time.monotonic() - t0)
    if expect_ok and not 200 <= status < 300:
        raise HttpReadError("http_status", f"HTTP {status}", status)
    return reply


# Bodies larger than this are parsed in a worker thread; smaller ones cost less than the hop.
_PARSE_INLINE = 64 * 1024


async def read_json(
    client: httpx.AsyncClient, url: str, *, deadline_s: float, max_bytes: int, **kw: Any
) -> Any:
    """GET ``url`` (2xx expected) and parse JSON, off the event loop when the body is big.

    A body that is not JSON raises ValueError.
    """
    reply = await read(client, "GET", url, deadline_s=deadline_s, max_bytes=max_bytes, expect_ok=True, **kw)
    if len(reply.content) > _PARSE_INLINE:
        return await asyncio.to_thread(json.loads, reply.content)
    return json.loads(reply.content)
