"""bench_serving's `random` and `random-ids` datasets: prompts of random lengths, seeded.

As bench_serving 0.5.23 (`sglang/benchmark/datasets/random.py`): each request's input and output
lengths drawn independently and uniformly from ``[max(int(L * --random-range-ratio), 1), L]``.
Content: token ids on the native backend (`input_ids`, exact lengths), else common English
words about one token each (the figures use the server's prompt_tokens). Both names are one
dataset, as in bench_serving; the result's ``dataset_name`` says which content went out
(``random-ids`` on the native backend).
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Mapping
from typing import Any

from sglang_sentinel.load.argtypes import bounded
from sglang_sentinel.load.dataset_entry import Built, DatasetEntry, Prompts
from sglang_sentinel.load.prompt import Prompt, random_ids, random_words
from sglang_sentinel.load.spec import Backend, LoadSpec, RandomDataset, SpecError

__all__ = ["RANDOM", "RANDOM_IDS", "RandomPrompts"]


def add_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--random-input-len", type=bounded(int, ge=1), default=1024)
    group.add_argument("--random-output-len", type=bounded(int, ge=1), default=1024)
    group.add_argument(
        "--random-range-ratio",
        type=bounded(float, ge=0, le=1),
        default=0.0,
        help="0: uniform [1, L]; 1: exactly L",
    )


def from_args(args: argparse.Namespace, backend: Backend) -> Built:
    if args.tokenize_prompt and backend is not Backend.SGLANG:
        # The native backend always sends random prompts as input_ids.
        raise SpecError("--tokenize-prompt needs --backend sglang (token ids go to /generate)")
    return Built(RandomDataset(args.random_input_len, args.random_output_len, args.random_range_ratio))


class RandomPrompts(Prompts):
    """Each prompt drawn from the run's stream: lengths, then the ids or words."""

    def __init__(self, ds: RandomDataset, text: bool) -> None:
        self._ds = ds
        self._text = text

    def prompt(self, i: int, rng: random.Random) -> Prompt:
        ds = self._ds
        lo_in = max(int(ds.input_len * ds.range_ratio), 1)
        lo_out = max(int(ds.output_len * ds.range_ratio), 1)
        n_in = rng.randint(lo_in, ds.input_len)
        n_out = rng.randint(lo_out, ds.output_len)
        content: str | list[int] = random_words(rng, n_in) if self._text else random_ids(rng, n_in)
        return Prompt(content, n_in, n_out)


def load(ds: RandomDataset, spec: LoadSpec) -> RandomPrompts:
    return RandomPrompts(ds, text=spec.backend is not Backend.SGLANG)


def result_keys(ds: RandomDataset, spec: LoadSpec) -> Mapping[str, Any]:
    return {
        "dataset_name": "random-ids" if spec.backend == "sglang" else "random",
        "random_input_len": ds.input_len,
        "random_output_len": ds.output_len,
        "random_range_ratio": ds.range_ratio,
    }


RANDOM = DatasetEntry("random", RandomDataset, from_args, load, result_keys, add_flags=add_flags)
RANDOM_IDS = DatasetEntry("random-ids", RandomDataset, from_args, load, result_keys, add_flags=add_flags)
