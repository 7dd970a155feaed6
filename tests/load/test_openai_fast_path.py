"""The OpenAI parsers' byte-shape fast path (`sglang_sentinel.load.openai_chunks`) against the full decode.

Property-style: many generated streams of chunks, in SGLang's shape and in shapes around it
(escapes, \\u escapes, non-ASCII, invalid UTF-8, usage-only and error chunks, several choices,
whitespace, vLLM/OpenAI-style extra or missing fields, odd numbers), fed once through the
parser as the sink feeds it and once through the full `json.loads` path; every figure of the
record, the kept text and the failure must be the same.
"""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.load.backends import OpenAIParser, ResponseParser, StreamFailure
from sglang_sentinel.load.openai_chunks import CHAT_CHUNK, COMPLETION_CHUNK
from sglang_sentinel.load.records import FailureReason, RequestRecord
from sglang_sentinel.load.sink import split_events

# What SGLang 0.5.9 (and `sentinel sim`) writes, byte for byte: chunks of `curl -N` output; the
# chat file ends with two in 0.5.23's usage shape (`completion_tokens_details`).
_FIXTURES = Path(__file__).parent / "fixtures"
SGLANG_CHAT = split_events((_FIXTURES / "sglang_openai_chunks_chat.sse").read_bytes())[0]
SGLANG_COMPLETION = split_events((_FIXTURES / "sglang_openai_chunks_completions.sse").read_bytes())[0]

TEXTS = [
    "", " word", "a", 'say "hi"', "back\\slash", "line\nbreak", "tab\t", "é", "日本語", "emoji 🙂",
    "\u2028", "\x7f", "</think>", "null", '","usage":{"completion_tokens":99}', "\\u0041",
]  # fmt: skip


def _usage(rng: random.Random, completion: int) -> Any:
    kind = rng.random()
    if kind < 0.15:
        return None
    usage: dict[str, Any] = {
        "prompt_tokens": rng.choice([0, 5, 256, 100000]),
        "total_tokens": 256 + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": rng.choice([None, None, {"cached_tokens": rng.choice([0, 7, 128])}]),
        "reasoning_tokens": rng.choice([0, 0, 1, completion]),
    }
    if kind > 0.9:
        usage.pop(rng.choice(list(usage)))  # a server that leaves a field out
    elif kind > 0.8:  # SGLang 0.5.23's (and OpenAI's) other place for the reasoning count
        detail = rng.choice([0, 2, completion])
        usage["completion_tokens_details"] = rng.choice([None, {"reasoning_tokens": detail}, {"x": 1}])
    return usage


def _choice(rng: random.Random, chat: bool) -> dict[str, Any]:
    fr = rng.choice([None] * 8 + ["stop", "length", "abort", "tool_calls"])
    text: Any = rng.choice(TEXTS)
    if chat:
        reasoning: Any = rng.choice([None, None, *TEXTS[:6]])
        if rng.random() < 0.3:
            text = None
        delta: dict[str, Any] = {
            "role": rng.choice([None, None, "assistant"]),
            "content": text,
            "reasoning_content": reasoning,
            "tool_calls": None,
        }
        choice: dict[str, Any] = {"index": 0, "delta": delta}
    else:
        choice = {"index": 0, "text": text}
    matched = rng.choice([None] * 6 + [2, "</s>"])
    choice.update({"logprobs": None, "finish_reason": fr, "matched_stop": matched})
    return choice


def _chunk(rng: random.Random, chat: bool, completion: int) -> bytes:
    obj: dict[str, Any] = {
        "id": rng.choice(["chatcmpl-1", "cmpl-ab", 'id"q', "ü"]),
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": 1796142830,
        "model": rng.choice(["x", "tiny-llama", "a/b"]),
        "choices": [_choice(rng, chat)],
        "usage": _usage(rng, completion),
    }
    r = rng.random()
    if r < 0.04:
        obj["choices"] = []  # the usage-only chunk
    elif r < 0.06:
        obj = {"error": {"message": "CUDA error", "code": 500}}
    elif r < 0.08:
        obj["choices"].append(_choice(rng, chat))  # n > 1
    elif r < 0.12:  # vLLM / OpenAI: extra fields, delta without its null fields
        obj["system_fingerprint"] = None
        obj["choices"][0]["stop_reason"] = None
        if chat:
            delta = obj["choices"][0]["delta"]
            obj["choices"][0]["delta"] = {k: v for k, v in delta.items() if v is not None}
    elif r < 0.14:
        obj["choices"][0]["index"] = 1
    elif r < 0.15:
        obj["sglext"] = {"routed_experts": None}
    style = rng.random()
    if style < 0.75:
        raw = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    elif style < 0.85:
        raw = json.dumps(obj, separators=(",", ":")).encode()  # \u escapes
    elif style < 0.92:
        raw = json.dumps(obj, ensure_ascii=False).encode()  # whitespace
    elif style < 0.95:  # bytes no valid JSON/UTF-8 has
        raw = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode().replace(b"word", b"w\xffrd")
    elif style < 0.97:
        raw = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
        raw = raw.replace(b'"completion_tokens":', b'"completion_tokens":0', 1)  # a leading zero
    else:
        raw = json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode().replace(b":", b":-", 1)
    return raw


def _outcome(parser: ResponseParser, payloads: list[bytes], fast: bool) -> tuple[Any, ...]:
    failure: str | None = None
    for i, payload in enumerate(payloads):
        try:
            if not fast:
                ResponseParser.feed_bytes(parser, payload, float(i))
            elif i % 3 == 2:  # an event that shared its read with another: the sink's other path
                parser.feed_bytes(payload, float(i))
            elif i % 3 == 1:  # a read of one event, as the sink hands it: take_event, else feed_event
                event = b"data: " + payload + b"\n\n"
                if not parser.take_event(event, float(i)):
                    parser.feed_event(event, float(i))
            else:
                parser.feed_event(b"data: " + payload + b"\n\n", float(i))
        except StreamFailure as exc:
            failure = f"{exc.reason}: {exc}"
            break
    parser.finish()
    rec = parser.rec
    return (
        failure, rec.chunk_times, rec.chunk_tokens, rec.itl, rec.ttft, rec.ttfc, rec.output_len,
        rec.prompt_tokens, rec.cached_tokens, rec.reasoning_tokens, rec.content_tokens, rec.finish_reason,
        rec.text, parser.tokens_seen, parser.finished,
    )  # fmt: skip


@pytest.mark.parametrize("chat", [True, False], ids=["chat", "completions"])
@pytest.mark.parametrize("keep_text", [True, False], ids=["text", "no-text"])
def test_fast_path_gives_the_full_decodes_figures(chat: bool, keep_text: bool) -> None:
    rng = random.Random(20 + chat + 2 * keep_text)
    pattern = CHAT_CHUNK if chat else COMPLETION_CHUNK
    matched = 0
    for _ in range(400):
        completion = 0
        payloads = []
        for _ in range(rng.randint(1, 12)):
            completion += rng.choice([0, 1, 1, 1, 2])
            payloads.append(_chunk(rng, chat, completion))
        matched += sum(pattern.fullmatch(p) is not None for p in payloads)
        fast = OpenAIParser(RequestRecord(0, False, 0.0), keep_text, chat=chat)
        full = OpenAIParser(RequestRecord(0, False, 0.0), keep_text, chat=chat)
        assert _outcome(fast, payloads, True) == _outcome(full, payloads, False), payloads
    # The fast path must really have been taken, on a good share of the ~2,600 events (the rest
    # carry the variations above): the comparison is not vacuous.
    assert matched > 250


@pytest.mark.parametrize(
    ("chat", "payloads"), [(True, SGLANG_CHAT), (False, SGLANG_COMPLETION)], ids=["chat", "completions"]
)
def test_sglang_chunks_take_the_fast_path(chat: bool, payloads: list[bytes]) -> None:
    pattern = CHAT_CHUNK if chat else COMPLETION_CHUNK
    assert all(pattern.fullmatch(p) for p in payloads)
    fast = OpenAIParser(RequestRecord(0, False, 0.0), True, chat=chat)
    full = OpenAIParser(RequestRecord(0, False, 0.0), True, chat=chat)
    assert _outcome(fast, payloads, True) == _outcome(full, payloads, False)


def test_a_text_with_escapes_or_an_error_is_decoded_in_full() -> None:
    escaped = SGLANG_CHAT[1].replace(b'" Sure"', b'"say \\"hi\\" \\u00e9"')
    assert CHAT_CHUNK.fullmatch(escaped) is None
    parser = OpenAIParser(RequestRecord(0, False, 0.0), True, chat=True)
    parser.feed_event(b"data: " + escaped + b"\n\n", 0.5)
    parser.finish()
    assert parser.rec.text == 'say "hi" é'
    assert parser.rec.chunk_tokens == [1]
    error = b'{"error":{"message":"CUDA error","code":500}}'
    with pytest.raises(StreamFailure) as caught:
        parser.feed_event(b"data: " + error + b"\n\n", 0.6)
    assert caught.value.reason == FailureReason.ERROR_CHUNK
    broken = SGLANG_CHAT[1].replace(b"Sure", b"S\xffre")
    assert CHAT_CHUNK.fullmatch(broken) is not None  # the shape matches; the bytes are not UTF-8
    lean = OpenAIParser(RequestRecord(0, False, 0.0), False, chat=True)
    with pytest.raises(StreamFailure) as caught:
        lean.feed_event(b"data: " + broken + b"\n\n", 0.0)
    assert caught.value.reason == FailureReason.MALFORMED


def _usage_chunk(usage: dict[str, Any]) -> bytes:
    """A chat chunk in SGLang's exact shape (so the fast path takes it) with `usage`."""
    obj = {
        "id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 1796142830, "model": "x",
        "choices": [{
            "index": 0,
            "delta": {"role": None, "content": " word", "reasoning_content": None, "tool_calls": None},
            "logprobs": None, "finish_reason": None, "matched_stop": None,
        }],
        "usage": usage,
    }  # fmt: skip
    return json.dumps(obj, separators=(",", ":")).encode()


@pytest.mark.parametrize(
    ("detail", "top", "expected"),
    [
        ({"reasoning_tokens": 3}, 3, 3),  # SGLang 0.5.23: both places, equal
        ({"reasoning_tokens": 3}, 0, 3),  # OpenAI's location is read first
        (None, 2, 2),  # 0.5.23 with no details; 0.5.9 has the top-level field only
    ],
)
def test_both_paths_read_the_reasoning_count_from_completion_tokens_details(
    detail: dict[str, int] | None, top: int, expected: int
) -> None:
    usage = {
        "prompt_tokens": 5, "total_tokens": 9, "completion_tokens": 4, "prompt_tokens_details": None,
        "reasoning_tokens": top, "completion_tokens_details": detail,
    }  # fmt: skip
    payloads = [_usage_chunk(usage)]
    assert CHAT_CHUNK.fullmatch(payloads[0]) is not None  # the fast path really reads it
    fast = OpenAIParser(RequestRecord(0, False, 0.0), False, chat=True)
    full = OpenAIParser(RequestRecord(0, False, 0.0), False, chat=True)
    assert _outcome(fast, payloads, True) == _outcome(full, payloads, False)
    assert (fast.rec.reasoning_tokens, fast.rec.content_tokens) == (expected, 4 - expected)


def test_the_full_decode_reads_openais_reasoning_count() -> None:
    # vLLM / OpenAI: no top-level reasoning_tokens, the count in completion_tokens_details only.
    usage = {
        "prompt_tokens": 5,
        "total_tokens": 9,
        "completion_tokens": 4,
        "completion_tokens_details": {"reasoning_tokens": 3},
    }
    payload = _usage_chunk(usage).replace(b'"tool_calls":null', b'"tool_calls":[]')
    assert CHAT_CHUNK.fullmatch(payload) is None
    parser = OpenAIParser(RequestRecord(0, False, 0.0), False, chat=True)
    parser.feed_event(b"data: " + payload + b"\n\n", 0.1)
    parser.finish()
    assert (parser.rec.reasoning_tokens, parser.rec.content_tokens, parser.rec.output_len) == (3, 1, 4)
