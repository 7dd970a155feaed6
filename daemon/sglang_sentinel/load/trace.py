"""Trace replay: bench_serving's `mooncake` dataset, read, checked and turned into timed prompts.

The behaviour is bench_serving 0.5.23's (`sglang/benchmark/datasets/mooncake.py` and
`get_mooncake_request_over_time` in `serving.py`), so one trace replays the same way in both
tools: the same prompts (text built from ``hash_ids``), the same arrival times, the same rounds.
Unlike bench_serving, every line is checked before anything is sent, and a bad one stops the run
with its file and line number (bench_serving fails with a KeyError mid-run, or on its first line
at ``json.loads``).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from sglang_sentinel.load.spec import MooncakeDataset, SpecError, json_object_line

__all__ = ["MOONCAKE_BLOCK_WORDS", "TraceSession", "load_mooncake", "mooncake_prompts", "warmup_text"]

# bench_serving's prompt block per hash id: the id, then "hi" this many times. A Mooncake block
# is 512 tokens of the original trace's model; bench_serving replays it shorter
# ("Shorter for multi-round"), and so do we, to send the same prompts.
MOONCAKE_BLOCK_WORDS = 128
_WARMUP_BLOCK_WORDS = 512  # bench_serving's warm-up prompt uses the long block
_DEFAULT_OUTPUT = 256  # bench_serving's default when a line has no output_length


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
