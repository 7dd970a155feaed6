"""SGLang's OpenAI-compatible routes: /v1/chat/completions and /v1/completions."""

from __future__ import annotations

import json
import time
from typing import Any, Final

from aiohttp import web

from sentinel_sim.engine import Request, RequestState
from sentinel_sim.generation import ApiBase, dumps, json_response, openai_error
from sentinel_sim.requests import GenParams, parse_chat, parse_completion
from sentinel_sim.text import THINK_END

__all__ = ["OpenAIRoutes"]


def _openai_error_body(message: str, status: int = 400) -> dict[str, Any]:
    return {
        "object": "error",
        "message": message,
        "type": "BadRequestError",
        "param": None,
        "code": status,
    }


def _openai_stream_error(message: str, injected: bool) -> bytes:
    if injected:
        # serving_base.create_streaming_error_response uses json.dumps (with spaces).
        return b"data: " + json.dumps({"error": _openai_error_body(message)}).encode() + b"\n\n"
    return b"data: " + dumps({"error": _openai_error_body(message)}) + b"\n\n"


# Stands for a delta's text while a chunk's template is built (escaped by JSON, so it cannot
# collide with a model name or request id, which are encoded around it).
_MARK: Final = "\u0000sentinel-sim-delta\u0000"
_MARK_JSON: Final = json.dumps(_MARK).encode()


def _template(chunk: bytes) -> tuple[bytes, bytes]:
    """A chunk made with ``_MARK`` as its delta, split around it: prefix + JSON(text) + suffix is
    byte for byte the chunk that text makes (one ``json.dumps`` of the text per event, not of the
    whole chunk)."""
    head, mark, tail = chunk.partition(_MARK_JSON)
    if not mark or _MARK_JSON in tail:
        raise AssertionError("chunk template: delta marker not found exactly once")
    return head, tail


def _text_json(text: str) -> bytes:
    return json.dumps(text, ensure_ascii=False).encode()


class _ChatStream:
    """/v1/chat/completions' stream: a role chunk, reasoning and content deltas, finish, usage."""

    __slots__ = (
        "api",
        "content_tpl",
        "created",
        "first",
        "gp",
        "reasoning_tpl",
        "req",
        "sent_text",
        "think_end",
    )
    malformed = b'data: {"id": "' + b"\n\n"

    def __init__(self, api: OpenAIRoutes, req: Request, gp: GenParams, separate: bool) -> None:
        self.api = api
        self.req = req
        self.gp = gp
        self.created = int(time.time())
        # The thinking part ends at the </think> token, which itself produces no text.
        self.think_end = req.script.answer_start - 1 if gp.thinking and separate else -1
        self.first = True
        self.sent_text = ""
        # Content and reasoning deltas are most of the events: templated unless each one carries
        # a usage object (continuous_usage_stats), whose figures change per event.
        self.content_tpl: tuple[bytes, bytes] | None = None
        self.reasoning_tpl: tuple[bytes, bytes] | None = None
        if not gp.continuous_usage:
            self.content_tpl = _template(self._chunk({"content": _MARK}))
            self.reasoning_tpl = _template(self._chunk({"reasoning_content": _MARK}))

    def _delta(self, key: str, text: str) -> bytes:
        tpl = self.content_tpl if key == "content" else self.reasoning_tpl
        if tpl is None:
            return self._chunk({key: text})
        return tpl[0] + _text_json(text) + tpl[1]

    def _chunk(self, delta: dict[str, Any], finish: str | None = None, matched: Any = None) -> bytes:
        obj = {
            "id": self.req.rid,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.gp.model,
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "role": delta.get("role"),
                        "content": delta.get("content"),
                        "reasoning_content": delta.get("reasoning_content"),
                        "tool_calls": None,
                    },
                    "logprobs": None,
                    "finish_reason": finish,
                    "matched_stop": matched,
                }
            ],
            "usage": self.api._usage(self.req) if self.gp.continuous_usage and delta else None,
        }
        return b"data: " + dumps(obj) + b"\n\n"

    def chunks(self, seen: int, n: int, done: bool) -> list[bytes]:
        req = self.req
        writes: list[bytes] = []
        if self.first:
            self.first = False
            writes.append(self._chunk({"role": "assistant", "content": ""}))
        out = bytearray()
        think_end = self.think_end
        if think_end >= 0 and seen < think_end:
            reasoning = self.api._pieces_text(req, seen, min(n, think_end))
            if reasoning:
                out += self._delta("reasoning_content", reasoning)
        start = max(seen, think_end + 1) if think_end >= 0 else seen
        if n > start:
            content = self.api._pieces_text(req, start, n)
            if done and req.stop_text:
                full = self.sent_text + content
                cut = full.find(req.stop_text)
                if cut >= 0:
                    content = full[:cut][len(self.sent_text) :]
            if content:
                self.sent_text += content
                out += self._delta("content", content)
        if out:
            writes.append(bytes(out))
        return writes

    def finish(self) -> list[bytes]:
        reason = self.req.finish_reason() or {}
        writes = [self._chunk({}, reason.get("type"), reason.get("matched"))]
        if self.gp.include_usage:
            usage = {
                "id": self.req.rid,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.gp.model,
                "choices": [],
                "usage": self.api._usage(self.req),
            }
            writes.append(b"data: " + dumps(usage) + b"\n\n")
        return writes

    def error(self, message: str, injected: bool) -> bytes:
        return _openai_stream_error(message, injected)


class _CompletionStream:
    """/v1/completions' stream: one text delta per chunk (the prompt first with ``echo``), usage."""

    __slots__ = ("api", "created", "echo_pending", "gp", "req", "sent", "text_tpl")
    malformed = b'data: {"id": "' + b"\n\n"

    def __init__(self, api: OpenAIRoutes, req: Request, gp: GenParams) -> None:
        self.api = api
        self.req = req
        self.gp = gp
        self.created = int(time.time())
        self.sent = ""
        self.echo_pending = gp.echo
        # A delta before the last: no finish reason, and no usage unless continuous_usage_stats.
        self.text_tpl = None if gp.continuous_usage else _template(self._chunk(_MARK, None))

    def _chunk(self, delta: str, reason: dict[str, Any] | None) -> bytes:
        gp = self.gp
        obj = {
            "id": self.req.rid,
            "object": "text_completion",
            "created": self.created,
            "model": gp.model,
            "choices": [
                {
                    "index": 0,
                    "text": delta,
                    "logprobs": None,
                    "finish_reason": reason.get("type") if reason else None,
                    "matched_stop": reason.get("matched") if reason else None,
                }
            ],
            "usage": self.api._usage(self.req) if gp.continuous_usage else None,
        }
        return b"data: " + dumps(obj) + b"\n\n"

    def chunks(self, seen: int, n: int, done: bool) -> list[bytes]:
        req = self.req
        gp = self.gp
        delta = self.api._pieces_text(req, seen, n)
        if done and req.stop_text:
            full = self.sent + delta
            cut = full.find(req.stop_text)
            if cut >= 0:
                delta = full[:cut][len(self.sent) :]
        self.sent += delta
        if self.echo_pending:
            delta = gp.prompt + delta
            self.echo_pending = False
        if not done and self.text_tpl is not None:
            return [self.text_tpl[0] + _text_json(delta) + self.text_tpl[1]]
        return [self._chunk(delta, req.finish_reason() if done else None)]

    def finish(self) -> list[bytes]:
        if not self.gp.include_usage:
            return []
        usage = {
            "id": self.req.rid,
            "object": "text_completion",
            "created": self.created,
            "model": self.gp.model,
            "choices": [],
            # 0.5.9 serialises this chunk with exclude_none=True: no null keys.
            "usage": {k: v for k, v in self.api._usage(self.req).items() if v is not None},
        }
        return [b"data: " + dumps(usage) + b"\n\n"]

    def error(self, message: str, injected: bool) -> bytes:
        return _openai_stream_error(message, injected)


class OpenAIRoutes(ApiBase):
    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        parsed = await self._parse(request, self._parse_chat, openai=True)
        if isinstance(parsed, web.Response):
            return parsed
        gp, key = parsed
        req = self._make_request(gp, key, gp.thinking)
        separate = gp.separate_reasoning and self.profile.reasoning_parser is not None
        route = "/v1/chat/completions"
        if gp.stream:
            return await self._stream(request, req, gp, _ChatStream(self, req, gp, separate), route)
        text, _ = await self._complete(request, req, route)
        if req.state == RequestState.ABORTED:
            return openai_error(req.finish_message, 500, "InternalServerError")
        reasoning: str | None = None
        if gp.thinking and separate:
            split = text.find(THINK_END)
            if split >= 0:
                reasoning, text = text[:split], text[split + len(THINK_END) :]
            else:
                reasoning, text = text, ""
        reason = req.finish_reason() or {}
        return json_response(
            {
                "id": req.rid,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": gp.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": text or None,
                            "reasoning_content": reasoning or None,
                            "tool_calls": None,
                        },
                        "logprobs": None,
                        "finish_reason": reason.get("type"),
                        "matched_stop": reason.get("matched"),
                    }
                ],
                "usage": self._usage(req),
                "metadata": {"weight_version": "default"},
            }
        )

    def _parse_chat(self, body: object) -> tuple[GenParams, str]:
        return parse_chat(
            body,
            context_len=self.profile.context_length,
            reasoning=self.profile.thinking_tokens > 0,
            default_stream_interval=self.srv.config.stream_interval,
        )

    async def completions(self, request: web.Request) -> web.StreamResponse:
        gp = await self._parse(request, self._parse_completion, openai=True)
        if isinstance(gp, web.Response):
            return gp
        req = self._make_request(gp, gp.prompt, False)
        route = "/v1/completions"
        if gp.stream:
            return await self._stream(request, req, gp, _CompletionStream(self, req, gp), route)
        text, _ = await self._complete(request, req, route)
        if req.state == RequestState.ABORTED:
            return openai_error(req.finish_message, 500, "InternalServerError")
        if gp.echo:
            text = gp.prompt + text
        reason = req.finish_reason() or {}
        return json_response(
            {
                "id": req.rid,
                "object": "text_completion",
                "created": int(time.time()),
                "model": gp.model,
                "choices": [
                    {
                        "index": 0,
                        "text": text,
                        "logprobs": None,
                        "finish_reason": reason.get("type"),
                        "matched_stop": reason.get("matched"),
                    }
                ],
                "usage": self._usage(req),
                "metadata": {"weight_version": "default"},
            }
        )

    def _parse_completion(self, body: object) -> GenParams:
        return parse_completion(
            body,
            context_len=self.profile.context_length,
            default_stream_interval=self.srv.config.stream_interval,
        )

    def _usage(self, req: Request) -> dict[str, Any]:
        details = (
            {"cached_tokens": req.cached_tokens}
            if self.srv.config.enable_cache_report and req.cached_tokens > 0
            else None
        )
        return {
            "prompt_tokens": req.prompt_tokens,
            "total_tokens": req.prompt_tokens + req.generated,
            "completion_tokens": req.generated,
            "prompt_tokens_details": details,
            "reasoning_tokens": 0,
        }
