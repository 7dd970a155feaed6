"""`sentinel bench` trace replay (`--dataset-name mooncake`) and the client tokenizer (`--tokenizer`).

End to end against `sentinel sim` (subprocess, --speed 100); the tokenizer is a small byte-level
BPE trained here with the `tokenizers` library, the recipe of `benchmarks/peer_tokenizer.py`
(the dev extra installs it; tests that need it skip, saying so, where it is absent).
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.cli import build_parser, main
from sglang_sentinel.cli.bench import build_spec
from sglang_sentinel.cli.common import CliError
from sglang_sentinel.load.datasets import PromptSource
from sglang_sentinel.load.spec import ArrivalProcess, MooncakeDataset
from sglang_sentinel.load.tokenizer import load_tokenizer
from sglang_sentinel.load.trace import load_mooncake, mooncake_prompts

HAVE_TOKENIZERS = importlib.util.find_spec("tokenizers") is not None
needs_tokenizers = pytest.mark.skipif(
    not HAVE_TOKENIZERS, reason="the tokenizers library is not installed (pip install -e '.[dev]')"
)

TRACE = [
    {"timestamp": 1000, "input_length": 655, "output_length": 12, "hash_ids": [46, 47]},
    {"timestamp": 1300, "input_length": 672, "output_length": 8, "hash_ids": [46, 47, 48]},
    {"timestamp": 1150, "input_length": 100, "output_length": 10, "hash_ids": [1]},
]


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


async def _bench(*argv: str) -> int:
    return await asyncio.to_thread(main, ["bench", "--log-level", "error", "--disable-tqdm", *argv])


def _write_trace(path: Path, rows: list[Any]) -> Path:
    path.write_text("".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows))
    return path


@pytest.fixture(scope="module")
def tokenizer_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not HAVE_TOKENIZERS:
        pytest.skip("the tokenizers library is not installed (pip install -e '.[dev]')")
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=["<|endoftext|>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    corpus = Path(__file__).read_text(encoding="utf-8")  # any stable text will do
    tok.train_from_iterator([corpus] * 4, trainer=trainer)
    out = tmp_path_factory.mktemp("tok")
    tok.save(str(out / "tokenizer.json"))
    return out


# ---- the trace format and its replay plan ----


def test_sessions_sorted_scaled_and_cut_to_num_prompts(tmp_path: Path) -> None:
    path = _write_trace(tmp_path / "t.jsonl", TRACE)
    sessions = load_mooncake(MooncakeDataset(path, slowdown_factor=2.0))
    assert [s.line for s in sessions] == [1, 3, 2]  # by timestamp
    assert [s.offset for s in sessions] == pytest.approx([0.0, 0.3, 0.6])  # ms -> s, x2
    assert [s.output_len for s in sessions] == [12, 10, 8]
    # bench_serving keeps the first --num-prompts lines of the file, then sorts them.
    assert [s.line for s in load_mooncake(MooncakeDataset(path, max_sessions=2))] == [1, 2]


def test_rounds_carry_the_history_and_hash_ids_share_prefixes(tmp_path: Path) -> None:
    sessions = load_mooncake(MooncakeDataset(_write_trace(tmp_path / "t.jsonl", TRACE)))
    first, _, third = sessions
    r1, r2 = mooncake_prompts(first, 2)
    assert r1.startswith("user: Round 1: 46hi hi")
    assert r2.startswith(r1 + "\nassistant: story story")  # round 2 holds round 1 and a placeholder
    assert r2.endswith("\nuser: Round 2: " + r1.removeprefix("user: Round 1: "))
    assert r2.count("story") == 12 + 2  # one per output token, and each round's own "a story"
    # Lines 1 and 2 share hash ids 46 and 47: their prompts share those two blocks.
    other = mooncake_prompts(third, 1)[0]
    n = next(i for i, (a, b) in enumerate(zip(r1, other, strict=False)) if a != b)
    assert r1[:n].count("hi") == 2 * 128
    assert r1[:n].endswith("hi")


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{not json", "not JSON"),
        ('["a list"]', "expected a JSON object"),
        ('{"hash_ids": [1], "output_length": 4}', "'timestamp' (ms) must be a number >= 0"),
        ('{"timestamp": "soon", "output_length": 4}', "'timestamp' (ms) must be a number >= 0"),
        ('{"timestamp": 5, "hash_ids": "1,2"}', "'hash_ids' must be a list of integers"),
        ('{"timestamp": 5, "output_length": 0}', "'output_length' must be an integer >= 1"),
        ('{"timestamp": 5, "input_length": -3}', "'input_length' must be an integer >= 0"),
    ],
)
async def test_malformed_trace_line_exits_2_naming_file_and_line(
    tmp_path: Path, line: str, message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _write_trace(tmp_path / "bad.jsonl", [TRACE[0], line])
    # Nothing listens on port 9: the error must come before any request.
    argv = ["--base-url", "http://127.0.0.1:9", "--dataset-name", "mooncake", "--dataset-path", str(path)]
    assert await _bench(*argv) == 2
    err = capsys.readouterr().err
    assert f"{path}:2: {message}" in err
    assert "cannot reach" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--dataset-name", "mooncake"], "needs --dataset-path"),
        (
            ["--dataset-name", "mooncake", "--dataset-path", "TRACE", "--backend", "sglang-oai"],
            "--backend sglang",
        ),
        (["--dataset-name", "mooncake", "--dataset-path", "TRACE", "--arrival", "constant"], "--arrival"),
        (["--dataset-name", "mooncake", "--dataset-path", "/nonexistent.jsonl"], "dataset file not found"),
        (["--use-trace-timestamps"], "--use-trace-timestamps needs --dataset-name mooncake"),
        # --mooncake-num-rounds 0, --mooncake-slowdown-factor -1: refused by the parser (test_config.py).
    ],
)
def test_trace_usage_errors(tmp_path: Path, argv: list[str], message: str) -> None:
    trace = str(_write_trace(tmp_path / "t.jsonl", TRACE))
    with pytest.raises(CliError) as exc:
        build_spec(_args(*[trace if a == "TRACE" else a for a in argv]))
    assert exc.value.exit_code == 2
    assert message in str(exc.value)


def test_trace_spec_counts_sessions_times_rounds(tmp_path: Path) -> None:
    path = _write_trace(tmp_path / "t.jsonl", TRACE)
    spec = build_spec(
        _args("--dataset-name", "mooncake", "--dataset-path", str(path), "--mooncake-num-rounds", "3")
    )
    assert spec.arrival is ArrivalProcess.TRACE
    assert spec.num_requests == 9


# ---- end to end on the simulator ----


@pytest.mark.slow
async def test_trace_replays_on_the_sim(
    sim_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("--skip-server-warmup")
    path = _write_trace(tmp_path / "t.jsonl", TRACE)
    out = tmp_path / "res.jsonl"
    argv = [
        "--base-url", sim.base_url, "--dataset-name", "mooncake", "--dataset-path", str(path),
        "--mooncake-num-rounds", "2", "--mooncake-slowdown-factor", "0.5", "--request-rate", "7",
        "--output-file", str(out), "--output-details",
    ]  # fmt: skip
    assert await _bench(*argv) == 0
    captured = capsys.readouterr()
    assert "{:<40} {:<10}".format("Traffic request rate:", "trace") in captured.out
    assert "{:<40} {:<10}".format("Successful requests:", 6) in captured.out
    assert "--request-rate is ignored with --dataset-name mooncake" in captured.err
    res = json.loads(out.read_text())
    assert res["request_rate"] == "trace"
    assert res["dataset_name"] == "mooncake"
    planned = [t - res["started_at"] for t in res["planned_times"]]
    # Both rounds of a session at its time, (ts - ts0) / 1000 * 0.5.
    assert sorted(planned) == pytest.approx([0.0, 0.0, 0.075, 0.075, 0.15, 0.15], abs=1e-6)
    truth = [r for r in sim.control("/requests")["requests"] if "-w" not in r["rid"]]
    assert sorted(r["completion_tokens"] for r in truth) == [8, 8, 10, 10, 12, 12]
    # Round 2 holds round 1 and its placeholder reply: a longer prompt in the same session.
    for t in (0.0, 0.075, 0.15):
        pair = sorted(n for p, n in zip(planned, res["input_lens"], strict=True) if abs(p - t) < 1e-6)
        assert pair[1] > pair[0] + 12


# ---- the client tokenizer ----


def test_tokenizer_missing_library_is_exit_2_with_the_install_command(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "tokenizer.json").write_text("{}")
    monkeypatch.setitem(sys.modules, "tokenizers", None)  # import fails as if not installed
    load_tokenizer.cache_clear()
    try:
        with pytest.raises(CliError) as exc:
            build_spec(_args("--tokenizer", str(tmp_path)))
    finally:
        load_tokenizer.cache_clear()
    assert exc.value.exit_code == 2
    assert "--tokenizer needs the tokenizers library" in str(exc.value)
    assert "pip install 'sglang-sentinel[tokenizer]'" in str(exc.value)


def test_tokenizer_hub_name_is_refused_not_downloaded() -> None:
    with pytest.raises(CliError) as exc:
        build_spec(_args("--tokenizer", "meta-llama/Llama-3.1-8B-Instruct"))
    assert exc.value.exit_code == 2
    assert "downloads nothing" in str(exc.value)


@needs_tokenizers
def test_tokenizer_file_that_is_not_one(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_text('{"not": "a tokenizer"}')
    with pytest.raises(CliError) as exc:
        build_spec(_args("--tokenizer", str(tmp_path / "tokenizer.json")))
    assert "not a tokenizers file" in str(exc.value)


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["sglang", "sglang-oai-chat"])
async def test_retokenized_output_on_the_sim(
    sim_factory: Any, tmp_path: Path, tokenizer_dir: Path, backend: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from tokenizers import Tokenizer

    sim = sim_factory("--skip-server-warmup")
    out = tmp_path / "res.jsonl"
    argv = [
        "--base-url", sim.base_url, "--backend", backend, "--num-prompts", "4", "--random-input-len", "16",
        "--random-output-len", "12", "--random-range-ratio", "1", "--tokenizer", str(tokenizer_dir),
        "--output-file", str(out), "--output-details",
    ]  # fmt: skip
    assert await _bench(*argv) == 0
    res = json.loads(out.read_text())
    tok = Tokenizer.from_file(str(tokenizer_dir / "tokenizer.json"))
    texts = res["generated_texts"]
    assert all(texts)  # chat: the sim's reasoning text counts, as bench_serving's generated_text
    expected = sum(len(tok.encode(t, add_special_tokens=False).ids) for t in texts)
    assert res["total_output_tokens_retokenized"] == expected
    assert expected != res["total_output_tokens"]  # a different vocabulary: a real cross-check
    row = "{:<40} {:<10}".format("Total generated tokens (retokenized):", expected)
    assert row in capsys.readouterr().out


@needs_tokenizers
def test_tokenizer_counts_sharegpt_and_context_len_prunes(tmp_path: Path, tokenizer_dir: Path) -> None:
    pairs = [("short question here", "an answer, fine"), ("word " * 300, "a reply")]
    data = [{"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": a}]} for q, a in pairs]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data))
    tok = load_tokenizer(tokenizer_dir)
    base = ["--dataset-name", "sharegpt", "--dataset-path", str(path), "--tokenizer", str(tokenizer_dir)]
    spec = build_spec(_args(*base))
    prompts = PromptSource(spec)._file
    assert prompts is not None
    assert len(prompts) == 2
    for p in prompts:
        assert isinstance(p.content, str)
        assert p.prompt_len == tok.count_prompt(p.content) > 0  # counted, as bench_serving
    spec = build_spec(_args(*base, "--sharegpt-context-len", "100"))
    kept = PromptSource(spec)._file
    assert kept is not None
    assert [p.content for p in kept] == ["short question here"]
    with pytest.raises(CliError) as exc:
        build_spec(
            _args("--dataset-name", "sharegpt", "--dataset-path", str(path), "--sharegpt-context-len", "9")
        )
    assert "needs a client tokenizer (--tokenizer)" in str(exc.value)
