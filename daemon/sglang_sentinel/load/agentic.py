"""bench_serving's `agentic-trace` dataset: multi-turn conversations read from a trace file.

The behaviour is bench_serving 0.5.23's (`sglang/benchmark/datasets/agentic_trace.py` and
`wrap_multi_turn_request_func` in `serving.py`): the conversation list rotated by
``--dataset-offset``, the first ``--num-prompts`` conversations that have a message, each capped
at ``--agentic-max-turns`` rounds, ``--sharegpt-output-len`` (default 220) output tokens per
round. A round is that turn's new messages, reduced to ``role`` and ``content`` as bench_serving
sends them; the replay (`sglang_sentinel.load.turns`) puts the server's real reply between rounds.
Unlike bench_serving, every conversation is checked before anything is sent, and a bad one stops
the run naming its place in the file (bench_serving fails mid-run with a ValueError).
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Mapping
from typing import Any

from sglang_sentinel.load.argtypes import bounded
from sglang_sentinel.load.dataset_entry import Built, DatasetEntry, FilePrompts
from sglang_sentinel.load.prompt import Prompt, read_json_file
from sglang_sentinel.load.spec import AgenticTraceDataset, Backend, LoadSpec, SpecError

__all__ = ["AGENTIC_TRACE", "load_agentic", "summary_lines"]


def _round(messages: Any, where: str) -> list[dict[str, Any]]:
    # bench_serving's _normalize_round_messages: a string is one user message; a list must hold
    # role/content objects, and only those two keys go out.
    if isinstance(messages, str):
        return [{"role": "user", "content": messages}]
    if isinstance(messages, list) and all(
        isinstance(m, dict) and isinstance(m.get("role"), str) and "content" in m for m in messages
    ):
        return [{"role": m["role"], "content": m["content"]} for m in messages]
    raise SpecError(f"{where}: 'messages' must be a string or a list of {{role, content}} objects")


def load_agentic(ds: AgenticTraceDataset) -> tuple[list[Prompt], int]:
    """One multi-turn `Prompt` per conversation, in replay order, and the offset applied
    (``--dataset-offset`` modulo the conversations); `SpecError` naming the place.

    Read once per file version: the command checks it, prints its summary and replays it."""
    try:
        st = ds.path.stat()
    except OSError as exc:
        raise SpecError(f"cannot read dataset {ds.path}: {exc}") from None
    return _load(ds, st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=2)
def _load(ds: AgenticTraceDataset, _mtime_ns: int, _size: int) -> tuple[list[Prompt], int]:
    data = read_json_file(ds.path)
    conversations = data.get("conversations") if isinstance(data, dict) else None
    if not isinstance(conversations, list) or not conversations:
        raise SpecError(f"{ds.path}: expected a JSON object with a non-empty 'conversations' list")
    offset = ds.offset % len(conversations)
    order = list(range(offset, len(conversations))) + list(range(offset))
    prompts: list[Prompt] = []
    for k in order:
        if ds.max_conversations is not None and len(prompts) >= ds.max_conversations:
            break
        conv = conversations[k]
        where = f"{ds.path}: conversations[{k}]"
        if not isinstance(conv, list) or not all(isinstance(t, dict) for t in conv):
            raise SpecError(f"{where}: expected a list of turn objects")
        rounds = [_round(t["messages"], f"{where}[{j}]") for j, t in enumerate(conv) if t.get("messages")]
        if ds.max_turns:
            rounds = rounds[: ds.max_turns]
        if not rounds:
            continue  # bench_serving skips a conversation without messages
        tokens = conv[0].get("prompt_tokens", 0)
        if not isinstance(tokens, int) or isinstance(tokens, bool) or tokens < 0:
            raise SpecError(f"{where}[0]: 'prompt_tokens' must be an integer >= 0, got {tokens!r}")
        # bench_serving keeps the trace's first prompt_tokens as the row's prompt_len, "informational
        # only": every round's input figure is the server's usage.prompt_tokens (both tools).
        prompts.append(Prompt(rounds[0], 0, ds.output_len, turns=tuple(rounds[1:])))
    if not prompts:
        raise SpecError(f"No usable conversations loaded from {ds.path}")
    return prompts, offset


def summary_lines(prompts: list[Prompt], offset: int, output_len: int) -> list[str]:
    """What bench_serving prints after loading the trace, same wording."""
    turns = [1 + len(p.turns) for p in prompts]
    return [
        f"#Conversations: {len(prompts)} (offset={offset}, turns/conv min={min(turns)} "
        f"max={max(turns)} avg={sum(turns) / len(turns):.1f})",
        f"#Output tokens per turn: {output_len}",
    ]


def add_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--dataset-offset",
        type=bounded(int, ge=0),
        default=0,
        help="agentic-trace: rotate the conversation list by this many entries first",
    )
    group.add_argument(
        "--agentic-max-turns",
        type=bounded(int, ge=1),
        default=None,
        help="agentic-trace: at most this many turns each",
    )


def check_args(args: argparse.Namespace) -> None:
    if args.dataset_name == "agentic-trace":
        return
    for flag, on in (
        ("--dataset-offset", args.dataset_offset != 0),
        ("--agentic-max-turns", args.agentic_max_turns is not None),
    ):
        if on:
            # bench_serving 0.5.23 reads it in the agentic-trace dataset only.
            raise SpecError(f"{flag} needs --dataset-name agentic-trace (the one dataset reading it)")


def _dataset(args: argparse.Namespace) -> AgenticTraceDataset:
    if args.dataset_path is None:
        raise SpecError(
            "--dataset-name agentic-trace needs --dataset-path  (sentinel bench downloads nothing)"
        )
    if not args.dataset_path.is_file():
        raise SpecError(f"dataset file not found: {args.dataset_path}")
    if args.agentic_max_turns is not None and args.agentic_max_turns < 1:
        raise SpecError(f"--agentic-max-turns must be >= 1, got {args.agentic_max_turns}")
    num = 1000 if args.num_prompts is None else args.num_prompts  # bench_serving's default
    return AgenticTraceDataset(
        args.dataset_path,
        max_conversations=num if num > 0 else None,  # bench_serving: <= 0 keeps them all
        output_len=args.sharegpt_output_len or 220,
        offset=args.dataset_offset,
        max_turns=args.agentic_max_turns,
    )


def from_args(args: argparse.Namespace, backend: Backend) -> Built:
    """The dataset and its conversation count; the whole file is checked here (exit 2)."""
    ds = _dataset(args)
    prompts, _ = load_agentic(ds)
    return Built(ds, len(prompts))


def notes(args: argparse.Namespace) -> list[str]:
    """What bench_serving prints about the trace it loaded, same wording."""
    ds = _dataset(args)
    prompts, offset = load_agentic(ds)
    return summary_lines(prompts, offset, ds.output_len)


def load(ds: AgenticTraceDataset, spec: LoadSpec) -> FilePrompts:
    return FilePrompts(load_agentic(ds)[0])


def result_keys(ds: AgenticTraceDataset, spec: LoadSpec) -> Mapping[str, Any]:
    return {
        "dataset_name": "agentic-trace",
        "dataset_path": str(ds.path),
        "dataset_offset": ds.offset,
        "agentic_max_turns": ds.max_turns,
        "sharegpt_output_len": ds.output_len,
    }


AGENTIC_TRACE = DatasetEntry(
    "agentic-trace",
    AgenticTraceDataset,
    from_args,
    load,
    result_keys,
    add_flags=add_flags,
    check_args=check_args,
    notes=notes,
)
