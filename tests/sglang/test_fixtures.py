"""The wire-format oracles are internally consistent (they are what other tests compare against)."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

FIXTURES = Path(__file__).with_name("fixtures")


def load(name: str) -> dict[str, Any]:
    value = json.loads((FIXTURES / name).read_text())
    assert isinstance(value, dict)
    return value


def payloads(events: list[str]) -> list[dict[str, Any]]:
    assert events[-1] == "data: [DONE]\n\n"
    out = []
    for event in events[:-1]:
        assert event.startswith("data: ")
        assert event.endswith("\n\n")
        out.append(json.loads(event[len("data: ") : -2]))
    return out


@pytest.mark.parametrize("path", sorted(FIXTURES.glob("*.json")), ids=lambda p: p.name)
def test_every_stream_fixture_is_well_formed_sse(path: Path) -> None:
    value = json.loads(path.read_text())
    if "events" in value:
        assert payloads(value["events"])


def test_generate_stream_is_cumulative() -> None:
    chunks = payloads(load("generate_stream.json")["events"])
    texts = [c["text"] for c in chunks]
    assert all(b.startswith(a) for a, b in itertools.pairwise(texts))
    assert [c["meta_info"]["completion_tokens"] for c in chunks] == [1, 2]
    assert [c["meta_info"]["finish_reason"] for c in chunks] == [None, {"type": "length", "length": 2}]
    assert "e2e_latency" not in chunks[0]["meta_info"]
    assert "e2e_latency" in chunks[-1]["meta_info"]
    assert load("generate_nonstream.json")["response"] == chunks[-1]


def test_chat_thinking_stream_splits_reasoning_from_content() -> None:
    fixture = load("chat_stream_thinking.json")
    chunks = payloads(fixture["events"])
    deltas = [c["choices"][0]["delta"] for c in chunks]
    assert deltas[0] == {"role": "assistant", "content": "", "reasoning_content": None, "tool_calls": None}
    reasoning = "".join(d["reasoning_content"] or "" for d in deltas)
    content = "".join(d["content"] or "" for d in deltas)
    full = fixture["generate_outputs"][-1]["text"]
    assert full == reasoning + "</think>" + content
    # One generate output per token, but the "</think>" token yields no chunk.
    assert len(chunks) == 1 + (len(fixture["generate_outputs"]) - 1) + 1
    assert chunks[-1]["choices"][0]["finish_reason"] == "length"
    assert all(c["usage"] is None for c in chunks)


def test_chat_usage_chunk_has_no_choices() -> None:
    chunks = payloads(load("chat_stream_no_thinking_usage.json")["events"])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["completion_tokens"] == 2
    assert all(c["choices"][0]["delta"]["reasoning_content"] is None for c in chunks[:-1])


def test_budget_in_thinking_gives_null_content() -> None:
    message = load("chat_nonstream_budget_in_thinking.json")["response"]["choices"][0]["message"]
    assert message["content"] is None
    assert message["reasoning_content"]
