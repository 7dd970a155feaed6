"""The dataset registry (sglang_sentinel.load.dataset_registry) is the one place naming datasets:
the CLI's choices are its names, every entry builds, loads and reports, and docs/bench.md's
"Adding a dataset" example works through the registry API as the page says."""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import re
import sys
from pathlib import Path
from types import ModuleType

import pytest

from sglang_sentinel.cli import build_parser
from sglang_sentinel.cli.bench import build_spec
from sglang_sentinel.cli.bench_flags import REJECTED_DATASETS
from sglang_sentinel.cli.common import CliError
from sglang_sentinel.load import spec as spec_module
from sglang_sentinel.load.dataset_entry import DatasetEntry, Prompts
from sglang_sentinel.load.dataset_registry import DATASETS
from sglang_sentinel.load.datasets import PromptSource
from sglang_sentinel.load.random_prompts import RANDOM
from sglang_sentinel.load.spec import Backend, DatasetSpec, LoadSpec, RandomDataset, SpecError

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "docs" / "examples"
DOCS = ROOT / "docs" / "bench.md"


def _dataset_choices() -> tuple[str, ...]:
    """`sentinel bench --dataset-name`'s choices, as the real parser has them."""
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    action = next(a for a in sub.choices["bench"]._actions if a.dest == "dataset_name")
    return tuple(action.choices or ())


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


def test_the_cli_choices_are_the_registry_then_the_refused() -> None:
    assert _dataset_choices() == (*DATASETS.names, *REJECTED_DATASETS)
    assert not set(DATASETS.names) & set(REJECTED_DATASETS)


def _command_line(name: str, tmp_path: Path) -> list[str]:
    """A minimal valid command line for each registered dataset."""
    lines = tmp_path / "prompts.jsonl"
    lines.write_text(json.dumps({"prompt": "hello there", "max_tokens": 4}) + "\n", encoding="utf-8")
    per_name = {
        "sharegpt": ["--dataset-path", str(EXAMPLES / "sharegpt_small.json"), "--sharegpt-output-len", "8"],
        "openai": ["--dataset-path", str(lines)],
        "jsonl": ["--dataset-path", str(lines)],
        "custom": ["--dataset-path", str(lines)],
        "mooncake": ["--dataset-path", str(EXAMPLES / "mooncake_trace.jsonl")],
        "agentic-trace": ["--dataset-path", str(EXAMPLES / "agentic_trace.json")],
        "generated-shared-prefix": ["--gsp-system-prompt-len", "8", "--gsp-question-len", "4"],
    }
    backend = "sglang-oai-chat" if name == "agentic-trace" else "sglang"
    return ["--dataset-name", name, "--backend", backend, *per_name.get(name, [])]


def test_every_registered_dataset_has_a_choice_a_loader_and_result_keys(tmp_path: Path) -> None:
    choices = _dataset_choices()
    for entry in DATASETS:
        assert entry.name in choices
        spec = build_spec(_args(*_command_line(entry.name, tmp_path), "--num-prompts", "3"))
        assert isinstance(spec.dataset, entry.spec_type), entry.name
        assert DATASETS.entry_for(spec.dataset).spec_type is entry.spec_type
        first = next(iter(PromptSource(spec)))
        assert first.content, entry.name
        assert first.output_len >= 1, entry.name
        keys = DATASETS.result_keys(spec)
        assert isinstance(keys["dataset_name"], str), entry.name
        assert keys["dataset_name"] in DATASETS.names, entry.name


def test_every_spec_type_of_the_package_is_registered() -> None:
    # A spec type without an entry could be built (by the daemon) but neither loaded nor reported.
    types = {
        obj
        for obj in vars(spec_module).values()
        if isinstance(obj, type) and issubclass(obj, DatasetSpec) and obj is not DatasetSpec
    }
    assert types == {e.spec_type for e in DATASETS}


def test_a_flag_of_one_dataset_with_another_exits_2() -> None:
    with pytest.raises(CliError, match="--gsp-ordered: need --dataset-name generated-shared-prefix") as exc:
        build_spec(_args("--gsp-ordered"))
    assert exc.value.exit_code == 2


def test_the_registry_refuses_a_duplicate_name_or_a_shared_type_loaded_otherwise() -> None:
    with pytest.raises(ValueError, match="registered twice"):
        DATASETS.plus(RANDOM)

    def load_again(ds: RandomDataset, spec: LoadSpec) -> Prompts:
        return RANDOM.load(ds, spec)

    other = DatasetEntry("other-random", RandomDataset, RANDOM.from_args, load_again, RANDOM.result_keys)
    with pytest.raises(ValueError, match="must share its loader and result keys"):
        DATASETS.plus(other)
    with pytest.raises(SpecError, match="unknown dataset 'nope'"):
        DATASETS.entry("nope")


def _docs_module(tmp_path: Path) -> ModuleType:
    """docs/bench.md's example dataset module, imported from the page as written."""
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Adding a dataset") :]
    block = re.search(r"```python\n(.*?)```", section, re.S)
    assert block is not None, "docs/bench.md's 'Adding a dataset' lost its module"
    path = tmp_path / "fixed_prompt.py"
    path.write_text(block.group(1), encoding="utf-8")
    spec = importlib.util.spec_from_file_location("fixed_prompt_from_docs", path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses resolve the module's annotations through it
    try:
        spec.loader.exec_module(module)
    finally:
        del sys.modules[spec.name]
    return module


def test_the_docs_example_dataset_is_a_two_file_change(tmp_path: Path) -> None:
    module = _docs_module(tmp_path)
    entry = module.FIXED_PROMPT
    assert isinstance(entry, DatasetEntry)
    registry = DATASETS.plus(entry)  # what the registry line does
    assert registry.names == (*DATASETS.names, "fixed-prompt")

    # The CLI side: the choice and the entry's flags, on a parser built from the registry.
    parser = argparse.ArgumentParser()
    parser.add_argument("--dataset-name", choices=registry.names, default="random")
    parser.add_argument("--tokenize-prompt", action="store_true")
    registry.add_flags(parser)
    args = parser.parse_args(
        ["--dataset-name", "fixed-prompt", "--fixed-prompt", "Say hi.", "--fixed-output-len", "5"]
    )
    registry.check_args(args)
    built = registry.entry(args.dataset_name).from_args(args, Backend.OPENAI_CHAT)
    assert built.requests is None  # --num-prompts decides
    assert built.arrival is None  # and the flags
    spec = LoadSpec(backend=Backend.OPENAI_CHAT, dataset=built.dataset, num_requests=3, warmup_requests=1)

    # The run side: its prompts and its keys in the result JSON.
    source = PromptSource(spec, datasets=registry)
    prompts = [next(source) for _ in range(3)]
    assert all(p.content == [{"role": "user", "content": "Say hi."}] and p.output_len == 5 for p in prompts)
    assert source.planned_requests(3) == 3
    assert [p.output_len for p in source.warmup(2)] == [5, 5]  # capped at 32, as every warm-up
    assert registry.result_keys(spec) == {"dataset_name": "fixed-prompt", "fixed_output_len": 5}

    # Its flag with another dataset, and a missing one, are the entry's errors (exit 2 in the CLI).
    with pytest.raises(SpecError, match="--fixed-prompt needs --dataset-name fixed-prompt"):
        registry.check_args(parser.parse_args(["--fixed-prompt", "x"]))
    with pytest.raises(SpecError, match="needs --fixed-prompt"):
        entry.from_args(parser.parse_args(["--dataset-name", "fixed-prompt"]), Backend.SGLANG)
    # The package's own registry does not know it: the line is what adds it.
    with pytest.raises(SpecError, match="no dataset registered for FixedPromptDataset"):
        PromptSource(spec)


def test_generated_prompts_draw_from_the_run_stream_only() -> None:
    # The Prompts API's promise: the same seed, the same prompts; another stream, others.
    spec = LoadSpec(dataset=RandomDataset(50, 8, 0.0), seed=5)
    a = DATASETS.entry_for(spec.dataset).load(spec.dataset, spec)
    one = [a.prompt(i, random.Random(5)).content for i in range(1)]
    two = [a.prompt(i, random.Random(5)).content for i in range(1)]
    other = [a.prompt(i, random.Random(6)).content for i in range(1)]
    assert one == two != other
    assert next(iter(PromptSource(spec))).content == one[0]
