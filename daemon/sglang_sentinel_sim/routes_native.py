"""SGLang's native generation route, /generate: one prompt or a batch, streamed or not."""

from __future__ import annotations

import asyncio
import json
import time
from typing import Any

from aiohttp import web

from sglang_sentinel_sim.engine import Request, RequestState
from sglang_sentinel_sim.generation import ApiBase, dumps, json_response, native_error, text_json
from sglang_sentinel_sim.requests import GenParams, parse_generate
from sglang_sentinel_sim.versions import has, retractions_key

__all__ = ["NativeRoutes"]


class _NativeStream:
    """/generate's stream: every event carries the cumulative text and ids so far.

    Both are kept JSON-encoded and only extended per chunk, so a chunk costs O(new tokens)
    encoding plus one bytes join, not a re-encoding of the whole text.
    """

    __slots__ = ("api", "head_tail", "ids_json", "reasoning", "req", "rid_json", "text", "text_json")
    malformed = b'data: {"text": "' + b"\n\n"

    def __init__(self, api: NativeRoutes, req: Request) -> None:
        self.api = api
        self.req = req
        self.text = ""
        self.text_json = bytearray()
        self.ids_json = bytearray()
        self.rid_json = json.dumps(req.rid).encode()
        key = retractions_key(api.srv.version)
        self.head_tail = f',"prompt_tokens":{req.prompt_tokens},"weight_version":"default","{key}":'.encode()
        # From 0.5.10 reasoning_tokens comes before completion_tokens (0: /generate does not reason).
        self.reasoning = b'"reasoning_tokens":0,' if has("meta.reasoning_tokens", api.srv.version) else b""

    def chunks(self, seen: int, n: int, done: bool) -> list[bytes]:
        req = self.req
        if n > seen:
            piece = self.api._pieces_text(req, seen, n)
            self.text += piece
            self.text_json += text_json(piece)[1:-1]
            if self.ids_json:
                self.ids_json += b","
            self.ids_json += b",".join([b"%d" % i for i in self.api._ids(req, seen, n)])
        if done:
            final_text = self.text
            if req.stop_text:
                cut = final_text.find(req.stop_text)
                if cut >= 0:
                    final_text = final_text[:cut]
            chunk = dumps(
                {
                    "text": final_text,
                    "output_ids": json.loads(b"[" + self.ids_json + b"]"),
                    "meta_info": self.api._meta(req, n, True),
                }
            )
        else:
            tail = b'%b%d,%b"completion_tokens":%d,"cached_tokens":%d,"cached_tokens_details":null}}\n\n' % (
                self.head_tail,
                req.retractions,
                self.reasoning,
                n,
                req.cached_tokens,
            )
            parts = (b'data: {"text":"', self.text_json, b'","output_ids":[', self.ids_json, b"]")
            return [b"".join((*parts, b',"meta_info":{"id":', self.rid_json, b',"finish_reason":null', tail))]
        return [b"data: " + chunk + b"\n\n"]

    def finish(self) -> list[bytes]:
        return []

    def error(self, message: str, injected: bool) -> bytes:
        return b"data: " + dumps({"error": {"message": message}}) + b"\n\n"


class NativeRoutes(ApiBase):
    async def generate(self, request: web.Request) -> web.StreamResponse:
        parse = self._parse_generate
        items = await self._parse(request, parse, openai=False)
        if isinstance(items, web.Response):
            return items
        if len(items) > 1:
            if items[0].stream:
                return native_error("Streaming a batch of prompts is not supported by the simulator.")
            reqs = [self._make_request(gp, gp.prompt, False) for gp in items]
            for req in reqs:
                self._submit(req, request)
            try:
                outs = [await self._await_nonstream(req, None) for req in reqs]
            except asyncio.CancelledError:
                for req in reqs:
                    self.engine.abort(req)
                raise
            for req in reqs:
                self._record(req, "/generate", False, None, None)
            return json_response(
                [self._native_body(req, text, ids) for req, (text, ids) in zip(reqs, outs, strict=True)]
            )
        gp = items[0]
        req = self._make_request(gp, gp.prompt, False)
        if gp.stream:
            return await self._stream(request, req, gp, _NativeStream(self, req), "/generate")
        text, ids = await self._complete(request, req, "/generate")
        if req.state == RequestState.ABORTED:
            return native_error(req.finish_message, 500 if "shutting" in req.finish_message else 400)
        return json_response(self._native_body(req, text, ids))

    def _parse_generate(self, body: object) -> list[GenParams]:
        return parse_generate(
            body,
            context_len=self.profile.context_length,
            default_stream_interval=self.srv.config.stream_interval,
        )

    def _meta(self, req: Request, n: int, final: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": req.finish_reason() if final else None,
            "prompt_tokens": req.prompt_tokens,
            "weight_version": "default",
            retractions_key(self.srv.version): req.retractions,
        }
        if has("meta.reasoning_tokens", self.srv.version):
            meta["reasoning_tokens"] = 0
        meta |= {
            "completion_tokens": n,
            "cached_tokens": req.cached_tokens,
            # Always null in 0.5.9 without HiCache (the scheduler sends a list of None).
            "cached_tokens_details": None,
        }
        if final and self.metrics is not None:
            # --enable-metrics adds the scheduler's timings and the tokenizer's timestamps.
            unix = self.srv.truth.unix
            meta["queue_time"] = max(0.0, req.scheduled_at - req.arrival) if req.scheduled_at else 0.0
            meta["prefill_launch_delay"] = 0.0
            meta["prefill_finished_ts"] = unix(req.first_token_at) if req.first_token_at else None
            meta["request_received_ts"] = unix(req.arrival)
            meta["request_sent_to_scheduler_ts"] = unix(req.submitted)
            meta["response_sent_to_client_ts"] = time.time()
            meta["decode_finished_ts"] = unix(req.finished_at)
            meta["inference_time"] = max(0.0, req.finished_at - (req.scheduled_at or req.arrival))
            decode_time = req.finished_at - req.first_token_at
            if decode_time > 0:
                meta["decode_throughput"] = n / decode_time
        if final:
            meta["e2e_latency"] = max(0.0, req.finished_at - req.arrival)
            if self.profile.mtp_accept_length > 1.0:
                steps = max(1, req.spec_steps)
                meta["spec_verify_ct"] = steps
                meta["spec_accept_length"] = n / steps
        return meta

    def _native_body(self, req: Request, text: str, ids: list[int]) -> dict[str, Any]:
        return {"text": text, "output_ids": ids, "meta_info": self._meta(req, req.generated, True)}
