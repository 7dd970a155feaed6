"""`sentinel bench` as a drop-in for bench_serving 0.5.23: its flags and its result block.

Fixtures (tests/load/fixtures/): the flag list and the block's row labels were extracted from the
sglang==0.5.23 wheel's `sglang/benchmark/serving.py` (sources in their headers); the two
`sglang-bench-serving-output-*.txt` are bench_serving outputs posted on SGLang pull requests,
copied with their `# source:` line (the pull request they were posted on).
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.cli import build_parser
from sglang_sentinel.cli.bench import build_spec
from sglang_sentinel.cli.bench_flags import REJECTED, REJECTED_DATASETS
from sglang_sentinel.cli.common import CliError
from sglang_sentinel.load import LoadSpec, RandomDataset, format_result_block, run_load

FIXTURES = Path(__file__).parent / "fixtures"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "bench.md"


def _lines(name: str) -> list[str]:
    text = (FIXTURES / name).read_text(encoding="utf-8")
    return [line for line in text.splitlines() if line and not line.startswith("#")]


def _bench_parser() -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    bench = sub.choices["bench"]
    assert isinstance(bench, argparse.ArgumentParser)
    return bench


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


FLAGS = _lines("bench_serving_0.5.23_flags.txt")


def test_the_fixture_holds_all_87_flags() -> None:
    assert len(FLAGS) == 87
    assert len(set(FLAGS)) == 87


@pytest.mark.parametrize("flag", FLAGS)
def test_every_bench_serving_flag_is_known_and_documented(flag: str) -> None:
    known = _bench_parser()._option_string_actions
    assert flag in known, f"{flag} is neither accepted nor refused"
    rows = [line for line in DOCS.read_text(encoding="utf-8").splitlines() if line.startswith(f"| `{flag}`")]
    assert len(rows) == 1, f"docs/bench.md needs one table row for {flag}"
    verdict = "refused" if flag in REJECTED else "accepted"
    assert f"| {verdict} |" in rows[0], rows[0]


def test_the_docs_counts_of_accepted_and_refused_flags_are_the_parsers() -> None:
    refused = [f for f in FLAGS if f in REJECTED]
    assert len(refused) == len(REJECTED)  # every refused flag is one of bench_serving's
    counts = f"Of its 87 flags, {len(FLAGS) - len(refused)} are accepted and {len(refused)} refused."
    assert counts in " ".join(DOCS.read_text(encoding="utf-8").split())


@pytest.mark.parametrize("flag", sorted(REJECTED))
def test_a_refused_flag_exits_2_with_its_reason(flag: str) -> None:
    args = _args(flag, "x", "y")  # values are taken whatever the flag had in bench_serving
    with pytest.raises(CliError) as exc:
        build_spec(args)
    assert exc.value.exit_code == 2
    assert f"{flag}: {REJECTED[flag]}" in str(exc.value)


def test_refused_datasets_and_backends_say_why() -> None:
    for name, reason in REJECTED_DATASETS.items():
        with pytest.raises(CliError) as exc:
            build_spec(_args("--dataset-name", name))
        assert reason in str(exc.value)
    with pytest.raises(CliError) as exc:
        build_spec(_args("--backend", "sglang-embedding"))
    assert "embeddings stream no tokens" in str(exc.value)


def test_accepted_flags_reach_the_spec() -> None:
    spec = build_spec(
        _args(
            "--backend", "sglang-oai", "--model", "path/to/model", "--served-model-name", "served",
            "--temperature", "0.5", "--top-p", "0.9", "--return-logprob", "--top-logprobs-num", "3",
            "--goodput", "ttft:500", "tpot:50", "--header", "A=1", "B=2", "--ready-check-timeout-sec", "5",
            "--gsp-fast-prepare", "--exact-rate", "--request-rate", "4",
        )
    )  # fmt: skip
    assert spec.model == "served"
    assert spec.temperature == 0.5
    assert spec.top_p == 0.9
    assert dict(spec.extra_body) == {"logprobs": 3}  # completions: bench_serving's mapping
    assert dict(spec.goodput_slos_ms) == {"ttft": 500.0, "tpot": 50.0}
    assert dict(spec.headers) == {"A": "1", "B": "2"}
    assert spec.ready_timeout_s == 5.0
    assert spec.exact_rate
    native = build_spec(
        _args(
            "--return-logprob",
            "--top-logprobs-num",
            "2",
            "--token-ids-logprob",
            "1",
            "7",
            "--return-routed-experts",
        )
    )
    assert dict(native.extra_body) == {
        "return_logprob": True,
        "logprob_start_len": -1,
        "top_logprobs_num": 2,
        "token_ids_logprob": [1, 7],
        "return_routed_experts": True,
    }
    with pytest.raises(CliError):
        build_spec(_args("--goodput", "ttft500"))
    with pytest.raises(CliError):
        build_spec(_args("--goodput", "itl:5"))


# ---------------------------------------------------------------- the result block


def _label(line: str) -> str:
    """A block line reduced to what bench_serving's layout makes of it: the label or title."""
    stripped = line.strip()
    if set(stripped) == {"="}:
        return "="
    title = re.fullmatch(r"([=-])+([^=-].*?)\1+", stripped)
    if title:
        return f"{title.group(1)} {title.group(2).strip()} {title.group(1)}"
    return line[:40].strip()


def _bench_serving_part(block: str) -> list[str]:
    """Our block's labels up to the end of bench_serving's part (the first "=" * 50)."""
    labels = [_label(line) for line in block.splitlines() if line.strip()]
    return labels[: labels.index("=") + 1]


def _expected(*conditions: str) -> list[str]:
    out = []
    for line in _lines("bench_serving_0.5.23_block_labels.txt"):
        label, _, cond = line.partition(" | ")
        if not cond or cond in conditions:
            out.append(label)
    return out


async def _result(fake_sglang: Any, **spec: Any) -> Any:
    fake = await fake_sglang(token_delay=0.001, cached_tokens=4)
    return await run_load(
        LoadSpec(
            base_url=fake.base_url,
            dataset=RandomDataset(16, 6, 1.0),
            num_requests=4,
            warmup_requests=0,
            **spec,
        )
    )


@pytest.mark.asyncio
async def test_block_rows_are_bench_serving_0523s(fake_sglang: Any) -> None:
    result = await _result(fake_sglang)
    assert _bench_serving_part(format_result_block(result)) == _expected()


@pytest.mark.asyncio
async def test_block_with_goodput_and_cache_report(fake_sglang: Any) -> None:
    result = await _result(fake_sglang, goodput_slos_ms={"ttft": 1000.0, "e2el": 1e-3})
    labels = _bench_serving_part(format_result_block(result, cache_report=True))
    want = _expected("goodput", "cache")
    at = want.index("SLO attainment (%):") + 1
    want[at:at] = ["TTFT SLO attainment (%):", "E2EL SLO attainment (%):"]
    assert labels == want
    g = result.metrics.goodput
    assert g is not None
    assert g.attainment_by_metric == {"ttft": 1.0, "e2el": 0.0}
    assert g.slo_attainment == 0.0  # no request met the 1 us E2E SLO
    d = result.to_dict()
    json.dumps(d)
    assert d["goodput_slos_ms"] == {"ttft": 1000.0, "e2el": 1e-3}
    assert d["request_goodput"] == 0.0


@pytest.mark.parametrize(
    ("sample", "exact_prefix"),
    [("sglang-bench-serving-output-pr33108.txt", True), ("sglang-bench-serving-output-pr8552.txt", False)],
)
@pytest.mark.asyncio
async def test_block_diffs_cleanly_against_stored_bench_serving_output(
    fake_sglang: Any, sample: str, exact_prefix: bool
) -> None:
    theirs = [_label(line) for line in _lines(sample)]
    ours = _bench_serving_part(format_result_block(await _result(fake_sglang)))
    if exact_prefix:
        # A recent block (the excerpt stops after Median TTFT): ours starts with the same rows.
        assert ours[: len(theirs)] == theirs
    else:
        # An older layout (fewer rows): each of its rows is in ours, in the same order.
        it = iter(ours)
        missing = [label for label in theirs if label not in it]
        assert not missing, missing


# ---------------------------------------------------------------- ShareGPT


SHAREGPT = FIXTURES / "sharegpt_tiny.json"  # written for these tests, in ShareGPT's format


def test_sharegpt_sampling_as_bench_serving() -> None:
    from sglang_sentinel.load.datasets import load_sharegpt
    from sglang_sentinel.load.spec import Backend, ShareGPTDataset

    prompts = load_sharegpt(ShareGPTDataset(SHAREGPT), Backend.SGLANG, seed=1)
    # "b" has one turn and "c" a completion under 2 tokens: both dropped, as bench_serving does.
    assert sorted(p.content for p in prompts) == [
        "Name three prime numbers.",
        "What is the capital of France?",
    ]
    by_prompt = {p.content: p.output_len for p in prompts}
    assert by_prompt["What is the capital of France?"] == 12  # 45 characters / 4, rounded up
    fixed = load_sharegpt(ShareGPTDataset(SHAREGPT, output_len=7), Backend.OPENAI_CHAT, seed=1)
    assert len(fixed) == 3  # a fixed length keeps "c"
    assert all(p.output_len == 7 for p in fixed)
    assert fixed[0].content == [{"role": "user", "content": fixed[0].content[0]["content"]}]  # type: ignore[index]


@pytest.mark.asyncio
async def test_sharegpt_run_sends_the_conversations_prompts(fake_sglang: Any) -> None:
    fake = await fake_sglang()
    spec = build_spec(
        _args(
            "--base-url", fake.base_url, "--dataset-name", "sharegpt", "--dataset-path", str(SHAREGPT),
            "--num-prompts", "4", "--warmup-requests", "0", "--sharegpt-output-len", "4",
        )
    )  # fmt: skip
    result = await run_load(spec)
    assert result.metrics.completed == 4, result.measured[0].error
    texts = [b["text"] for b in fake.requests]
    assert set(texts) == {"What is the capital of France?", "Say ok.", "Name three prime numbers."}
    assert all(b["sampling_params"]["max_new_tokens"] == 4 for b in fake.requests)
    assert result.to_dict()["dataset_name"] == "sharegpt"
    with pytest.raises(CliError):
        build_spec(_args("--dataset-name", "sharegpt"))  # no download: the path is required
    with pytest.raises(CliError):  # bench_serving's "output_len too small"
        build_spec(
            _args("--dataset-name", "sharegpt", "--dataset-path", str(SHAREGPT), "--sharegpt-output-len", "3")
        )


@pytest.mark.asyncio
@pytest.mark.parametrize("distribution", ["uniform", "distinct", "skewed"])
async def test_lora_adapters_per_request(fake_sglang: Any, distribution: str) -> None:
    fake = await fake_sglang()
    names = ["a", "b", "c"]
    spec = build_spec(
        _args(
            "--base-url", fake.base_url, "--num-prompts", "30", "--random-input-len", "4",
            "--random-output-len", "2", "--random-range-ratio", "1", "--lora-name", *names,
            "--lora-request-distribution", distribution, "--lora-zipf-alpha", "4",
        )
    )  # fmt: skip
    result = await run_load(spec)
    assert result.metrics.completed == 30, result.measured[0].error
    warm, *measured = [b["lora_path"] for b in fake.requests]
    assert warm == "a"  # the warm-up uses the first adapter, as bench_serving
    if distribution == "distinct":
        assert measured == names * 10
    elif distribution == "skewed":
        # weights 1, 1/4, 1/16: "a" dominates
        assert measured.count("a") > measured.count("b") + measured.count("c")
    else:
        assert set(measured) == set(names)


@pytest.mark.asyncio
async def test_lora_on_openai_routes_is_also_the_model(fake_sglang: Any) -> None:
    fake = await fake_sglang()
    spec = build_spec(
        _args("--base-url", fake.base_url, "--backend", "sglang-oai-chat", "--num-prompts", "2",
              "--warmup-requests", "0", "--random-output-len", "2", "--lora-name", "ad1")
    )  # fmt: skip
    result = await run_load(spec)
    assert result.metrics.completed == 2, result.measured[0].error
    assert all(b["model"] == "ad1" and b["lora_path"] == "ad1" for b in fake.requests)


@pytest.mark.asyncio
async def test_openai_dataset_passes_each_lines_fields(fake_sglang: Any, tmp_path: Path) -> None:
    path = tmp_path / "requests.jsonl"
    lines = [
        {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "temperature": 0.7, "model": "x"},
        {"messages": [{"role": "user", "content": "yo"}], "tools": [{"type": "function"}]},
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    fake = await fake_sglang()
    argv = ["--base-url", fake.base_url, "--backend", "sglang-oai-chat", "--dataset-name", "openai",
            "--dataset-path", str(path), "--num-prompts", "2", "--warmup-requests", "0"]  # fmt: skip
    result = await run_load(build_spec(_args(*argv)))
    assert result.metrics.completed == 2, result.measured[0].error
    first, second = fake.requests
    assert first["max_completion_tokens"] == 3
    assert first["temperature"] == 0.7  # the line's own field wins
    assert first["model"] == "fake-model"  # model is not passed through (bench_serving)
    assert second["max_completion_tokens"] == 256  # bench_serving's default
    assert second["tools"] == [{"type": "function"}]
    fixed = build_spec(_args(*argv, "--sharegpt-output-len", "9"))
    result = await run_load(fixed)
    assert [b["max_completion_tokens"] for b in fake.requests[2:]] == [9, 9]
