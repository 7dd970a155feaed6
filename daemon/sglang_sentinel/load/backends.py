"""Request bodies and response parsers for SGLang's native and OpenAI-compatible routes.

Wire formats (SGLang v0.5.9: srt/entrypoints/http_server.py and srt/entrypoints/openai/ in its wheel):
- native `/generate` streams `data: {"text", "output_ids", "meta_info": {...}}` events whose
  `text` is cumulative and whose `meta_info.completion_tokens` is the running total; the last
  content event has `finish_reason`; then `data: [DONE]`.
- chat streams `delta.reasoning_content` (with `content: null`) then `delta.content` chunks, a
  closing chunk with `finish_reason`, a usage chunk (`choices: []`) when
  `stream_options.include_usage`, then `[DONE]`. With `continuous_usage_stats`, every chunk
  carries usage, which gives exact tokens per chunk under multi-token prediction.
- errors after the stream began are `data: {"error": {...}}` events in a 200 response.

Parsers are fed SSE events with their arrival time and fill a `RequestRecord`; a protocol
violation raises `StreamFailure` with the failure reason. Events are decoded as JSON, except the
common shapes that are read from their bytes with the same result (the native stream's middle
events, SGLang's OpenAI chunks: `sglang_sentinel.load.openai_chunks`), which is most of the client's
CPU per token otherwise.
"""

from __future__ import annotations

import json
import re
from typing import Any

from sglang_sentinel.load.openai_chunks import (
    CHAT_CHUNK,
    CHAT_HEAD,
    CHAT_REST,
    COMPLETION_CHUNK,
    COMPLETION_HEAD,
    COMPLETION_REST,
)
from sglang_sentinel.load.prompt import Prompt
from sglang_sentinel.load.records import FailureReason, RequestRecord
from sglang_sentinel.load.spec import Backend, LoadSpec

__all__ = ["ResponseParser", "StreamFailure", "build_body", "make_parser"]


class StreamFailure(Exception):
    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def build_body(
    spec: LoadSpec, prompt: Prompt, *, model: str, rid: str, output_len: int, lora: str | None = None
) -> bytes:
    """The request body, serialised once before the request's planned send time.

    `lora`: an adapter name, sent as bench_serving does: `lora_path`, and on the OpenAI routes
    also as the model (SGLang's and vLLM's conventions)."""
    body: dict[str, Any]
    if spec.backend is Backend.SGLANG:
        key = "input_ids" if isinstance(prompt.content, list) else "text"
        body = {
            key: prompt.content,
            "sampling_params": {
                "temperature": spec.temperature,
                "max_new_tokens": output_len,
                "ignore_eos": spec.ignore_eos,
                **({"top_p": spec.top_p} if spec.top_p < 1.0 else {}),
            },
            "stream": spec.stream,
            "rid": rid,
        }
    else:
        body = {"model": model, "temperature": spec.temperature, "stream": spec.stream, "rid": rid}
        if spec.ignore_eos:
            body["ignore_eos"] = True
        if spec.top_p < 1.0:
            body["top_p"] = spec.top_p
        if spec.stream:
            body["stream_options"] = {"include_usage": True, "continuous_usage_stats": True}
        if spec.backend is Backend.OPENAI_CHAT:
            content = prompt.content
            body["messages"] = content if _is_messages(content) else [{"role": "user", "content": content}]
            body["max_completion_tokens"] = output_len
        else:
            body["prompt"] = prompt.content
            body["max_tokens"] = output_len
    if lora is not None:
        body["lora_path"] = lora
        if spec.backend is not Backend.SGLANG:
            body["model"] = lora
    body.update(spec.extra_body)
    if prompt.extra:
        body.update(prompt.extra)  # per-request fields win, as in bench_serving
    return json.dumps(body, separators=(",", ":")).encode()


def _is_messages(content: object) -> bool:
    return isinstance(content, list) and bool(content) and isinstance(content[0], dict)


def _int(value: object, what: str) -> int:
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    raise StreamFailure(FailureReason.MALFORMED, f"{what} is not a non-negative integer: {value!r}")


def _reasoning_tokens(usage: dict[str, Any]) -> int | None:
    """The usage's reasoning count: OpenAI's `completion_tokens_details.reasoning_tokens` (where
    OpenAI, vLLM and SGLang 0.5.23 put it; 0.5.23 sets it only when non-zero), else SGLang's
    top-level `reasoning_tokens` (0.5.9 has only that one; 0.5.23 writes both, equal). A value
    that is not a non-negative integer counts as absent: the count is informative, and the
    completion count still holds."""
    details = usage.get("completion_tokens_details")
    for value in (
        details.get("reasoning_tokens") if isinstance(details, dict) else None,
        usage.get("reasoning_tokens"),
    ):
        if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
            return value
    return None


def _error_message(obj: dict[str, Any]) -> str:
    err = obj.get("error")
    if isinstance(err, dict):
        return str(err.get("message") or err)
    return str(err)


class ResponseParser:
    """Base: shared bookkeeping of token-bearing chunks. One instance per request."""

    def __init__(self, rec: RequestRecord, keep_text: bool) -> None:
        self.rec = rec
        self.keep_text = keep_text
        self.tokens_seen = 0  # server's running completion count at the last chunk
        self.finished = False  # a finish_reason was seen
        self.usage_completion: int | None = None
        self.texts: list[str] = []

    def _chunk(self, now: float, n: int, *, reasoning: bool = False, content: bool = True) -> None:
        """Record a token-bearing chunk of `n` tokens that arrived at `now` (relative to send).

        Per-event work is kept to appends; TTFT and ITL are derived once in `finish`."""
        rec = self.rec
        rec.chunk_times.append(now)
        rec.chunk_tokens.append(n)
        if reasoning:
            rec.reasoning_tokens += n
        else:
            rec.content_tokens += n
            if content and rec.ttfc is None:
                rec.ttfc = now

    def feed(self, obj: Any, now: float) -> None:
        raise NotImplementedError

    def take_event(self, event: bytes, now: float) -> bool:
        """The steady state's read: one whole event of this stream's common shape, recorded
        with fewer checks than the sink's general path makes (the checks are the parser's own
        here: `feed_event`'s effect when it returns True). False, with nothing done, for
        anything else: the sink's general path (`feed_event`, `feed_bytes`) follows."""
        return False

    def feed_event(self, event: bytes, now: float) -> None:
        """One whole single-line SSE event, `data: <payload>\\n\\n` (not `[DONE]`)."""
        self.feed_bytes(event[6:-2], now)

    def feed_bytes(self, payload: bytes, now: float) -> None:
        """One SSE data payload (not `[DONE]`)."""
        try:
            obj = json.loads(payload.decode("utf-8"))
        except (UnicodeDecodeError, ValueError):
            raise StreamFailure(FailureReason.MALFORMED, f"event is not JSON: {payload[:200]!r}") from None
        self.feed(obj, now)

    def finish(self) -> None:
        """Called once the body has ended: TTFT, ITL and final counts."""
        rec = self.rec
        times = rec.chunk_times
        tokens = rec.chunk_tokens
        if times:
            rec.ttft = times[0]
            itl = rec.itl
            prev = times[0]
            for t, n in zip(times[1:], tokens[1:], strict=True):
                if n == 1:
                    itl.append(t - prev)
                else:
                    itl.extend([(t - prev) / n] * n)
                prev = t
        counted = sum(tokens)
        rec.output_len = self.usage_completion if self.usage_completion is not None else counted
        if self.keep_text:
            rec.text = "".join(self.texts)


# Fast path for native events in the middle of a stream; see NativeParser.feed_event.
_WS_QUOTE_CHAR = re.compile(rb'\s*"(.)', re.DOTALL)


class NativeParser(ResponseParser):
    """`/generate`: per-token ITL from `completion_tokens` deltas, exactly as bench_serving."""

    def __init__(self, rec: RequestRecord, keep_text: bool) -> None:
        super().__init__(rec, keep_text)
        self.prev_text = ""
        self.unparsed: bytes | None = None  # the last event, if only the fast path read it
        self.unparsed_at = 0.0

    def finish(self) -> None:
        # The last event carries finish_reason (and abort details): decode it in full.
        if self.unparsed is not None:
            event = self.unparsed
            self.unparsed = None
            ResponseParser.feed_bytes(self, event[6:-2], self.unparsed_at)
        super().finish()

    def feed_bytes(self, payload: bytes, now: float) -> None:
        # Events of a read that held more than one (rare): the same path as a lone event.
        self.feed_event(b"data: " + payload + b"\n\n", now)

    def feed_event(self, event: bytes, now: float) -> None:
        if not self.take_event(event, now):
            self.unparsed = None
            ResponseParser.feed_bytes(self, event[6:-2], now)

    def take_event(self, event: bytes, now: float) -> bool:
        """Native events carry the whole text so far (v0.5.9 default), so decoding every event
        costs O(length) each and O(length^2) per request: it was the client's largest CPU cost
        (benchmarks/load_efficiency.py). Between the first token and the finish, all we need
        is `completion_tokens` and whether `text` is non-empty, so such events are read with
        two byte searches instead. A key pattern cannot match inside a JSON string (quotes
        there are escaped). The first event, the last one (in `finish`), errors and anything
        that does not match are decoded in full, so prompt/cached tokens, finish reasons and
        malformed events are still handled exactly. `event` is one whole read: this checks
        that it is one single-line event, `data: {...}\\n\\n`, as the sink's general path does."""
        rec = self.rec
        if (
            rec.chunk_times
            and not self.keep_text
            and event.startswith(b"data: {")
            and event.endswith(b"}\n\n")
            and event.find(b"\n", 6) == len(event) - 2
        ):
            # text comes first and meta_info last in SGLang's events: find/rfind stop early.
            i = event.rfind(b'"completion_tokens":')
            t = event.find(b'"text":', 6)
            if i >= 0 and t >= 0:
                # The count ends at the next "," (or "}" when last); int() allows the spaces
                # of non-compact JSON. Anything else falls through to the full decode.
                j = event.find(b",", i + 20, i + 48)
                try:
                    n = int(event[i + 20 : j]) if j > 0 else -1
                except ValueError:
                    n = -1
                has_text: bool | None = None
                if event[t + 7] == 0x22:  # compact JSON (SGLang's orjson): "text":"...
                    has_text = event[t + 8] != 0x22
                else:
                    quote = _WS_QUOTE_CHAR.match(event, t + 7)
                    if quote is not None:
                        has_text = quote.group(1) != b'"'
                if n >= 0 and has_text is not None:
                    self.usage_completion = n
                    new = n - self.tokens_seen
                    if new > 0 and has_text:
                        # _chunk, inlined: this is the client's hottest line.
                        rec.chunk_times.append(now)
                        rec.chunk_tokens.append(new)
                        rec.content_tokens += new
                        self.tokens_seen = n
                    # Kept as two fields, not a tuple: no container allocated per event.
                    self.unparsed = event
                    self.unparsed_at = now
                    return True
        return False

    def feed(self, obj: Any, now: float) -> None:
        if not isinstance(obj, dict):
            raise StreamFailure(FailureReason.MALFORMED, f"event is not an object: {str(obj)[:200]}")
        if "error" in obj:
            raise StreamFailure(FailureReason.ERROR_CHUNK, _error_message(obj))
        meta = obj.get("meta_info")
        if not isinstance(meta, dict):
            raise StreamFailure(FailureReason.MALFORMED, "event without meta_info")
        total = _int(meta.get("completion_tokens", 0), "meta_info.completion_tokens")
        rec = self.rec
        if rec.prompt_tokens is None and "prompt_tokens" in meta:
            rec.prompt_tokens = _int(meta["prompt_tokens"], "meta_info.prompt_tokens")
        cached = meta.get("cached_tokens")
        if isinstance(cached, int):
            rec.cached_tokens = cached
        self.usage_completion = total
        text = obj.get("text")
        # bench_serving counts only events with non-empty text; tokens of textless events
        # (e.g. an incomplete UTF-8 sequence) are carried into the next text event.
        if text and total > self.tokens_seen:
            self._chunk(now, total - self.tokens_seen)
            self.tokens_seen = total
            if self.keep_text and isinstance(text, str):
                # v0.5.9 streams cumulative text; --incremental-streaming-output sends deltas.
                if text.startswith(self.prev_text):
                    self.texts = [text]
                else:
                    self.texts.append(text)
                self.prev_text = text
        fr = meta.get("finish_reason")
        if fr is not None:
            self._finish_reason(fr)

    def _finish_reason(self, fr: object) -> None:
        self.finished = True
        kind = fr.get("type") if isinstance(fr, dict) else fr
        self.rec.finish_reason = str(kind)
        if kind == "abort":
            msg = fr.get("message") if isinstance(fr, dict) else None
            raise StreamFailure(FailureReason.ABORTED, f"server aborted the request: {msg or fr}")


class OpenAIParser(ResponseParser):
    """Chat and completions chunks; tokens per chunk from continuous usage when present."""

    def __init__(self, rec: RequestRecord, keep_text: bool, chat: bool) -> None:
        super().__init__(rec, keep_text)
        self.chat = chat
        self.pattern = CHAT_CHUNK if chat else COMPLETION_CHUNK
        self.head_pattern = CHAT_HEAD if chat else COMPLETION_HEAD
        self.rest = CHAT_REST if chat else COMPLETION_REST
        # `data: ` and the bytes of this stream's chunks up to the pattern's HEAD, once one
        # matched in full.
        self.head = b"\x00"  # begins no event
        self.head_json = b"\x00"  # the same without `data: `, for payloads (`feed_bytes`)
        self.usage_reasoning: int | None = None

    def _usage(self, usage: object) -> int | None:
        if not isinstance(usage, dict):
            return None
        rec = self.rec
        completion = _int(usage.get("completion_tokens", 0), "usage.completion_tokens")
        if "prompt_tokens" in usage:
            rec.prompt_tokens = _int(usage["prompt_tokens"], "usage.prompt_tokens")
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict) and isinstance(details.get("cached_tokens"), int):
            rec.cached_tokens = details["cached_tokens"]
        reasoning = _reasoning_tokens(usage)
        if reasoning is not None and reasoning > 0:
            self.usage_reasoning = reasoning
        self.usage_completion = completion
        return completion

    def feed_event(self, event: bytes, now: float) -> None:
        """SGLang's chunks are read by one match of their exact byte shape
        (`sglang_sentinel.load.openai_chunks`); anything else by the full decode.

        A chunk that begins with the bytes this stream's first matched chunk had up to the
        pattern's HEAD (id, object, created, model: constant within a stream) is matched by
        REST from there: HEAD can match only one prefix of a chunk (its strings end at their
        first quote), so that is the full pattern's verdict and groups, for a third less
        scanning on the client's hottest line."""
        if self.take_event(event, now):
            return
        # Not this stream's head (the first chunk, another shape) or not valid UTF-8: the full
        # pattern (HEAD matches one prefix only, so after a REST miss it misses too), then the
        # full decode.
        m = self._learn(event, 6, len(event) - 2)
        if m is None or not self._take(m, event, now):
            ResponseParser.feed_bytes(self, event[6:-2], now)

    def take_event(self, event: bytes, now: float) -> bool:
        # The head (it begins with `data: `) and REST cannot hold a line break: a match is one
        # single-line event, which the sink's general path checks with three more calls.
        head = self.head
        if event.startswith(head) and event.endswith(b"\n\n"):
            m = self.rest.fullmatch(event, len(head), len(event) - 2)
            if m is not None:
                return self._take(m, event, now)
        return False

    def feed_bytes(self, payload: bytes, now: float) -> None:
        head = self.head_json
        if payload.startswith(head):
            m = self.rest.fullmatch(payload, len(head))
        else:
            m = self._learn(payload, 0, len(payload))
        if m is None or not self._take(m, payload, now):
            ResponseParser.feed_bytes(self, payload, now)

    def _learn(self, raw: bytes, start: int, end: int) -> re.Match[bytes] | None:
        """The full pattern's match; on a match, `data: ` and its HEAD's bytes become the
        stream's head (what a whole event of this stream begins with)."""
        m = self.pattern.fullmatch(raw, start, end)
        if m is not None:
            h = self.head_pattern.match(raw, start)
            if h is not None:
                self.head_json = raw[start : h.end()]
                self.head = b"data: " + self.head_json
        return m

    def _take(self, m: re.Match[bytes], raw: bytes, now: float) -> bool:
        """A matched chunk, with the same effect as `feed` of its decoded JSON. False (nothing
        done) when it is not valid UTF-8: the full decode reports that."""
        if not raw.isascii():
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError:
                return False
        if self.chat:
            content, reasoning, fr, prompt, completion, cached, rtok, rdetail = m.groups()
        else:
            content, fr, prompt, completion, cached, rtok, rdetail = m.groups()
            reasoning = None
        running: int | None = None
        rec = self.rec
        if prompt is not None:  # usage (the pattern has all four or none): `_usage`, inlined
            running = int(completion)
            rec.prompt_tokens = int(prompt)
            if cached is not None:
                rec.cached_tokens = int(cached)
            if rdetail is not None:  # OpenAI's location first, as `_reasoning_tokens`
                rtok = rdetail
            if rtok != b"0":
                self.usage_reasoning = int(rtok)
            self.usage_completion = running
        if reasoning or content:
            if running is not None and running > self.tokens_seen and not self.keep_text:
                # `_delta` and `_chunk`, inlined for the common chunk: the client's hottest lines.
                n = running - self.tokens_seen
                self.tokens_seen = running
                rec.chunk_times.append(now)
                rec.chunk_tokens.append(n)
                if content:
                    rec.content_tokens += n
                    if rec.ttfc is None:
                        rec.ttfc = now
                else:
                    rec.reasoning_tokens += n
            else:
                self._delta(now, running, reasoning, content)
        if fr is not None:
            self._finish_reason(fr.decode())
        return True

    def feed(self, obj: Any, now: float) -> None:
        if not isinstance(obj, dict):
            raise StreamFailure(FailureReason.MALFORMED, f"event is not an object: {str(obj)[:200]}")
        if "error" in obj:
            raise StreamFailure(FailureReason.ERROR_CHUNK, _error_message(obj))
        choices = obj.get("choices")
        if not isinstance(choices, list):
            raise StreamFailure(FailureReason.MALFORMED, "chunk without a choices list")
        running = self._usage(obj.get("usage"))
        if not choices:
            return
        choice = choices[0]
        if not isinstance(choice, dict):
            raise StreamFailure(FailureReason.MALFORMED, "choice is not an object")
        if self.chat:
            delta = choice.get("delta")
            if not isinstance(delta, dict):
                raise StreamFailure(FailureReason.MALFORMED, "chat chunk without delta")
            reasoning_text = delta.get("reasoning_content")
            content_text = delta.get("content")
        else:
            reasoning_text = None
            content_text = choice.get("text")
        if reasoning_text or content_text:
            self._delta(now, running, reasoning_text, content_text)
        fr = choice.get("finish_reason")
        if fr is not None:
            self._finish_reason(fr)

    def _delta(self, now: float, running: int | None, reasoning_text: Any, content_text: Any) -> None:
        """A chunk with text; the texts are str (decoded JSON) or bytes (the fast path's UTF-8)."""
        if running is not None and running > self.tokens_seen:
            n = running - self.tokens_seen
            self.tokens_seen = running
        else:
            # No per-chunk usage: one token per chunk, as bench_serving's chat client.
            n = 1
            self.tokens_seen += 1
        self._chunk(now, n, reasoning=bool(reasoning_text) and not content_text, content=bool(content_text))
        if self.keep_text:
            # bench_serving's generated_text: reasoning then content (_combine_openai_chat_content).
            for part in (reasoning_text, content_text):
                if isinstance(part, str):
                    self.texts.append(part)
                elif isinstance(part, bytes):
                    self.texts.append(part.decode("utf-8"))

    def _finish_reason(self, fr: object) -> None:
        self.finished = True
        self.rec.finish_reason = str(fr)
        if fr == "abort":
            raise StreamFailure(FailureReason.ABORTED, "server aborted the request")

    def finish(self) -> None:
        super().finish()
        rec = self.rec
        if self.usage_reasoning is not None and self.usage_reasoning <= rec.output_len:
            rec.reasoning_tokens = self.usage_reasoning
            rec.content_tokens = rec.output_len - self.usage_reasoning


def make_parser(backend: Backend, rec: RequestRecord, keep_text: bool) -> ResponseParser:
    if backend is Backend.SGLANG:
        return NativeParser(rec, keep_text)
    return OpenAIParser(rec, keep_text, chat=backend is Backend.OPENAI_CHAT)


def parse_whole(backend: Backend, rec: RequestRecord, keep_text: bool, obj: Any, latency: float) -> None:
    """A non-streamed response: one chunk at `latency` (TTFT = E2E, as bench_serving)."""
    parser = make_parser(backend, rec, keep_text)
    if not isinstance(obj, dict):
        raise StreamFailure(FailureReason.MALFORMED, "response is not a JSON object")
    if "error" in obj:
        raise StreamFailure(FailureReason.ERROR_CHUNK, _error_message(obj))
    if backend is Backend.OPENAI_CHAT:
        # Reshape the message as one delta so that the chunk logic counts it.
        choices = obj.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            message = choices[0].get("message")
            obj = {**obj, "choices": [{**choices[0], "delta": message if isinstance(message, dict) else {}}]}
    parser.feed(obj, latency)
    parser.finish()
