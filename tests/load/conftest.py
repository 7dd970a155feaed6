"""A fake SGLang HTTP server speaking the exact v0.5.9 wire formats, for the load engine's unit tests.

It streams what SGLang streams (its routes: sglang/srt/entrypoints/http_server.py in the wheel):
native events with cumulative `text` and running `meta_info.completion_tokens`, chat chunks
with a role chunk, reasoning chunks with `content: null`, content chunks, a finish chunk, a
usage chunk, `[DONE]`; and it can misbehave on demand (HTTP errors, in-band error events,
malformed JSON, a dropped connection, short output, an abort).
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest
from aiohttp import web
from aiohttp.test_utils import TestServer

from support.rawhttp import Handler, RawServer, Start


@dataclass
class FakeBehaviour:
    token_delay: float = 0.0  # seconds between chunks
    first_delay: float = 0.0  # seconds before the first chunk
    tokens_per_chunk: int = 1
    reasoning_tokens: int = 0  # chat: this many tokens as reasoning_content first
    api_key: str | None = None
    status: int = 200  # non-200: reply with this status and an error body
    fail_mode: str | None = None  # error_chunk | malformed | disconnect | short | abort | no_done
    fail_every: int = 1  # apply fail_mode to every n-th request (1 = all)
    continuous_usage: bool = True  # honour stream_options.continuous_usage_stats
    cached_tokens: int = 0
    model: str = "fake-model"
    crlf: bool = False


@dataclass
class FakeSGLang:
    behaviour: FakeBehaviour
    server: TestServer | None = None
    requests: list[dict[str, Any]] = field(default_factory=list)
    request_headers: list[dict[str, str]] = field(default_factory=list)  # same order as `requests`
    first_chunk_at: dict[str, float] = field(default_factory=dict)

    @property
    def base_url(self) -> str:
        assert self.server is not None
        return str(self.server.make_url("")).rstrip("/")

    def _auth(self, request: web.Request) -> web.Response | None:
        key = self.behaviour.api_key
        if key and request.headers.get("Authorization") != f"Bearer {key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        return None

    async def models(self, request: web.Request) -> web.Response:
        denied = self._auth(request)
        if denied:
            return denied
        return web.json_response(
            {"object": "list", "data": [{"id": self.behaviour.model, "object": "model"}]}
        )

    async def _sse(self, request: web.Request, events: AsyncIterator[bytes | None]) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        sep = b"\r\n\r\n" if self.behaviour.crlf else b"\n\n"
        async for ev in events:
            if ev is None:  # drop the connection mid-stream
                assert request.transport is not None
                request.transport.close()
                return resp
            await resp.write(b"data: " + ev + sep)
        await resp.write_eof()
        return resp

    def _failing(self, n: int) -> str | None:
        b = self.behaviour
        return b.fail_mode if b.fail_mode and n % b.fail_every == 0 else None

    async def handle(self, request: web.Request) -> web.StreamResponse:
        denied = self._auth(request)
        if denied:
            return denied
        body = await request.json()
        self.requests.append(body)
        self.request_headers.append(dict(request.headers))
        n = len(self.requests)
        b = self.behaviour
        if b.status != 200:
            return web.json_response(
                {"error": {"message": "model 'x' not found", "code": b.status}}, status=b.status
            )
        path = request.path
        if path == "/generate":
            max_new = body["sampling_params"]["max_new_tokens"]
            prompt_len = len(body.get("input_ids") or body.get("text", "").split())
        elif path == "/v1/chat/completions":
            max_new = body["max_completion_tokens"]
            prompt_len = sum(len(str(m["content"]).split()) for m in body["messages"])
        else:
            max_new = body["max_tokens"]
            prompt_len = (
                len(body["prompt"]) if isinstance(body["prompt"], list) else len(body["prompt"].split())
            )
        mode = self._failing(n)
        out = max_new - 1 if mode == "short" else max_new
        rid = body.get("rid", str(n))
        if not body.get("stream") or mode == "json_body":
            await asyncio.sleep(b.first_delay + b.token_delay * out)
            return web.json_response(self._whole(path, out, prompt_len))
        gen = {
            "/generate": self._native,
            "/v1/chat/completions": self._chat,
            "/v1/completions": self._completions,
        }
        return await self._sse(request, gen[path](out, prompt_len, mode, rid, body))

    def _whole(self, path: str, out: int, prompt_len: int) -> dict[str, Any]:
        text = " tok" * out
        usage = {"prompt_tokens": prompt_len, "completion_tokens": out, "total_tokens": prompt_len + out}
        if path == "/generate":
            meta: dict[str, object] = {
                "completion_tokens": out,
                "prompt_tokens": prompt_len,
                "cached_tokens": 0,
            }
            meta["finish_reason"] = {"type": "length", "length": out}
            return {"text": text, "output_ids": list(range(out)), "meta_info": meta}
        if path == "/v1/chat/completions":
            msg = {"role": "assistant", "content": text, "reasoning_content": None}
            return {"choices": [{"index": 0, "message": msg, "finish_reason": "length"}], "usage": usage}
        return {"choices": [{"index": 0, "text": text, "finish_reason": "length"}], "usage": usage}

    async def _chunks(self, out: int, rid: str) -> AsyncIterator[int]:
        """Yields the running completion count per chunk, with the configured delays."""
        b = self.behaviour
        await asyncio.sleep(b.first_delay)
        done = 0
        while done < out:
            done = min(out, done + b.tokens_per_chunk)
            if rid not in self.first_chunk_at:
                self.first_chunk_at[rid] = asyncio.get_running_loop().time()
            yield done
            if done < out and b.token_delay:
                await asyncio.sleep(b.token_delay)

    async def _native(
        self, out: int, prompt_len: int, mode: str | None, rid: str, body: dict[str, Any]
    ) -> AsyncIterator[bytes | None]:
        b = self.behaviour
        text = ""
        async for done in self._chunks(out, rid):
            text = " tok" * done
            meta: dict[str, Any] = {
                "id": rid,
                "finish_reason": None,
                "prompt_tokens": prompt_len,
                "completion_tokens": done,
                "cached_tokens": b.cached_tokens,
            }
            if done == out:
                if mode == "abort":
                    meta["finish_reason"] = {
                        "type": "abort",
                        "message": "aborted by test",
                        "status_code": 500,
                    }
                else:
                    meta["finish_reason"] = {"type": "length", "length": out}
                    meta["e2e_latency"] = 0.1
            if mode == "error_chunk" and done > out // 2:
                yield json.dumps({"error": {"message": "CUDA out of memory"}}).encode()
                yield b"[DONE]"
                return
            if mode == "malformed" and done > out // 2:
                yield b"{not json"
                return
            if mode == "disconnect" and done > out // 2:
                yield None
                return
            yield json.dumps({"text": text, "output_ids": list(range(done)), "meta_info": meta}).encode()
        if mode != "no_done":
            yield b"[DONE]"

    async def _chat(
        self, out: int, prompt_len: int, mode: str | None, rid: str, body: dict[str, Any]
    ) -> AsyncIterator[bytes | None]:
        b = self.behaviour
        opts = body.get("stream_options") or {}
        continuous = b.continuous_usage and opts.get("continuous_usage_stats")

        def chunk(delta: dict[str, Any], finish: str | None, done: int) -> bytes:
            obj: dict[str, Any] = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": 0,
                "model": b.model,
                "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
                "usage": None,
            }
            if continuous:
                obj["usage"] = {"prompt_tokens": prompt_len, "completion_tokens": done, "total_tokens": 0}
            return json.dumps(obj).encode()

        yield chunk({"role": "assistant", "content": ""}, None, 0)
        prev = 0
        async for done in self._chunks(out, rid):
            n = done - prev
            prev = done
            if mode == "error_chunk" and done > out // 2:
                err = {"object": "error", "message": "boom", "type": "InternalServerError", "code": 500}
                yield json.dumps({"error": err}).encode()
                yield b"[DONE]"
                return
            if done <= b.reasoning_tokens:
                delta = {"role": None, "content": None, "reasoning_content": " think" * n}
            else:
                delta = {"role": None, "content": " tok" * n, "reasoning_content": None}
            yield chunk(delta, None, done)
        yield chunk({"content": None}, "abort" if mode == "abort" else "length", out)
        if opts.get("include_usage"):
            usage: dict[str, object] = {
                "prompt_tokens": prompt_len,
                "completion_tokens": out,
                "total_tokens": prompt_len + out,
            }
            if b.cached_tokens:
                usage["prompt_tokens_details"] = {"cached_tokens": b.cached_tokens}
            yield json.dumps({"id": rid, "choices": [], "usage": usage}).encode()
        yield b"[DONE]"

    async def _completions(
        self, out: int, prompt_len: int, mode: str | None, rid: str, body: dict[str, Any]
    ) -> AsyncIterator[bytes | None]:
        prev = 0
        async for done in self._chunks(out, rid):
            n = done - prev
            prev = done
            obj = {
                "id": rid,
                "choices": [{"index": 0, "text": " tok" * n, "finish_reason": None}],
                "usage": None,
            }
            yield json.dumps(obj).encode()
        yield json.dumps(
            {"id": rid, "choices": [{"index": 0, "text": "", "finish_reason": "length"}]}
        ).encode()
        usage = {"prompt_tokens": prompt_len, "completion_tokens": out, "total_tokens": prompt_len + out}
        yield json.dumps({"id": rid, "choices": [], "usage": usage}).encode()
        yield b"[DONE]"


FakeFactory = Callable[..., Awaitable[FakeSGLang]]


@pytest.fixture
async def fake_sglang() -> AsyncIterator[FakeFactory]:
    """Start a fake SGLang server on a free loopback port: `await fake_sglang(token_delay=...)`."""
    servers: list[TestServer] = []

    async def start(**kwargs: Any) -> FakeSGLang:
        fake = FakeSGLang(FakeBehaviour(**kwargs))
        app = web.Application()
        app.router.add_post("/generate", fake.handle)
        app.router.add_post("/v1/chat/completions", fake.handle)
        app.router.add_post("/v1/completions", fake.handle)
        app.router.add_get("/v1/models", fake.models)
        server = TestServer(app, host="127.0.0.1", port=0)
        await server.start_server()
        servers.append(server)
        fake.server = server
        return fake

    yield start
    for s in servers:
        await s.close()


@pytest.fixture
async def raw_server() -> AsyncIterator[Start]:
    """Start hand-rolled HTTP servers (`rawhttp.RawServer`) on free loopback ports."""
    servers: list[asyncio.Server] = []

    async def start(handler: Handler) -> RawServer:
        rs = RawServer(handler)
        rs.server = await asyncio.start_server(rs.serve, "127.0.0.1", 0)
        servers.append(rs.server)
        return rs

    yield start
    for s in servers:
        s.close()
