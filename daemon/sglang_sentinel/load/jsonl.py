"""The JSONL prompt datasets: bench_serving's `custom` and `openai`, and our `jsonl`.

One object per line: ``prompt`` or ``text`` (str), ``messages`` (OpenAI chat list, chat backend)
or ``input_ids`` (native backend); optional ``output_len`` / ``max_tokens``. `jsonl` and
`custom` are one dataset (bench_serving's `custom`, `sglang/benchmark/datasets/custom.py`, with
--prompt-suffix and --apply-chat-template); `openai` (`openai_dataset.py`) sends each line's
other fields in its request body, and --sharegpt-output-len overrides every line's max_tokens.
The file is read and checked whole before anything is sent, errors naming the line.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Mapping
from typing import Any

from sglang_sentinel.load.dataset_entry import Built, DatasetEntry, FilePrompts
from sglang_sentinel.load.prompt import Prompt, text_shaper
from sglang_sentinel.load.spec import Backend, JsonlDataset, LoadSpec, SpecError, json_object_line

__all__ = ["CUSTOM", "JSONL", "OPENAI", "load_jsonl"]

# bench_serving's openai dataset keeps these out of the per-request body (openai_dataset.py).
_NOT_PASSED = frozenset({"messages", "max_tokens", "max_completion_tokens", "model"})


def load_jsonl(
    dataset: JsonlDataset, backend: Backend, shape: Callable[[str], str] | None = None
) -> list[Prompt]:
    """Read and validate the whole file; errors name the line. `shape`: what --prompt-suffix and
    --apply-chat-template make of a text prompt."""
    prompts: list[Prompt] = []
    try:
        lines = dataset.path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read dataset {dataset.path}: {exc}") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{dataset.path}:{lineno}"
        obj = json_object_line(line, where)
        out = obj.get("output_len", obj.get("max_tokens", dataset.output_len))
        if dataset.fixed_output_len is not None:
            out = dataset.fixed_output_len
        if not isinstance(out, int) or isinstance(out, bool) or out < 1:
            raise SpecError(f"{where}: output_len must be a positive integer")
        content: str | list[int] | list[dict[str, Any]]
        if isinstance(obj.get("input_ids"), list):
            ids = obj["input_ids"]
            if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
                raise SpecError(f"{where}: input_ids must be a non-empty list of token ids")
            if backend is not Backend.SGLANG:
                raise SpecError(f"{where}: input_ids need the native backend (sglang)")
            content, plen = list(ids), len(ids)
        elif isinstance(obj.get("messages"), list):
            msgs = obj["messages"]
            if not msgs or not all(isinstance(m, dict) and "role" in m for m in msgs):
                raise SpecError(f"{where}: messages must be a non-empty list of {{role, content}}")
            if backend is not Backend.OPENAI_CHAT:
                raise SpecError(f"{where}: messages need the chat backend (sglang-oai-chat)")
            content, plen = list(msgs), 0
        else:
            text = obj.get("prompt", obj.get("text"))
            if not isinstance(text, str) or not text:
                raise SpecError(f"{where}: needs a non-empty 'prompt', 'text', 'messages' or 'input_ids'")
            content, plen = (text if shape is None else shape(text)), 0
        if shape is not None and not isinstance(content, str):
            raise SpecError(
                f"{where}: --prompt-suffix and --apply-chat-template apply to 'prompt' / 'text' lines"
            )
        extra = {k: v for k, v in obj.items() if k not in _NOT_PASSED} if dataset.passthrough else None
        prompts.append(Prompt(content, plen, out, extra=extra or None))
    if not prompts:
        raise SpecError(f"dataset {dataset.path} has no prompts")
    return prompts


def _needs_path(args: argparse.Namespace) -> None:
    if args.dataset_path is None:
        raise SpecError(f"--dataset-name {args.dataset_name} needs --dataset-path")


def from_args(args: argparse.Namespace, backend: Backend) -> Built:
    _needs_path(args)
    return Built(
        JsonlDataset(
            args.dataset_path,
            output_len=args.random_output_len,
            prompt_suffix=args.prompt_suffix,
            chat_template=args.apply_chat_template,
        )
    )


def openai_from_args(args: argparse.Namespace, backend: Backend) -> Built:
    _needs_path(args)
    # bench_serving's defaults: max_tokens per line, else 256; --sharegpt-output-len wins.
    return Built(
        JsonlDataset(
            args.dataset_path, output_len=256, passthrough=True, fixed_output_len=args.sharegpt_output_len
        )
    )


def load(ds: JsonlDataset, spec: LoadSpec) -> FilePrompts:
    shape = text_shaper(ds.prompt_suffix, ds.chat_template, spec.tokenizer)
    return FilePrompts(load_jsonl(ds, spec.backend, shape))


def result_keys(ds: JsonlDataset, spec: LoadSpec) -> Mapping[str, Any]:
    return {"dataset_name": "jsonl", "dataset_path": str(ds.path)}


JSONL = DatasetEntry("jsonl", JsonlDataset, from_args, load, result_keys)
CUSTOM = DatasetEntry("custom", JsonlDataset, from_args, load, result_keys)
OPENAI = DatasetEntry("openai", JsonlDataset, openai_from_args, load, result_keys)
