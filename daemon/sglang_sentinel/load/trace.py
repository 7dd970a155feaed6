"""Trace replay: bench_serving's `mooncake` dataset, read, checked and turned into timed prompts.

The behaviour is bench_serving 0.5.23's (`sglang/benchmark/datasets/mooncake.py` and
`get_mooncake_request_over_time` in `serving.py`), so one trace replays the same way in both
tools: the same prompts (text built from ``hash_ids``), the same arrival times, the same rounds.
Unlike bench_serving, every line is checked before anything is sent, and a bad one stops the run
with its file and line number (bench_serving fails with a KeyError mid-run, or on its first line
at ``json.loads``).

Its flags are bench_serving's (`--mooncake-slowdown-factor`, `--mooncake-num-rounds`,
`--mooncake-workload`, `--use-trace-timestamps`); what it does not do: download the trace
(`--dataset-path` is required), and replay on a backend other than `sglang` (bench_serving's
other backends fail on the trace's rows, so it is refused up front).
"""

from __future__ import annotations

import argparse
import contextlib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from sglang_sentinel.load.argtypes import bounded
from sglang_sentinel.load.dataset_entry import Built, DatasetEntry, FilePrompts
from sglang_sentinel.load.prompt import Prompt, prompt_counter
from sglang_sentinel.load.spec import (
    ArrivalProcess,
    Backend,
    LoadSpec,
    MooncakeDataset,
    SpecError,
    json_object_line,
)

__all__ = [
    "MOONCAKE",
    "MOONCAKE_BLOCK_WORDS",
    "TraceSession",
    "load_mooncake",
    "mooncake_prompts",
    "warmup_text",
]

# bench_serving's prompt block per hash id: the id, then "hi" this many times. A Mooncake block
# is 512 tokens of the original trace's model; bench_serving replays it shorter
# ("Shorter for multi-round"), and so do we, to send the same prompts.
MOONCAKE_BLOCK_WORDS = 128
_WARMUP_BLOCK_WORDS = 512  # bench_serving's warm-up prompt uses the long block
_DEFAULT_OUTPUT = 256  # bench_serving's default when a line has no output_length
# bench_serving's --mooncake-workload choices: which trace it downloads without --dataset-path.
_WORKLOADS = ("mooncake", "conversation", "synthetic", "toolagent")


@dataclass(frozen=True, slots=True)
class TraceSession:
    """One trace line: when its session starts (s, after slowdown), its blocks, its output."""

    offset: float
    hash_ids: tuple[int, ...]
    output_len: int
    line: int


def _int(obj: dict[str, Any], key: str, where: str, *, default: int | None = None, low: int = 0) -> int:
    value = obj.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool) or value < low:
        raise SpecError(f"{where}: {key!r} must be an integer >= {low}, got {value!r}")
    return value


def load_mooncake(ds: MooncakeDataset) -> list[TraceSession]:
    """The sessions a run replays, in start order; `SpecError` naming the file and line if bad."""
    try:
        lines = ds.path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read dataset {ds.path}: {exc}") from None
    raw: list[tuple[float, int, dict[str, Any]]] = []
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        if ds.max_sessions is not None and len(raw) >= ds.max_sessions:
            break  # bench_serving keeps the first --num-prompts lines, then sorts them
        where = f"{ds.path}:{lineno}"
        obj = json_object_line(line, where)
        ts = obj.get("timestamp")
        if not isinstance(ts, int | float) or isinstance(ts, bool) or not math.isfinite(ts) or ts < 0:
            raise SpecError(f"{where}: 'timestamp' (ms) must be a number >= 0, got {ts!r}")
        hash_ids = obj.get("hash_ids", [])
        if not isinstance(hash_ids, list) or not all(
            isinstance(h, int) and not isinstance(h, bool) for h in hash_ids
        ):
            raise SpecError(f"{where}: 'hash_ids' must be a list of integers")
        _int(obj, "output_length", where, default=_DEFAULT_OUTPUT, low=1)
        if "input_length" in obj:
            _int(obj, "input_length", where, low=0)  # checked, unused (as bench_serving)
        raw.append((float(ts), lineno, obj))
    if not raw:
        raise SpecError(f"dataset {ds.path} has no trace lines")
    raw.sort(key=lambda t: t[0])  # stable: equal timestamps keep their file order
    t0 = raw[0][0]
    return [
        TraceSession(
            offset=(ts - t0) / 1000.0 * ds.slowdown_factor,
            hash_ids=tuple(obj.get("hash_ids", [])),
            output_len=int(obj.get("output_length", _DEFAULT_OUTPUT)),
            line=lineno,
        )
        for ts, lineno, obj in raw
    ]


def _blocks(hash_ids: tuple[int, ...], words: int) -> str:
    block = " ".join(["hi"] * words)
    return "".join(f"{h}{block}" for h in hash_ids)


def mooncake_prompts(
    session: TraceSession, num_rounds: int, render: Callable[[list[dict[str, Any]]], str] | None = None
) -> list[str]:
    """The prompt text of each round of one session.

    As bench_serving: the history rendered with the tokenizer's chat template (`render`: the
    --tokenizer directory's, sglang_sentinel.load.chat_template), and ``role: content`` lines when
    there is none or it fails. The assistant turns are bench_serving's placeholder (``story``
    per output token): rounds go out together, so the real replies are not known yet."""
    base = _blocks(session.hash_ids, MOONCAKE_BLOCK_WORDS) + "Tell me a story based on this context."
    history: list[dict[str, Any]] = []
    prompts: list[str] = []
    for r in range(num_rounds):
        history.append({"role": "user", "content": f"Round {r + 1}: {base}"})
        text = None
        if render is not None:
            with contextlib.suppress(SpecError):  # bench_serving: any template error, the fallback
                text = render(history)
        prompts.append(
            text if text is not None else "\n".join(f"{m['role']}: {m['content']}" for m in history)
        )
        history.append({"role": "assistant", "content": " ".join(["story"] * session.output_len)})
    return prompts


def warmup_text(session: TraceSession) -> str:
    """bench_serving's warm-up prompt for a trace (first session, long blocks, another ending)."""
    return _blocks(session.hash_ids, _WARMUP_BLOCK_WORDS) + "Can you tell me a detailed story in 1000 words?"


def add_flags(group: argparse._ArgumentGroup) -> None:
    group.add_argument(
        "--use-trace-timestamps",
        action="store_true",
        help="mooncake: the trace's timestamps drive arrivals (always so; the rate prints as 'trace')",
    )
    group.add_argument(
        "--mooncake-slowdown-factor",
        type=bounded(float, ge=0),
        default=1.0,
        help="replay time scale: 2 is twice as slow (--request-rate is ignored)",
    )
    group.add_argument(
        "--mooncake-num-rounds",
        type=bounded(int, ge=1),
        default=1,
        help="rounds per session, sent together, each with the previous rounds as history",
    )
    group.add_argument(
        "--mooncake-workload",
        choices=_WORKLOADS,
        default="conversation",
        help="the trace bench_serving would download; sentinel bench needs --dataset-path",
    )


def check_args(args: argparse.Namespace) -> None:
    """bench_serving documents --use-trace-timestamps as valid for mooncake only."""
    if args.use_trace_timestamps and args.dataset_name != "mooncake":
        raise SpecError(
            "--use-trace-timestamps needs --dataset-name mooncake (the only dataset with timestamps)"
        )


def from_args(args: argparse.Namespace, backend: Backend) -> Built:
    """The dataset and its request count (sessions x rounds); the whole file is checked here,
    so a bad line stops the command (exit 2, file:line) before anything is sent."""
    if args.dataset_path is None:
        raise SpecError(
            "--dataset-name mooncake needs --dataset-path: bench_serving downloads the "
            f"{args.mooncake_workload!r} trace (--mooncake-workload); sentinel bench downloads nothing"
        )
    if backend is not Backend.SGLANG:
        raise SpecError(
            "--dataset-name mooncake needs --backend sglang: bench_serving replays traces on the "
            "native route only (its other backends fail on the trace's rows)"
        )
    if args.arrival is not None:
        raise SpecError("--arrival does not go with --dataset-name mooncake: the trace's timestamps are")
    factor = args.mooncake_slowdown_factor
    if not (factor >= 0 and math.isfinite(factor)):
        raise SpecError(f"--mooncake-slowdown-factor must be a number >= 0, got {factor:g}")
    if args.mooncake_num_rounds < 1:
        raise SpecError(f"--mooncake-num-rounds must be >= 1, got {args.mooncake_num_rounds}")
    if not args.dataset_path.is_file():
        raise SpecError(f"dataset file not found: {args.dataset_path}")
    ds = MooncakeDataset(
        args.dataset_path,
        # bench_serving keeps the first --num-prompts lines (default 1000).
        max_sessions=args.num_prompts if args.num_prompts is not None else 1000,
        slowdown_factor=args.mooncake_slowdown_factor,
        num_rounds=args.mooncake_num_rounds,
    )
    return Built(ds, len(load_mooncake(ds)) * ds.num_rounds, ArrivalProcess.TRACE)


def load(ds: MooncakeDataset, spec: LoadSpec) -> FilePrompts:
    """Every round's prompt with its session's send offset, and bench_serving's warm-up prompt."""
    sessions = load_mooncake(ds)
    count = prompt_counter(spec.tokenizer)
    render = None
    if spec.tokenizer is not None:
        from sglang_sentinel.load.chat_template import chat_template_if_any

        template = chat_template_if_any(spec.tokenizer)
        render = template.render if template is not None else None
    prompts: list[Prompt] = []
    offsets: list[float] = []
    for s in sessions:
        for text in mooncake_prompts(s, ds.num_rounds, render):
            prompts.append(Prompt(text, count(text), s.output_len))
            offsets.append(s.offset)
    text = warmup_text(sessions[0])
    warmup = Prompt(text, count(text), min(sessions[0].output_len, 32))
    return FilePrompts(prompts, offsets=offsets, warmup=warmup)


def warnings(args: argparse.Namespace) -> list[str]:
    """What bench_serving ignores in trace mode and says so (it prints a line; so do we), and a
    chat template that cannot render here."""
    out: list[str] = []
    if math.isfinite(args.request_rate):
        out.append(
            "--request-rate is ignored with --dataset-name mooncake: the trace's timestamps are the arrivals"
        )
    if args.tokenizer is not None:
        from sglang_sentinel.load.chat_template import load_chat_template

        try:
            load_chat_template(args.tokenizer)
        except SpecError as exc:
            if "needs the jinja2 library" in str(exc):  # a template bench_serving would render
                out.append(
                    f"{args.tokenizer} has a chat template but jinja2 is not installed: the mooncake "
                    "prompts are bench_serving's 'role: content' fallback (pip install "
                    "'sglang-sentinel[tokenizer]')"
                )
    return out


def result_keys(ds: MooncakeDataset, spec: LoadSpec) -> Mapping[str, Any]:
    return {
        "dataset_name": "mooncake",
        "dataset_path": str(ds.path),
        "mooncake_slowdown_factor": ds.slowdown_factor,
        "mooncake_num_rounds": ds.num_rounds,
    }


MOONCAKE = DatasetEntry(
    "mooncake",
    MooncakeDataset,
    from_args,
    load,
    result_keys,
    add_flags=add_flags,
    check_args=check_args,
    warnings=warnings,
)
