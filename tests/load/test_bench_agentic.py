"""`sentinel bench --dataset-name agentic-trace`: bench_serving 0.5.23's multi-turn trace replay
(`datasets/agentic_trace.py`, `wrap_multi_turn_request_func`), traces written in tmp_path."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.cli import build_parser, main
from sglang_sentinel.cli.bench import build_spec
from sglang_sentinel.cli.common import CliError
from sglang_sentinel.load.agentic import load_agentic, summary_lines
from sglang_sentinel.load.spec import AgenticTraceDataset, SpecError

SYSTEM = {"role": "system", "content": "You are an agent."}


def _conv(name: str, rounds: int) -> list[dict[str, Any]]:
    first = {"messages": [SYSTEM, {"role": "user", "content": f"{name} task"}], "prompt_tokens": 40}
    later = [
        {"messages": [{"role": "tool", "content": f"{name} result {k}", "tool_call_id": f"c{k}"}]}
        for k in range(2, rounds + 1)
    ]
    return [first, *later]


def _trace(tmp_path: Path, conversations: list[Any]) -> Path:
    path = tmp_path / "trace.json"
    path.write_text(json.dumps({"metadata": {}, "conversations": conversations}), encoding="utf-8")
    return path


def _last(content: object) -> object:
    assert isinstance(content, list)
    assert isinstance(content[-1], dict)
    return content[-1]["content"]


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


def _chat(path: Path, *argv: str) -> list[str]:
    return [
        "--backend", "sglang-oai-chat", "--dataset-name", "agentic-trace", "--dataset-path", str(path), *argv,
    ]  # fmt: skip


async def _bench(*argv: str) -> int:
    return await asyncio.to_thread(main, ["bench", "--log-level", "error", "--disable-tqdm", *argv])


def test_flags_reach_the_spec(tmp_path: Path) -> None:
    path = _trace(tmp_path, [_conv("a", 3), _conv("b", 2), _conv("c", 1)])
    spec = build_spec(_args(*_chat(path)))
    # bench_serving's defaults: 1000 conversations, 220 tokens per turn.
    assert spec.dataset == AgenticTraceDataset(path, max_conversations=1000, output_len=220)
    assert spec.num_requests == 3  # conversations; their rounds are the requests
    assert spec.multi_turn
    spec = build_spec(
        _args(*_chat(path, "--dataset-offset", "4", "--agentic-max-turns", "2", "--sharegpt-output-len", "9"))
    )
    assert spec.dataset == AgenticTraceDataset(path, 1000, output_len=9, offset=4, max_turns=2)
    assert build_spec(_args(*_chat(path, "--num-prompts", "2"))).num_requests == 2
    assert build_spec(_args(*_chat(path, "--num-prompts", "0"))).num_requests == 3  # <= 0: all, as there


def test_rotation_caps_and_skips_as_bench_serving(tmp_path: Path) -> None:
    empty = [{"messages": []}, {"prompt_tokens": 3}]  # no message: skipped
    holes = [{"messages": [{"role": "user", "content": "q1"}]}, {"messages": []}, {"messages": "q2"}]
    path = _trace(tmp_path, [_conv("a", 3), empty, holes, _conv("d", 4)])
    prompts, offset = load_agentic(AgenticTraceDataset(path, offset=6))
    assert offset == 2  # 6 % 4
    assert [_last(p.content) for p in prompts] == ["q1", "d task", "a task"]
    # A turn without messages is no round; a string round is one user message.
    assert prompts[0].turns == ([{"role": "user", "content": "q2"}],)
    # Only role and content go out (bench_serving's _normalize_round_messages).
    assert prompts[1].turns[0] == [{"role": "tool", "content": "d result 2"}]
    assert [len(p.turns) + 1 for p in prompts] == [2, 4, 3]
    assert summary_lines(prompts, offset, 220) == [
        "#Conversations: 3 (offset=2, turns/conv min=2 max=4 avg=3.0)",
        "#Output tokens per turn: 220",
    ]
    capped, _ = load_agentic(AgenticTraceDataset(path, max_conversations=2, max_turns=2))
    assert [len(p.turns) + 1 for p in capped] == [2, 2]


@pytest.mark.parametrize(
    ("conversations", "argv", "message"),
    [
        ([], [], "non-empty 'conversations' list"),
        ([[{"messages": [{"role": "user"}]}]], [], "conversations[0][0]: 'messages' must be"),
        ([[{"messages": []}]], [], "No usable conversations loaded"),
        ([["turn"]], [], "conversations[0]: expected a list of turn objects"),
        ([[{"messages": "q", "prompt_tokens": -1}]], [], "'prompt_tokens' must be an integer >= 0"),
        ([_conv("a", 2)], ["--backend", "sglang"], "need the chat backend"),
    ],
)
def test_bad_traces_and_usage_exit_2(
    tmp_path: Path, conversations: list[Any], argv: list[str], message: str
) -> None:
    path = _trace(tmp_path, conversations)
    with pytest.raises((CliError, SpecError)) as exc:
        build_spec(_args(*_chat(path), *argv))
    if isinstance(exc.value, CliError):
        assert exc.value.exit_code == 2
    assert message in str(exc.value)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dataset-name", "agentic-trace"], "needs --dataset-path"),
        (["--dataset-offset", "2"], "--dataset-offset needs --dataset-name agentic-trace"),
        (["--agentic-max-turns", "2"], "--agentic-max-turns needs --dataset-name agentic-trace"),
    ],
)
def test_flags_outside_agentic_trace_exit_2(argv: list[str], message: str) -> None:
    with pytest.raises(CliError) as exc:
        build_spec(_args(*argv))
    assert exc.value.exit_code == 2
    assert message in str(exc.value)


async def test_rounds_carry_the_real_replies(
    fake_sglang: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = await fake_sglang(token_delay=0.001)
    path = _trace(tmp_path, [_conv("a", 3), _conv("b", 2)])
    argv = _chat(path, "--base-url", fake.base_url, "--max-concurrency", "1", "--warmup-requests", "0")
    res = tmp_path / "res.jsonl"
    assert (
        await _bench(*argv, "--dataset-offset", "1", "--sharegpt-output-len", "5", "--output-file", str(res))
        == 0
    )
    bodies = [b["messages"] for b in fake.requests]
    assert [len(m) for m in bodies] == [2, 4, 2, 4, 6]  # offset 1: b first; one slot, in turn
    reply = {"role": "assistant", "content": " tok" * 5}  # the fake's real reply
    tool = {"role": "tool", "content": "b result 2"}
    assert bodies[1] == [SYSTEM, {"role": "user", "content": "b task"}, reply, tool]
    assert bodies[4][:4] == bodies[3]  # the history grows, never rewritten
    assert bodies[4][4:] == [reply, {"role": "tool", "content": "a result 3"}]
    assert all(b["max_completion_tokens"] == 5 for b in fake.requests)
    assert len({b["rid"] for b in fake.requests}) == 5
    out = capsys.readouterr().out
    assert out.startswith(
        "#Conversations: 2 (offset=1, turns/conv min=2 max=3 avg=2.5)\n#Output tokens per turn: 5\n"
    )
    assert "{:<40} {:<10}".format("Successful requests:", 5) in out
    # Each round's input is the server's prompt_tokens, as bench_serving's multi-turn figures.
    total = sum(sum(len(str(m["content"]).split()) for m in b) for b in bodies)
    assert "{:<40} {:<10}".format("Total input tokens:", total) in out
    assert "Turn 3 (ok, TTFT/E2E ms, cached/prompt): 1," in out
    record = json.loads(res.read_text(encoding="utf-8"))
    assert (record["dataset_name"], record["dataset_offset"], record["sharegpt_output_len"]) == (
        "agentic-trace",
        1,
        5,
    )
    assert record["completed"] == 5
    assert [(t["turn"], t["completed"]) for t in record["per_turn"]] == [(1, 2), (2, 2), (3, 1)]


async def test_default_output_is_220_per_turn_and_warm_up_sends_a_first_round(
    fake_sglang: Any, tmp_path: Path
) -> None:
    fake = await fake_sglang()
    path = _trace(tmp_path, [_conv("a", 2)])
    assert await _bench(*_chat(path, "--base-url", fake.base_url)) == 0
    warm, *measured = fake.requests
    assert "-w" in warm["rid"]
    assert warm["max_completion_tokens"] == 32  # bench_serving's warm-up cap
    assert warm["messages"] == measured[0]["messages"]  # copies of the first request, as there
    assert [b["max_completion_tokens"] for b in measured] == [220, 220]


def test_ramp_steps_move_on_to_fresh_conversations(tmp_path: Path) -> None:
    from sglang_sentinel.cli.bench_ramp import ramp_steps

    path = _trace(tmp_path, [_conv(name, 2) for name in "abcdef"])
    steps = ramp_steps(
        _args(*_chat(path, "--num-prompts", "2", "--dataset-offset", "1", "--request-rate", "1", "2", "4"))
    )
    specs = [build_spec(ns) for _, ns in steps]
    offsets = [s.dataset.offset for s in specs if isinstance(s.dataset, AgenticTraceDataset)]
    assert offsets == [1, 3, 5]
    firsts = [
        load_agentic(s.dataset)[0][0].content for s in specs if isinstance(s.dataset, AgenticTraceDataset)
    ]
    assert [_last(c) for c in firsts] == ["b task", "d task", "f task"]
