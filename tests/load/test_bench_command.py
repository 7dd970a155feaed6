"""`sentinel bench` end to end against the fake server: output, exit codes, secrets."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.cli import main

pytestmark = pytest.mark.asyncio


async def _bench(*argv: str) -> int:
    # The command runs its own event loop; the fake server lives in the test's loop.
    return await asyncio.to_thread(main, ["bench", "--log-level", "error", *argv])


def _small(base_url: str) -> list[str]:
    return [
        "--base-url",
        base_url,
        "--num-prompts",
        "5",
        "--random-input-len",
        "16",
        "--random-output-len",
        "6",
        "--random-range-ratio",
        "1",
    ]


async def test_bench_prints_block_and_appends_jsonl(
    fake_sglang: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = await fake_sglang(token_delay=0.001)
    out = tmp_path / "res.jsonl"
    args = [*_small(fake.base_url), "--output-file", str(out), "--max-concurrency", "2"]
    assert await _bench(*args) == 0
    assert await _bench(*args, "--output-details", "--tag", "second") == 0
    text = capsys.readouterr().out
    assert text.count(" Serving Benchmark Result ") == 2
    assert "{:<40} {:<10}".format("Successful requests:", 5) in text
    lines = [json.loads(x) for x in out.read_text().splitlines()]
    assert len(lines) == 2
    assert lines[0]["completed"] == 5
    assert lines[0]["total_output_tokens"] == 30
    assert lines[0]["max_concurrency"] == 2
    assert "itls" not in lines[0]
    assert lines[1]["tag"] == "second"
    assert len(lines[1]["itls"]) == 5
    assert lines[1]["generated_texts"][0].count("tok") == 6


async def test_bench_unreachable_server(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    out = tmp_path / "res.jsonl"
    code = await _bench(
        *_small("http://127.0.0.1:9"), "--output-file", str(out), "--ready-check-timeout-sec", "1"
    )
    assert code == 1
    err = capsys.readouterr().err
    assert "cannot reach the server at http://127.0.0.1:9" in err
    assert "Traceback" not in err
    record = json.loads(out.read_text())
    assert record["warmup_failed"] is True
    assert record["completed"] == 0


async def test_bench_refused_key_is_clear_and_never_echoed(
    fake_sglang: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("SENTINEL_API_KEY", raising=False)
    fake = await fake_sglang(api_key="right-key")
    key_file = tmp_path / "key"
    key_file.write_text("wrong-key-XYZ\n")
    out = tmp_path / "res.jsonl"
    code = await _bench(*_small(fake.base_url), "--api-key-file", str(key_file), "--output-file", str(out))
    assert code == 1
    captured = capsys.readouterr()
    assert "refused the API key" in captured.err
    assert "wrong-key-XYZ" not in captured.err + captured.out + out.read_text()

    key_file.write_text("right-key")
    assert (
        await _bench(*_small(fake.base_url), "--api-key-file", str(key_file), "--warmup-requests", "0") == 0
    )
    monkeypatch.setenv("OPENAI_API_KEY", "right-key")
    assert await _bench(*_small(fake.base_url)) == 0


async def test_bench_refused_model(fake_sglang: Any, capsys: pytest.CaptureFixture[str]) -> None:
    fake = await fake_sglang(status=404)
    code = await _bench(*_small(fake.base_url), "--backend", "sglang-oai-chat", "--model", "nope")
    assert code == 1
    assert "refused the request for model 'nope'" in capsys.readouterr().err


async def test_bench_partial_failures_exit_zero_with_reasons(
    fake_sglang: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = await fake_sglang(fail_mode="error_chunk", fail_every=3)
    code = await _bench(*_small(fake.base_url), "--warmup-requests", "0", "--num-prompts", "6")
    assert code == 0
    out = capsys.readouterr().out
    assert "error_chunk=2" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--extra-request-body", "{oops"], "--extra-request-body is not JSON"),
        (["--header", "novalue"], "--header expects K=V"),
        (["--backend", "tgi"], "unknown backend"),
        (["--dataset-name", "jsonl"], "needs --dataset-path"),
        (["--dataset-name", "jsonl", "--dataset-path", "/nonexistent.jsonl"], "dataset file not found"),
    ],
)
async def test_bench_usage_errors(argv: list[str], message: str, capsys: pytest.CaptureFixture[str]) -> None:
    assert await _bench("--base-url", "http://127.0.0.1:9", *argv) == 2
    assert message in capsys.readouterr().err
