"""bench_serving's `sharegpt` dataset, and the prompt-shaping flags it shares with `custom`.

As bench_serving 0.5.23 (`sglang/benchmark/datasets/sharegpt.py`): a JSON list of
``{"conversations": [{"from", "value"}...]}``, conversations of two turns or more, shuffled with
the seed; the first turn is the prompt, the second the reference completion whose length is the
request's output length unless --sharegpt-output-len fixes it (see `ShareGPTDataset`).
--prompt-suffix and --apply-chat-template apply here and to `custom` (jsonl), as in bench_serving.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Mapping
from typing import Any

from sglang_sentinel.load.argtypes import bounded
from sglang_sentinel.load.dataset_entry import Built, DatasetEntry, FilePrompts
from sglang_sentinel.load.prompt import Prompt, prompt_counter, read_json_file, text_shaper
from sglang_sentinel.load.spec import Backend, LoadSpec, ShareGPTDataset, SpecError

__all__ = ["SHAREGPT", "load_sharegpt"]

# English BPE text: about 4 characters per token; only for ShareGPT's reference completions.
_CHARS_PER_TOKEN = 4

# bench_serving applies --prompt-suffix and --apply-chat-template in its sharegpt and custom datasets.
_TEXT_DATASETS = ("sharegpt", "custom", "jsonl")


def add_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--sharegpt-output-len",
        type=bounded(int, ge=1),
        default=None,
        help="sharegpt: fixed output length (else the reference's); agentic-trace: per turn (default 220)",
    )
    group.add_argument(
        "--sharegpt-context-len",
        type=bounded(int, ge=1),
        default=None,
        help="sharegpt: drop pairs longer than this (prompt + output tokens); needs --tokenizer",
    )
    group.add_argument(
        "--prompt-suffix",
        default="",
        help='sharegpt, custom: appended to each prompt, before a closing "Assistant:" (as bench_serving)',
    )
    group.add_argument(
        "--apply-chat-template",
        action="store_true",
        help="sharegpt, custom: render each prompt with the --tokenizer directory's chat template "
        "(needs jinja2: the tokenizer extra)",
    )


def check_args(args: argparse.Namespace) -> None:
    for flag, on in (
        ("--prompt-suffix", bool(args.prompt_suffix)),
        ("--apply-chat-template", args.apply_chat_template),
    ):
        if on and args.dataset_name not in _TEXT_DATASETS:
            raise SpecError(f"{flag} applies to --dataset-name sharegpt or custom (as bench_serving)")
    if args.apply_chat_template and args.tokenizer is None:
        raise SpecError(
            "--apply-chat-template needs --tokenizer: a local directory (or its tokenizer.json) with the "
            "model's chat template (tokenizer_config.json 'chat_template', or chat_template.jinja)"
        )


def from_args(args: argparse.Namespace, backend: Backend) -> Built:
    if args.dataset_path is None:
        raise SpecError("--dataset-name sharegpt needs --dataset-path (sentinel bench downloads nothing)")
    return Built(
        ShareGPTDataset(
            args.dataset_path,
            output_len=args.sharegpt_output_len,
            context_len=args.sharegpt_context_len,
            prompt_suffix=args.prompt_suffix,
            chat_template=args.apply_chat_template,
        )
    )


def load_sharegpt(
    dataset: ShareGPTDataset,
    backend: Backend,
    seed: int,
    count: Callable[[str], int] | None = None,
    shape: Callable[[str], str] | None = None,
) -> list[Prompt]:
    """bench_serving's ShareGPT sampling (see `ShareGPTDataset`); errors name the entry.

    `count`: the client tokenizer's prompt count (--tokenizer). With it, lengths are counted as
    bench_serving counts them (prompt and reference completion), and `context_len` prunes."""
    data = read_json_file(dataset.path)
    if not isinstance(data, list):
        raise SpecError(f"{dataset.path}: expected a JSON list of conversations")
    pairs: list[tuple[str, str]] = []
    for k, entry in enumerate(data):
        turns = entry.get("conversations", entry.get("conversation")) if isinstance(entry, dict) else None
        if not isinstance(turns, list):
            raise SpecError(f"{dataset.path}[{k}]: expected an object with a 'conversations' list")
        if len(turns) < 2:
            continue  # bench_serving keeps conversations of two turns or more
        values = [t.get("value") if isinstance(t, dict) else None for t in turns[:2]]
        if not all(isinstance(v, str) for v in values):
            raise SpecError(f"{dataset.path}[{k}]: turns need a string 'value'")
        pairs.append((str(values[0]), str(values[1])))
    random.Random(seed).shuffle(pairs)
    prompts: list[Prompt] = []
    for prompt, completion in pairs:
        if shape is not None:
            prompt = shape(prompt)
        if count is not None:  # exact, as bench_serving: the tokenizer's counts, 0 = unknown below
            plen = count(prompt)
            out = dataset.output_len if dataset.output_len is not None else count(completion)
            est_plen = plen
        else:  # estimated; the figures use the server's prompt_tokens
            plen, est_plen = 0, -(-len(prompt) // _CHARS_PER_TOKEN)
            out = dataset.output_len or -(-len(completion) // _CHARS_PER_TOKEN)
        if est_plen < 2 or out < 2:
            continue  # bench_serving prunes sequences under 2 tokens
        if dataset.context_len and plen + out > dataset.context_len:
            continue  # and, with --sharegpt-context-len, those too long for the model
        content: str | list[dict[str, Any]] = prompt
        if backend is Backend.OPENAI_CHAT:
            content = [{"role": "user", "content": prompt}]
        prompts.append(Prompt(content, plen, out))
    if not prompts:
        raise SpecError(f"dataset {dataset.path} has no usable conversation")
    return prompts


def load(ds: ShareGPTDataset, spec: LoadSpec) -> FilePrompts:
    count = prompt_counter(spec.tokenizer) if spec.tokenizer is not None else None
    shape = text_shaper(ds.prompt_suffix, ds.chat_template, spec.tokenizer)
    return FilePrompts(load_sharegpt(ds, spec.backend, spec.seed, count, shape))


def result_keys(ds: ShareGPTDataset, spec: LoadSpec) -> Mapping[str, Any]:
    return {"dataset_name": "sharegpt", "dataset_path": str(ds.path), "sharegpt_output_len": ds.output_len}


SHAREGPT = DatasetEntry(
    "sharegpt", ShareGPTDataset, from_args, load, result_keys, add_flags=add_flags, check_args=check_args
)
