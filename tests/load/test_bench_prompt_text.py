"""bench_serving 0.5.23's --prompt-suffix, --apply-chat-template (sharegpt and custom datasets)
and --print-requests, in `sentinel bench`; tokenizer and template files written in tmp_path."""

from __future__ import annotations

import argparse
import asyncio
import importlib.util
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.cli import build_parser, main
from sglang_sentinel.cli.bench import build_spec
from sglang_sentinel.cli.bench_datasets import dataset_warnings
from sglang_sentinel.cli.common import CliError
from sglang_sentinel.load.chat_template import ChatTemplate, load_chat_template
from sglang_sentinel.load.datasets import PromptSource, suffixed

needs_tokenizers = pytest.mark.skipif(
    importlib.util.find_spec("tokenizers") is None or importlib.util.find_spec("jinja2") is None,
    reason="the tokenizer extra is not installed (pip install -e '.[dev]')",
)

CHATML = (
    "{{ bos_token }}{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>\n"
    "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


@pytest.fixture(scope="module")
def tokenizer_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if importlib.util.find_spec("tokenizers") is None:
        pytest.skip("the tokenizers library is not installed (pip install -e '.[dev]')")
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=300, special_tokens=["<s>"], show_progress=False)
    tok.train_from_iterator([Path(__file__).read_text(encoding="utf-8")], trainer=trainer)
    out = tmp_path_factory.mktemp("tok") / "tokenizer.json"
    tok.save(str(out))
    return out


def _model_dir(tmp_path: Path, tokenizer_file: Path, **config: Any) -> Path:
    d = tmp_path / "model"
    d.mkdir(parents=True)
    (d / "tokenizer.json").write_bytes(tokenizer_file.read_bytes())
    (d / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return d


def _sharegpt(tmp_path: Path, *questions: str) -> Path:
    data = [
        {"conversations": [{"from": "human", "value": q}, {"from": "gpt", "value": "fine answer"}]}
        for q in questions
    ]
    path = tmp_path / "sg.json"
    path.write_text(json.dumps(data), encoding="utf-8")
    return path


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


async def _bench(*argv: str) -> int:
    return await asyncio.to_thread(main, ["bench", "--log-level", "error", "--disable-tqdm", *argv])


def test_prompt_suffix_moves_a_closing_assistant_after_it() -> None:
    assert suffixed("Hi there", " Be brief.") == "Hi there Be brief.Assistant:"
    assert suffixed("Hi there\nAssistant:", " Be brief.") == "Hi there\n Be brief.Assistant:"
    assert suffixed("Hi", "") == "Hi"


def test_prompt_suffix_reaches_sharegpt_and_custom_prompts(tmp_path: Path) -> None:
    sg = _sharegpt(tmp_path, "What is a river?")
    spec = build_spec(
        _args("--dataset-name", "sharegpt", "--dataset-path", str(sg), "--prompt-suffix", " Short.")
    )
    prompts = PromptSource(spec)._file
    assert prompts is not None
    assert [p.content for p in prompts] == ["What is a river? Short.Assistant:"]
    custom = tmp_path / "c.jsonl"
    custom.write_text('{"prompt": "Tell me"}\n', encoding="utf-8")
    spec = build_spec(
        _args("--dataset-name", "custom", "--dataset-path", str(custom), "--prompt-suffix", " X")
    )
    prompts = PromptSource(spec)._file
    assert prompts is not None
    assert [p.content for p in prompts] == ["Tell me XAssistant:"]
    custom.write_text('{"messages": [{"role": "user", "content": "hi"}]}\n', encoding="utf-8")
    spec = build_spec(
        _args(
            "--backend",
            "sglang-oai-chat",
            "--dataset-name",
            "custom",
            "--dataset-path",
            str(custom),
            "--prompt-suffix",
            " X",
        )
    )
    with pytest.raises(ValueError, match="apply to 'prompt' / 'text' lines"):
        PromptSource(spec)


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--prompt-suffix", " x"], "--prompt-suffix applies to --dataset-name sharegpt or custom"),
        (["--apply-chat-template"], "--apply-chat-template applies to --dataset-name sharegpt or custom"),
        (["--dataset-name", "sharegpt", "--apply-chat-template"], "--apply-chat-template needs --tokenizer"),
        (["--print-requests"], "--print-requests needs --backend sglang-oai-chat"),
    ],
)
def test_usage_errors_exit_2(argv: list[str], message: str) -> None:
    with pytest.raises(CliError) as exc:
        build_spec(_args(*argv))
    assert exc.value.exit_code == 2
    assert message in str(exc.value)


@needs_tokenizers
def test_the_template_renders_as_transformers_does(tmp_path: Path, tokenizer_file: Path) -> None:
    d = _model_dir(
        tmp_path, tokenizer_file, bos_token={"content": "<s>", "special": True}, chat_template=CHATML
    )
    tpl = ChatTemplate(d / "tokenizer.json")  # the file or its directory
    assert (
        tpl.render([{"role": "user", "content": "hi"}])
        == "<s><|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    assert tpl.user_prompt("hi") == "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"  # BOS removed
    # transformers' environment: trim_blocks, lstrip_blocks, tojson, raise_exception, loop
    # controls, {% generation %}; chat_template.jinja wins over the config's.
    (d / "chat_template.jinja").write_text(
        "{% for m in messages %}\n  {% if loop.index > 1 %}{% break %}{% endif %}\n"
        "{% generation %}{{ m | tojson }}{% endgeneration %}\n{% endfor %}\n"
        "{% if messages | length > 2 %}{{ raise_exception('too many') }}{% endif %}"
        "{{ strftime_now('%Y')[:2] }}",
        encoding="utf-8",
    )
    tpl = ChatTemplate(d)
    msgs = [{"role": "user", "content": "é"}, {"role": "user", "content": "b"}]
    # No newline after a block tag (trim_blocks), no indent before one (lstrip_blocks), the
    # second message cut by {% break %}, non-ASCII kept by tojson.
    assert tpl.render(msgs) == '{"role": "user", "content": "é"}20'
    with pytest.raises(ValueError, match="too many"):
        tpl.render(msgs * 2)


@needs_tokenizers
def test_template_problems_exit_2(
    tmp_path: Path, tokenizer_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    sg = _sharegpt(tmp_path, "q")
    d = _model_dir(tmp_path, tokenizer_file, bos_token="<s>")
    argv = [
        "--dataset-name",
        "sharegpt",
        "--dataset-path",
        str(sg),
        "--tokenizer",
        str(d),
        "--apply-chat-template",
    ]
    with pytest.raises(CliError) as exc:
        build_spec(_args(*argv))
    assert exc.value.exit_code == 2
    assert "no chat template in" in str(exc.value)
    (d / "chat_template.jinja").write_text("{% for m in messages %}", encoding="utf-8")
    load_chat_template.cache_clear()
    with pytest.raises(CliError) as exc:
        build_spec(_args(*argv))
    assert "bad template" in str(exc.value)
    (d / "chat_template.jinja").write_text(CHATML, encoding="utf-8")
    load_chat_template.cache_clear()
    monkeypatch.setitem(sys.modules, "jinja2", None)  # import fails as if not installed
    try:
        with pytest.raises(CliError) as exc:
            build_spec(_args(*argv))
    finally:
        load_chat_template.cache_clear()
    assert "needs the jinja2 library: pip install 'sglang-sentinel[tokenizer]'" in str(exc.value)


@needs_tokenizers
async def test_suffix_and_template_reach_the_requests(
    fake_sglang: Any, tmp_path: Path, tokenizer_file: Path
) -> None:
    fake = await fake_sglang()
    sg = _sharegpt(tmp_path, "What is a river?")
    d = _model_dir(tmp_path, tokenizer_file, bos_token="<s>", chat_template=CHATML)
    argv = [
        "--base-url", fake.base_url, "--backend", "sglang-oai", "--dataset-name", "sharegpt",
        "--dataset-path", str(sg), "--num-prompts", "1", "--sharegpt-output-len", "4",
        "--warmup-requests", "0", "--tokenizer", str(d), "--apply-chat-template",
        "--prompt-suffix", " Be brief.",
    ]  # fmt: skip
    assert await _bench(*argv) == 0
    assert [b["prompt"] for b in fake.requests] == [
        "<|im_start|>user\nWhat is a river? Be brief.Assistant:<|im_end|>\n<|im_start|>assistant\n"
    ]


async def test_print_requests_prints_a_start_and_an_end_line_per_request(
    fake_sglang: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = await fake_sglang()
    argv = [
        "--base-url", fake.base_url, "--backend", "sglang-oai-chat", "--num-prompts", "3",
        "--random-input-len", "8", "--random-output-len", "4", "--random-range-ratio", "1",
        "--print-requests",
    ]  # fmt: skip
    assert await _bench(*argv) == 0
    out = capsys.readouterr().out
    starts = re.findall(
        r'^rid=(\S+) time=[\d.]+ message="request start" request_func_input="RequestFuncInput\((.*)\)"$',
        out,
        re.M,
    )
    ends = re.findall(
        r'^rid=(\S+) time=[\d.]+ time_delta=[\d.e-]+ message="request end" '
        r'output="RequestFuncOutput\((.*)\)"$',
        out,
        re.M,
    )
    rids = [b["rid"] for b in fake.requests]
    assert len(rids) == 4  # the warm-up request too, as bench_serving prints it
    assert sorted(r for r, _ in starts) == sorted(rids) == sorted(r for r, _ in ends)
    assert all("prompt='...'" in fields and "output_len=" in fields for _, fields in starts)
    assert all("generated_text='...'" in f and "success=True" in f and "output_len=4" in f for _, f in ends)
    assert out.index('message="request end"') < out.index(" Serving Benchmark Result ")


@needs_tokenizers
def test_mooncake_rounds_use_the_template_when_there_is_one(
    tmp_path: Path, tokenizer_file: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text('{"timestamp": 0, "hash_ids": [7], "output_length": 2}\n', encoding="utf-8")
    base = ["--dataset-name", "mooncake", "--dataset-path", str(trace), "--mooncake-num-rounds", "2"]
    d = _model_dir(tmp_path, tokenizer_file, bos_token="<s>", chat_template=CHATML)
    spec = build_spec(_args(*base, "--tokenizer", str(d)))
    prompts = PromptSource(spec)._file
    assert prompts is not None
    r1, r2 = (p.content for p in prompts)
    assert isinstance(r1, str)
    assert r1.startswith("<s><|im_start|>user\nRound 1: 7hi hi")  # as bench_serving: BOS kept
    assert r1.endswith("context.<|im_end|>\n<|im_start|>assistant\n")
    assert "<|im_start|>assistant\nstory story<|im_end|>\n<|im_start|>user\nRound 2: " in str(r2)
    # No template, or none renderable: bench_serving's "role: content" fallback.
    plain = _model_dir(tmp_path / "p", tokenizer_file, bos_token="<s>")
    spec = build_spec(_args(*base, "--tokenizer", str(plain)))
    prompts = PromptSource(spec)._file
    assert prompts is not None
    assert str(prompts[0].content).startswith("user: Round 1: 7hi hi")
    (d / "chat_template.jinja").write_text("{{ raise_exception('no') }}", encoding="utf-8")
    load_chat_template.cache_clear()
    prompts = PromptSource(build_spec(_args(*base, "--tokenizer", str(d))))._file
    assert prompts is not None
    assert str(prompts[0].content).startswith("user: Round 1: 7hi hi")
    # A template and no jinja2: the fallback, and a warning.
    (d / "chat_template.jinja").unlink()
    load_chat_template.cache_clear()
    monkeypatch.setitem(sys.modules, "jinja2", None)
    try:
        args = _args(*base, "--tokenizer", str(d))
        prompts = PromptSource(build_spec(args))._file
        assert dataset_warnings(args)
        assert "jinja2 is not installed" in dataset_warnings(args)[0]
    finally:
        load_chat_template.cache_clear()
    assert prompts is not None
    assert str(prompts[0].content).startswith("user: Round 1: 7hi hi")
