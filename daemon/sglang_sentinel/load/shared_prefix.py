"""bench_serving's `generated-shared-prefix` dataset: prompts sharing prefixes, in groups.

Same flags and meanings as bench_serving 0.5.23 (`datasets/generated_shared_prefix.py`,
`_validate_parsed_gsp_args` in `serving.py`); see `SharedPrefixDataset` for the shape. A --gsp-*
flag given with another dataset exits 2 (bench_serving ignores it silently). One difference,
kept from before these flags: without --gsp-prompts-per-group the request count is --num-prompts
(round-robin over the groups); with it, as bench_serving, it is groups x prompts per group and
--num-prompts is ignored (a warning says so).
"""

from __future__ import annotations

import argparse
import math
import random
import uuid
from collections.abc import Mapping
from datetime import datetime
from typing import Any

from sglang_sentinel.load.argtypes import bounded
from sglang_sentinel.load.dataset_entry import Built, DatasetEntry, Prompts
from sglang_sentinel.load.prompt import Prompt, drawn_len, random_ids, random_words
from sglang_sentinel.load.spec import Backend, LoadSpec, SharedPrefixDataset, SpecError

__all__ = ["SHARED_PREFIX", "GroupPicker", "SharedPrefixPrompts"]

_NAME = "generated-shared-prefix"


def add_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--gsp-num-groups", type=bounded(int, ge=1), default=1, help="shared-prefix groups")
    group.add_argument(
        "--gsp-system-prompt-len", type=bounded(int, ge=0), default=None, help="shared prefix tokens"
    )
    group.add_argument(
        "--gsp-question-len", type=bounded(int, ge=1), default=None, help="unique suffix tokens"
    )
    group.add_argument("--gsp-output-len", type=bounded(int, ge=1), default=None)
    group.add_argument(
        "--gsp-num-turns",
        type=bounded(int, ge=1),
        default=1,
        help="generated-shared-prefix, chat backend: turns per conversation, each after the last reply",
    )
    group.add_argument(
        "--cache-hit-ratio",
        type=bounded(float, ge=0, le=1),
        default=0.5,
        help="shared-prefix target cache hit ratio",
    )
    group.add_argument("--gsp-fast-prepare", action="store_true", help="accepted; preparation is always fast")
    group.add_argument(
        "--gsp-prompts-per-group",
        type=bounded(int, ge=1),
        default=None,
        help="generated-shared-prefix: groups x this many requests, --num-prompts ignored "
        "(default: --num-prompts round-robin over the groups)",
    )
    group.add_argument(
        "--gsp-range-ratio",
        type=bounded(float, ge=0, le=1),
        default=1.0,
        help="generated-shared-prefix: lengths uniform in [L x ratio, L]; 1 (default): exactly L",
    )
    group.add_argument(
        "--gsp-send-routing-key",
        action="store_true",
        help="generated-shared-prefix: X-SMG-Routing-Key header, one key per group",
    )
    group.add_argument(
        "--gsp-ordered",
        action="store_true",
        help="with --gsp-prompts-per-group: group by group, not shuffled",
    )
    group.add_argument("--gsp-group-distribution", choices=("uniform", "zipf"), default="uniform")
    group.add_argument(
        "--gsp-zipf-alpha", type=float, default=None, help="zipf: p(rank) ~ rank**-alpha, group 0 hottest"
    )


def _gsp_only(args: argparse.Namespace) -> list[str]:
    given = {
        "--gsp-prompts-per-group": args.gsp_prompts_per_group is not None,
        "--gsp-range-ratio": args.gsp_range_ratio != 1.0,
        "--gsp-send-routing-key": args.gsp_send_routing_key,
        "--gsp-ordered": args.gsp_ordered,
        "--gsp-group-distribution": args.gsp_group_distribution != "uniform",
        "--gsp-zipf-alpha": args.gsp_zipf_alpha is not None,
    }
    return [flag for flag, on in given.items() if on]


def check_args(args: argparse.Namespace) -> None:
    if args.dataset_name != _NAME and _gsp_only(args):
        raise SpecError(f"{', '.join(_gsp_only(args))}: need --dataset-name {_NAME}")
    if args.gsp_num_turns != 1 and args.dataset_name != _NAME:
        raise SpecError(f"--gsp-num-turns needs --dataset-name {_NAME}")


def from_args(args: argparse.Namespace, backend: Backend) -> Built:
    """The dataset and its request count (None: --num-prompts decides)."""
    if args.gsp_system_prompt_len is not None or args.gsp_question_len is not None:
        sys_len = args.gsp_system_prompt_len or 0
        q_len = args.gsp_question_len or 1
        input_len, ratio = sys_len + q_len, sys_len / (sys_len + q_len)
    else:
        input_len, ratio = args.random_input_len, args.cache_hit_ratio
    if args.tokenize_prompt and args.gsp_num_turns > 1:
        raise SpecError("--tokenize-prompt requires --gsp-num-turns=1 (as bench_serving)")
    alpha = args.gsp_zipf_alpha
    # bench_serving's _validate_parsed_gsp_args.
    if args.gsp_group_distribution == "zipf" and alpha is None:
        raise SpecError("--gsp-group-distribution=zipf requires --gsp-zipf-alpha (a finite float > 0)")
    if args.gsp_group_distribution == "uniform" and alpha is not None:
        raise SpecError(
            "--gsp-zipf-alpha is only meaningful with --gsp-group-distribution=zipf; remove "
            "--gsp-zipf-alpha or set --gsp-group-distribution=zipf"
        )
    if alpha is not None and not (alpha > 0 and math.isfinite(alpha)):
        raise SpecError(f"--gsp-zipf-alpha must be a finite float > 0, got {alpha}")
    per_group = args.gsp_prompts_per_group
    if args.gsp_ordered and per_group is None:
        raise SpecError(
            "--gsp-ordered needs --gsp-prompts-per-group: without it requests already go "
            "round-robin over the groups, unshuffled"
        )
    ds = SharedPrefixDataset(
        input_len=input_len,
        output_len=args.gsp_output_len or args.random_output_len,
        cache_hit_ratio=ratio,
        num_groups=args.gsp_num_groups,
        num_turns=args.gsp_num_turns,
        prompts_per_group=per_group,
        ordered=args.gsp_ordered,
        range_ratio=args.gsp_range_ratio,
        zipf_alpha=alpha,
        routing_key=args.gsp_send_routing_key,
    )
    return Built(ds, None if per_group is None else ds.num_groups * per_group)


def warnings(args: argparse.Namespace) -> list[str]:
    per_group = args.gsp_prompts_per_group
    if per_group is None or args.num_prompts is None or args.num_prompts == args.gsp_num_groups * per_group:
        return []
    return [
        "--num-prompts is ignored with --gsp-prompts-per-group: the run sends --gsp-num-groups x "
        "--gsp-prompts-per-group requests (as bench_serving)"
    ]


class GroupPicker:
    """Which shared-prefix group each request uses (bench_serving's gsp assignment), and its key."""

    def __init__(self, ds: SharedPrefixDataset, seed: int) -> None:
        self._ds = ds
        self._rng = random.Random(seed ^ 0x6A0F)  # its own stream: prompts do not depend on it
        g = ds.num_groups
        self._weights = [(rank + 1) ** -ds.zipf_alpha for rank in range(g)] if ds.zipf_alpha else None
        self._plan: list[int] = []
        if ds.prompts_per_group is not None:
            total = g * ds.prompts_per_group
            if self._weights is None:
                self._plan = [k for k in range(g) for _ in range(ds.prompts_per_group)]
            else:
                self._plan = self._rng.choices(range(g), weights=self._weights, k=total)
            if not ds.ordered:
                self._rng.shuffle(self._plan)
        # As bench_serving: per run, so a router does not keep one run's routes for the next.
        stamp = f"{uuid.uuid4().hex[:8]}_{datetime.now().strftime('%Y%m%d%H%M%S')}"
        self._keys = [f"{stamp}_{k}" for k in range(g)] if ds.routing_key else None

    def group(self, i: int) -> int:
        if self._plan:
            return self._plan[i % len(self._plan)]
        if self._weights is not None:
            return self._rng.choices(range(self._ds.num_groups), weights=self._weights)[0]
        return i % self._ds.num_groups

    def routing_key(self, group: int) -> str | None:
        return None if self._keys is None else self._keys[group]


class SharedPrefixPrompts(Prompts):
    """The groups' prefixes (their own seeded stream: the same whatever the run's length), then
    per request a group and a suffix drawn from the run's stream."""

    def __init__(self, ds: SharedPrefixDataset, seed: int, text: bool) -> None:
        self._ds = ds
        prng = random.Random(seed ^ 0x5EED)
        self._prefix_lens = [drawn_len(prng, ds.prefix_len, ds.range_ratio) for _ in range(ds.num_groups)]
        self._prefixes: list[str | list[int]] = [
            random_words(prng, n) if text else random_ids(prng, n) for n in self._prefix_lens
        ]
        self._groups = GroupPicker(ds, seed)

    def prompt(self, i: int, rng: random.Random) -> Prompt:
        return self._shared_prefix(self._groups.group(i), rng)

    def requests(self, arrivals: int) -> int:
        return arrivals * self._ds.num_turns

    def warmup_prompts(self, rng: random.Random) -> list[Prompt]:
        # One per group whatever the groups' order or weights (a shuffled or Zipf plan), with
        # this run's routing keys: every prefix is cached where its requests will go.
        return [self._shared_prefix(g, rng) for g in range(self._ds.num_groups)]

    def _shared_prefix(self, group: int, rng: random.Random) -> Prompt:
        ds = self._ds
        ratio = ds.range_ratio
        n_suffix = ds.input_len - ds.prefix_len
        prefix = self._prefixes[group]
        out = drawn_len(rng, ds.output_len, ratio)
        key = self._groups.routing_key(group)
        if isinstance(prefix, str) and ds.num_turns > 1:
            # bench_serving's multi-turn shape: "<system prompt>\n\n<question 1>", then questions.
            questions = [random_words(rng, drawn_len(rng, n_suffix, ratio)) for _ in range(ds.num_turns)]
            first = [{"role": "user", "content": f"{prefix}\n\n{questions[0]}"}]
            return Prompt(first, 0, out, group, turns=tuple(questions[1:]), routing_key=key)
        n_q = drawn_len(rng, n_suffix, ratio)
        if isinstance(prefix, str):
            suffix = random_words(rng, n_q)
            text = f"{prefix} {suffix}" if prefix else suffix
            return Prompt(text, self._prefix_lens[group] + n_q, out, group, routing_key=key)
        return Prompt(prefix + random_ids(rng, n_q), len(prefix) + n_q, out, group, routing_key=key)


def load(ds: SharedPrefixDataset, spec: LoadSpec) -> SharedPrefixPrompts:
    return SharedPrefixPrompts(ds, spec.seed, text=spec.backend is not Backend.SGLANG)


def result_keys(ds: SharedPrefixDataset, spec: LoadSpec) -> Mapping[str, Any]:
    return {
        "dataset_name": _NAME,
        "random_input_len": ds.input_len,
        "random_output_len": ds.output_len,
        "random_range_ratio": ds.range_ratio,
        "shared_prefix_len": ds.prefix_len,
        "shared_prefix_groups": ds.num_groups,
        "target_cache_hit_ratio": ds.cache_hit_ratio,
        "gsp_prompts_per_group": ds.prompts_per_group,
        "gsp_group_distribution": "uniform" if ds.zipf_alpha is None else "zipf",
        "gsp_zipf_alpha": ds.zipf_alpha,
    }


SHARED_PREFIX = DatasetEntry(
    _NAME,
    SharedPrefixDataset,
    from_args,
    load,
    result_keys,
    add_flags=add_flags,
    check_args=check_args,
    warnings=warnings,
)
