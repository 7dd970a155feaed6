"""SGLang's OpenAI-compatible routes: /v1/chat/completions and /v1/completions."""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from typing import Any, Final

from aiohttp import web

from sglang_sentinel_sim.engine import Request, RequestState
from sglang_sentinel_sim.generation import ApiBase, dumps, json_response, openai_error, text_json
from sglang_sentinel_sim.requests import GenParams, parse_chat, parse_completion
from sglang_sentinel_sim.text import THINK_END

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


# Stand for a delta's text and for its usage object while a chunk's template is built (escaped by
# JSON, so they cannot collide with a model name or request id, which are encoded around them).
_MARK: Final = "\u0000sentinel-sim-delta\u0000"
_MARK_JSON: Final = json.dumps(_MARK).encode()
_UMARK: Final = "\u0000sentinel-sim-usage\u0000"
_UMARK_JSON: Final = json.dumps(_UMARK).encode()
_NULL: Final = b"null"


def _split_once(data: bytes, mark: bytes) -> tuple[bytes, bytes]:
    head, found, tail = data.partition(mark)
    if not found or mark in tail:
        raise AssertionError("chunk template: marker not found exactly once")
    return head, tail


def _template(chunk: bytes) -> tuple[bytes, bytes, bytes]:
    """A chunk made with ``_MARK`` as its delta and ``_UMARK`` as its usage (or a usage object with
    them as its two counts), split around them:
    head + JSON(text) + mid + JSON(usage) + tail is byte for byte the chunk that text and usage
    make (the text's and the usage's JSON per event, not the whole chunk's)."""
    head, rest = _split_once(chunk, _MARK_JSON)
    mid, tail = _split_once(rest, _UMARK_JSON)
    return head, mid, tail


class _UsageJson:
    """``dumps(api._usage(req))`` of a stream's per-event usage (continuous_usage_stats), as a
    template: between events only the token counts change (total = prompt + generated,
    completion = generated; an int's JSON is its ``str``), so they are filled into the JSON
    built once per (prompt, cached) tokens -- the only other inputs of the usage object."""

    __slots__ = ("key", "parts", "usage")

    def __init__(self, usage: Callable[[Request], dict[str, Any]]) -> None:
        self.usage = usage
        self.key = (-1, -1)
        self.parts: tuple[bytes, bytes, bytes] = (b"", b"", b"")

    def render(self, req: Request) -> bytes:
        key = (req.prompt_tokens, req.cached_tokens)
        if key != self.key:
            usage = self.usage(req)
            if (usage["total_tokens"], usage["completion_tokens"]) != (
                req.prompt_tokens + req.generated,
                req.generated,
            ):
                raise AssertionError("usage template: the token counts are not prompt + generated, generated")
            # Built with marker strings in the two counts' places, split around their JSON.
            self.parts = _template(dumps({**usage, "total_tokens": _MARK, "completion_tokens": _UMARK}))
            self.key = key
        head, mid, tail = self.parts
        return b"%b%d%b%d%b" % (head, req.prompt_tokens + req.generated, mid, req.generated, tail)


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
        "usage_json",
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
        # Content and reasoning deltas are most of the events: templates with the text and the
        # usage object (continuous_usage_stats, else null) filled in.
        self.content_tpl = _template(self._chunk({"content": _MARK}, usage=_UMARK))
        self.reasoning_tpl = _template(self._chunk({"reasoning_content": _MARK}, usage=_UMARK))
        self.usage_json = _UsageJson(api._usage)

    def _delta(self, key: str, text: str) -> bytes:
        head, mid, tail = self.content_tpl if key == "content" else self.reasoning_tpl
        usage = self.usage_json.render(self.req) if self.gp.continuous_usage else _NULL
        return b"".join((head, text_json(text), mid, usage, tail))

    def _chunk(
        self, delta: dict[str, Any], finish: str | None = None, matched: Any = None, usage: Any = None
    ) -> bytes:
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
            "usage": usage
            if usage is not None
            else (self.api._usage(self.req) if self.gp.continuous_usage and delta else None),
        }
        return b"data: " + dumps(obj) + b"\n\n"

    def chunks(self, seen: int, n: int, done: bool) -> list[bytes]:
        req = self.req
        think_end = self.think_end
        if not done and not self.first and seen > think_end:
            # The steady state (past the role chunk and </think>): one content delta, or nothing.
            content = self.api._pieces_text(req, seen, n)
            if not content:
                return []
            if req.stop_text:
                self.sent_text += content
            return [self._delta("content", content)]
        writes: list[bytes] = []
        if self.first:
            self.first = False
            writes.append(self._chunk({"role": "assistant", "content": ""}))
        out = bytearray()
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
                if req.stop_text:  # (only a stop string's cut reads what was sent)
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

    __slots__ = ("api", "created", "echo_pending", "gp", "req", "sent", "text_tpl", "usage_json")
    malformed = b'data: {"id": "' + b"\n\n"

    def __init__(self, api: OpenAIRoutes, req: Request, gp: GenParams) -> None:
        self.api = api
        self.req = req
        self.gp = gp
        self.created = int(time.time())
        self.sent = ""
        self.echo_pending = gp.echo
        # A delta before the last: no finish reason; usage filled in (continuous_usage_stats) or null.
        self.text_tpl = _template(self._chunk(_MARK, None, usage=_UMARK))
        self.usage_json = _UsageJson(api._usage)

    def _chunk(self, delta: str, reason: dict[str, Any] | None, usage: Any = None) -> bytes:
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
            "usage": usage
            if usage is not None
            else (self.api._usage(self.req) if gp.continuous_usage else None),
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
        if req.stop_text:  # (only a stop string's cut reads what was sent)
            self.sent += delta
        if self.echo_pending:
            delta = gp.prompt + delta
            self.echo_pending = False
        if not done:
            head, mid, tail = self.text_tpl
            usage = self.usage_json.render(req) if gp.continuous_usage else _NULL
            return [b"".join((head, text_json(delta), mid, usage, tail))]
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
