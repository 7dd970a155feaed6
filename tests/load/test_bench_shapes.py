"""`sentinel bench` run shapes: ramps (several --request-rate / --max-concurrency values) and
multi-turn conversations (--gsp-num-turns), end to end on `sentinel sim` and on the fake server."""

from __future__ import annotations

import argparse
import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.cli import build_parser, main
from sglang_sentinel.cli.bench import build_spec
from sglang_sentinel.cli.bench_ramp import ramp_steps
from sglang_sentinel.cli.common import CliError
from support.peaks import guaranteed_peak


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


async def _bench(*argv: str) -> int:
    return await asyncio.to_thread(main, ["bench", "--log-level", "error", "--disable-tqdm", *argv])


def _small(base_url: str) -> list[str]:
    return [
        "--base-url", base_url, "--num-prompts", "4", "--random-input-len", "16",
        "--random-output-len", "6", "--random-range-ratio", "1",
    ]  # fmt: skip


# ---- ramps ----


def test_one_value_is_a_plain_run() -> None:
    args = _args("--request-rate", "4", "--max-concurrency", "2")
    assert ramp_steps(args) == []
    spec = build_spec(args)
    assert spec.request_rate == 4.0
    assert spec.max_concurrency == 2


def test_ramp_steps_vary_one_thing_warm_up_once_and_draw_fresh_prompts() -> None:
    steps = ramp_steps(_args("--request-rate", "1", "2", "4", "--seed", "7", "--warmup-requests", "3"))
    assert [label for label, _ in steps] == ["--request-rate 1", "--request-rate 2", "--request-rate 4"]
    specs = [build_spec(ns) for _, ns in steps]
    assert [s.request_rate for s in specs] == [1.0, 2.0, 4.0]
    assert [s.warmup_requests for s in specs] == [3, 0, 0]
    assert [s.seed for s in specs] == [7, 8, 9]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--request-rate", "1", "2", "--max-concurrency", "1", "2"], "not both"),
        # Every step is checked (by the parser, naming the flag) before the first runs.
        (["--request-rate", "1", "0"], "argument --request-rate: must be > 0, got 0"),
    ],
)
async def test_bad_ramps_exit_2(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    code: int | str | None
    try:
        code = await _bench("--base-url", "http://127.0.0.1:9", *argv)
    except SystemExit as exc:  # argparse's own exit 2 for a flag's value
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert message in err
    assert "cannot reach" not in err


@pytest.mark.slow
async def test_rate_ramp_on_the_sim_prints_a_block_per_step_and_a_summary(
    sim_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("--skip-server-warmup")
    out = tmp_path / "res.jsonl"
    csv = tmp_path / "req.csv"
    argv = [*_small(sim.base_url), "--request-rate", "50", "100", "--output-file", str(out), "--tag", "r"]
    assert await _bench(*argv, "--output-csv", str(csv)) == 0
    # One CSV per step, each with its own step's requests (header + 4 rows).
    assert not csv.exists()
    for step in (1, 2):
        assert len((tmp_path / f"req-step{step}.csv").read_text().splitlines()) == 5
    text = capsys.readouterr().out
    assert text.count(" Serving Benchmark Result ") == 2
    first, second = (
        text.index("Ramp step 1/2: --request-rate 50"),
        text.index("Ramp step 2/2: --request-rate 100"),
    )
    assert first < text.index(" Serving Benchmark Result ") < second
    assert "{:<40} {:<10}".format("Traffic request rate:", 100.0) in text[second:]
    summary = text[text.index(" Ramp Summary ") :]
    rows = [line.split() for line in summary.splitlines()[2:] if line[:1].isdigit()]
    assert [r[:4] for r in rows] == [["1", "--request-rate", "50", "4"], ["2", "--request-rate", "100", "4"]]
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [(x["ramp_step"], x["request_rate"], x["completed"], x["tag"]) for x in lines] == [
        (1, 50.0, 4, "r"),
        (2, 100.0, 4, "r"),
    ]
    assert [x["warmup_requests"] for x in lines] == [1, 0]
    measured = [r for r in sim.control("/requests")["requests"] if "-w" not in r["rid"]]
    assert len(measured) == 8


@pytest.mark.slow
async def test_concurrency_ramp_on_the_sim(
    sim_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("--skip-server-warmup")
    out = tmp_path / "res.jsonl"
    argv = [
        *_small(sim.base_url),
        "--max-concurrency",
        "1",
        "3",
        "--output-file",
        str(out),
        "--output-details",
    ]
    assert await _bench(*argv) == 0
    text = capsys.readouterr().out
    assert "Ramp step 2/2: --max-concurrency 3" in text
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert [x["max_concurrency"] for x in lines] == [1, 3]
    for x in lines:  # each step's cap reached (3 on an idle box) and never passed
        spans = [
            (t, t + e2e if e2e is not None else None)
            for t, e2e in zip(x["start_times"], x["e2e_latencies"], strict=True)
        ]
        assert guaranteed_peak(spans, x["max_concurrency"]) <= x["peak_in_flight"] <= x["max_concurrency"], x


async def test_a_failed_step_ends_the_ramp(capsys: pytest.CaptureFixture[str]) -> None:
    argv = [*_small("http://127.0.0.1:9"), "--request-rate", "50", "100", "--ready-check-timeout-sec", "0"]
    assert await _bench(*argv) == 1
    captured = capsys.readouterr()
    assert "Ramp step 1/2" in captured.out
    assert "Ramp step 2/2" not in captured.out
    assert "cannot reach the server" in captured.err


# ---- multi-turn ----

_GSP = [
    "--backend", "sglang-oai-chat", "--dataset-name", "generated-shared-prefix",
    "--gsp-system-prompt-len", "24", "--gsp-question-len", "6", "--gsp-output-len", "5",
]  # fmt: skip


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dataset-name", "generated-shared-prefix", "--gsp-num-turns", "2"], "need the chat backend"),
        (["--gsp-num-turns", "2"], "--gsp-num-turns needs --dataset-name generated-shared-prefix"),
        (
            [*_GSP, "--gsp-num-turns", "2", "--tokenize-prompt"],
            "--tokenize-prompt requires --gsp-num-turns=1",
        ),
    ],
)
def test_multi_turn_usage_errors(argv: list[str], message: str) -> None:
    with pytest.raises(CliError) as exc:
        build_spec(_args(*argv))
    assert exc.value.exit_code == 2
    assert message in str(exc.value)


def test_zero_turns_is_refused_by_the_parser_naming_the_flag(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        _args(*_GSP, "--gsp-num-turns", "0")
    assert exc.value.code == 2
    assert "argument --gsp-num-turns: must be >= 1, got 0" in capsys.readouterr().err


async def test_turns_carry_the_real_replies_and_hold_the_slot(
    fake_sglang: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = await fake_sglang(token_delay=0.001)
    argv = [
        "--base-url", fake.base_url, *_GSP, "--gsp-num-turns", "3", "--num-prompts", "2",
        "--max-concurrency", "1", "--warmup-requests", "0",
    ]  # fmt: skip
    assert await _bench(*argv) == 0
    bodies = [b for b in fake.requests if "messages" in b]
    assert [len(b["messages"]) for b in bodies] == [1, 3, 5, 1, 3, 5]  # one slot: conversations in turn
    for conv in (bodies[:3], bodies[3:]):
        first, second, third = (b["messages"] for b in conv)
        assert first[0]["content"].count("\n\n") == 1  # "<system prompt>\n\n<question>", as bench_serving
        assert second[:1] == first  # the history grows, never rewritten
        assert third[:3] == second
        assert second[1] == {"role": "assistant", "content": " tok" * 5}  # the fake's real reply
        assert [m["role"] for m in third] == ["user", "assistant", "user", "assistant", "user"]
    assert (
        bodies[0]["messages"][0]["content"].split("\n\n")[0]
        == bodies[3]["messages"][0]["content"].split("\n\n")[0]
    )
    assert len({b["rid"] for b in bodies}) == 6
    out = capsys.readouterr().out
    assert "{:<40} {:<10}".format("Successful requests:", 6) in out
    assert "Turn 3 (ok, TTFT/E2E ms, cached/prompt):" in out


@pytest.mark.slow
async def test_multi_turn_on_the_sim(
    sim_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("--skip-server-warmup")
    out = tmp_path / "res.jsonl"
    argv = [
        "--base-url", sim.base_url, *_GSP, "--gsp-num-turns", "3", "--num-prompts", "3",
        "--max-concurrency", "2", "--output-file", str(out),
    ]  # fmt: skip
    assert await _bench(*argv) == 0
    text = capsys.readouterr().out
    assert "{:<40} {:<10}".format("Successful requests:", 9) in text
    turn_rows = [line for line in text.splitlines() if line.startswith("Turn ")]
    assert [row.split()[1] for row in turn_rows] == ["1", "2", "3"]
    res = json.loads(out.read_text())
    assert res["completed"] == 9
    assert res["peak_in_flight"] <= 2
    assert [(t["turn"], t["completed"]) for t in res["per_turn"]] == [(1, 3), (2, 3), (3, 3)]
    prompt_tokens = [t["prompt_tokens"] for t in res["per_turn"]]
    assert prompt_tokens == sorted(prompt_tokens)
    assert len(set(prompt_tokens)) == 3
    truth = [r for r in sim.control("/requests")["requests"] if "-w" not in r["rid"]]
    assert len(truth) == 9
    # Each later turn's prompt holds the earlier ones: the server saw them grow.
    by_rid = {r["rid"]: r["prompt_tokens"] for r in truth}
    firsts = sorted(rid for rid in by_rid if int(rid.rsplit("-", 1)[1]) % 3 == 0)
    for rid in firsts:
        stem, k = rid.rsplit("-", 1)
        lens = [by_rid[f"{stem}-{int(k) + t}"] for t in range(3)]
        assert lens[0] < lens[1] < lens[2]
