"""The aiohttp session for the load engine's auxiliary calls to the server (``/v1/models``, ...).

Streams do not go through it (they use `sglang_sentinel.load.transport`, see `sglang_sentinel.load.engine`):
aiohttp is fine for a handful of calls per run, and ``sentinel bench`` reuses the session for
its own (``/flush_cache``, ``/server_info``).
"""

from __future__ import annotations

import asyncio
import json

import aiohttp

from sglang_sentinel.load.spec import LoadSpec
from sglang_sentinel.load.transport import KEEPALIVE_S

__all__ = [
    "auth_headers",
    "make_session",
    "read_capped",
    "request_headers",
    "resolve_model",
    "wait_ready",
]

# aiohttp's per-response buffer for the auxiliary calls.
_READ_BUFSIZE = 1 << 20
# /v1/models lists a handful of models: far more is a broken or hostile server, not a model list.
MODELS_MAX_BYTES = 1 << 20


async def read_capped(resp: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body of an auxiliary call, or ValueError once it passes ``limit`` bytes (never
    buffered past it): a hostile or broken server's endless body must not fill memory. The
    caller's timeout bounds the time."""
    if resp.content_length is not None and resp.content_length > limit:
        raise ValueError(f"body of {resp.content_length} bytes over {limit}")
    parts: list[bytes] = []
    size = 0
    async for chunk in resp.content.iter_chunked(64 * 1024):
        size += len(chunk)
        if size > limit:
            raise ValueError(f"body over {limit} bytes")
        parts.append(chunk)
    return b"".join(parts)


def auth_headers(spec: LoadSpec) -> dict[str, str]:
    """The spec's own headers (--header) and its API key: what every call to the target carries."""
    headers = dict(spec.headers)
    if spec.api_key:
        headers["Authorization"] = f"Bearer {spec.api_key}"
    return headers


def request_headers(spec: LoadSpec) -> dict[str, str]:
    """The headers of every load request: JSON in, SSE or JSON out, the spec's own, the API key."""
    headers = {"Content-Type": "application/json", "Accept": "text/event-stream, application/json"}
    headers.update(auth_headers(spec))
    return headers


def make_session(
    spec: LoadSpec,
    *,
    limit: int = 0,
    headers: dict[str, str] | None = None,
) -> aiohttp.ClientSession:
    """An aiohttp session for auxiliary calls to the server (must be made inside a loop).

    `limit` caps its connections (0: no cap, for callers that bound their own concurrency);
    `headers` are sent with every request."""
    connector = aiohttp.TCPConnector(
        limit=limit,
        limit_per_host=0,
        keepalive_timeout=KEEPALIVE_S,
        ttl_dns_cache=300,
    )
    return aiohttp.ClientSession(
        connector=connector,
        headers=headers,
        # Per-request deadlines are the engine's own (asyncio.timeout around each request).
        timeout=aiohttp.ClientTimeout(total=None, connect=min(30.0, spec.request_timeout_s)),
        cookie_jar=aiohttp.DummyCookieJar(),
        # We ask for no compression: a compressed stream would delay tokens and cost CPU.
        skip_auto_headers=("Accept-Encoding", "User-Agent"),
        auto_decompress=False,
        read_bufsize=_READ_BUFSIZE,
        trust_env=False,
    )


async def resolve_model(session: aiohttp.ClientSession, spec: LoadSpec) -> tuple[str, str | None]:
    """The model name for OpenAI routes: the spec's, else the server's first, else "default".

    Returns (model, note) where note explains a fallback."""
    if spec.model:
        return spec.model, None
    headers = {k: v for k, v in request_headers(spec).items() if k != "Content-Type"}
    try:
        async with asyncio.timeout(10.0):
            async with session.get(spec.base_url + "/v1/models", headers=headers) as resp:
                if resp.status == 200:
                    data = json.loads(await read_capped(resp, MODELS_MAX_BYTES))
                    models = data.get("data") if isinstance(data, dict) else None
                    if isinstance(models, list) and models and isinstance(models[0], dict):
                        mid = models[0].get("id")
                        if isinstance(mid, str) and mid:
                            return mid, None
                note = f"GET /v1/models answered {resp.status}; using model 'default'"
    except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
        note = f"GET /v1/models failed ({type(exc).__name__}); using model 'default'"
    return "default", note


async def wait_ready(session: aiohttp.ClientSession, spec: LoadSpec) -> str | None:
    """bench_serving's --ready-check-timeout-sec: poll GET /v1/models once a second until the
    server answers, for up to `spec.ready_timeout_s`. Returns a note when it never did.

    Ready is a 200, as in bench_serving, or any other 4xx answer: the server is up and refused
    us (a key, a route), which the run then reports in its own words instead of waiting out
    the timeout. Connection errors and 5xx (SGLang answers 503 while it loads) are waited on."""
    headers = {k: v for k, v in request_headers(spec).items() if k != "Content-Type"}
    loop = asyncio.get_running_loop()
    deadline = loop.time() + spec.ready_timeout_s
    last = "no answer"
    while True:
        try:
            async with asyncio.timeout(5.0):
                async with session.get(spec.base_url + "/v1/models", headers=headers) as resp:
                    if resp.status < 500:
                        return None
                    last = f"HTTP {resp.status}"
        except (aiohttp.ClientError, TimeoutError, OSError) as exc:
            last = type(exc).__name__
        if loop.time() >= deadline:
            return f"the server was not ready within {spec.ready_timeout_s:g} s (GET /v1/models: {last})"
        await asyncio.sleep(min(1.0, max(deadline - loop.time(), 0.0)))
