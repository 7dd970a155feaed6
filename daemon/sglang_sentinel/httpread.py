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

Threads without an event loop (the exporter's scrape workers, where the SGLang ``/metrics``
collector runs) read through :class:`BlockingReader`: the same :func:`read` on one private loop
thread with one pooled client. httpx's blocking client cannot bound a whole response: its
timeouts are per socket operation, so headers that drip a byte a second never trip them and a
scrape worker would wait forever.

Every httpx client sentinel makes verifies TLS with :func:`tls_context`: one context per process.
httpx builds a context per client by default, loading the whole CA bundle each time (~25 ms of
CPU, measured), and sentinel makes clients per probe round, per router scrape, per calibration
and per supervised server.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import json
import ssl
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

import httpx

__all__ = ["BlockingReader", "HttpReadError", "ReadReason", "Reply", "read", "read_json", "tls_context"]

ReadReason = Literal["timeout", "too_large", "http_status", "connect", "disconnected", "error"]


@functools.cache
def tls_context(trust_env: bool = True) -> ssl.SSLContext:
    """The verifying TLS context of every httpx client in this process: ``verify=tls_context()``,
    or ``tls_context(False)`` for a client made with ``trust_env=False``; the same context httpx
    would build for that client (its CA bundle; with ``trust_env``, SSL_CERT_FILE / SSL_CERT_DIR).
    Sharing one across clients and threads is safe (OpenSSL's SSL_CTX is)."""
    return httpx.create_ssl_context(trust_env=trust_env)


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


# How long past its own deadline a blocking caller waits for the loop thread's answer before it
# gives up on its own: only a wedged loop thread (a bug) ever uses this margin.
_BLOCKING_GRACE_S = 0.5


class BlockingReader:
    """:func:`read` for threads that have no event loop, bounded the same way.

    One daemon thread runs a private event loop and one pooled ``httpx.AsyncClient`` (a scrape
    every few seconds must not pay a TCP connect and a client's set-up each time); callers in
    any thread submit reads to it and wait at most ``deadline_s`` (plus a short grace). Started
    on first use; :meth:`close` stops it.
    """

    def __init__(self, *, transport: httpx.AsyncBaseTransport | None = None, name: str = "httpread") -> None:
        self._transport = transport
        self._name = name
        self._lock = threading.Lock()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._client: httpx.AsyncClient | None = None
        self._thread: threading.Thread | None = None

    def _started(self) -> tuple[asyncio.AbstractEventLoop, httpx.AsyncClient]:
        with self._lock:
            if self._loop is None or self._client is None:
                loop = asyncio.new_event_loop()
                ready = threading.Event()

                def run() -> None:
                    asyncio.set_event_loop(loop)
                    loop.call_soon(ready.set)
                    loop.run_forever()

                thread = threading.Thread(target=run, name=self._name, daemon=True)
                thread.start()
                ready.wait()

                async def make() -> httpx.AsyncClient:
                    return httpx.AsyncClient(
                        transport=self._transport,
                        follow_redirects=False,
                        trust_env=False,
                        verify=tls_context(trust_env=False),
                    )

                self._client = asyncio.run_coroutine_threadsafe(make(), loop).result()
                self._loop, self._thread = loop, thread
            return self._loop, self._client

    def read(
        self,
        method: str,
        url: str,
        *,
        deadline_s: float,
        max_bytes: int,
        headers: Mapping[str, str] | None = None,
        expect_ok: bool = False,
    ) -> Reply:
        """As :func:`read`, from any thread; returns within about ``deadline_s``."""
        loop, client = self._started()
        future = asyncio.run_coroutine_threadsafe(
            read(
                client,
                method,
                url,
                deadline_s=deadline_s,
                max_bytes=max_bytes,
                headers=headers,
                expect_ok=expect_ok,
            ),
            loop,
        )
        try:
            return future.result(timeout=deadline_s + _BLOCKING_GRACE_S)
        except concurrent.futures.TimeoutError:
            future.cancel()
            raise HttpReadError("timeout", f"no complete reply within {deadline_s:g} s") from None

    def close(self) -> None:
        with self._lock:
            loop, client, thread = self._loop, self._client, self._thread
            self._loop = self._client = self._thread = None
        if loop is None or client is None or thread is None:
            return
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(client.aclose(), loop).result(timeout=2.0)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=2.0)
        if not thread.is_alive():
            loop.close()
