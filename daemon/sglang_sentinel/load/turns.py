"""Multi-turn conversations with a shared history (bench_serving's --gsp-num-turns).

As bench_serving 0.5.23 (`wrap_multi_turn_request_func`): a conversation is one arrival; its
turns go out one after another on the chat route, turn t+1 as soon as turn t has finished, each
with the whole history so far (every user message and the assistant's real reply, reasoning then
content, "" for a failed turn, as bench_serving appends it), and it holds its `max_concurrency`
slot until its last turn ends. Every turn is one request in every figure; the per-turn rows
below the result block show how the figures move as the history grows (what a prefix cache
that keeps the history saves shows in TTFT and in `cached_tokens`).
"""

from __future__ import annotations

from collections import defaultdict
from typing import TYPE_CHECKING, Any

from sglang_sentinel.load.records import RequestRecord
from sglang_sentinel.load.stats import Summary, summarize

if TYPE_CHECKING:
    from sglang_sentinel.load.prompt import Prompt

__all__ = ["converse", "per_turn_figures", "per_turn_lines"]


async def converse(
    run: Any, rec: RequestRecord, body: bytes, prompt: Prompt, records: list[RequestRecord]
) -> None:
    """Run one conversation's turns; `run` is the engine's `_Run` (execute, body, now)."""
    from sglang_sentinel.load.prompt import Prompt

    messages = [dict(m) for m in prompt.content if isinstance(m, dict)]
    last = len(prompt.turns) + 1
    rec.turn = 1
    await run.execute(rec, body, release=last == 1)
    for t, question in enumerate(prompt.turns, 2):
        messages.append({"role": "assistant", "content": rec.text or ""})
        if isinstance(question, str):
            messages.append({"role": "user", "content": question})
        else:  # an agentic trace's round: its new messages (user, tool results...)
            messages.extend(dict(m) for m in question)
        now = run.now()
        nxt = RequestRecord(index=rec.index + 1, warmup=False, planned=now, ready=now)
        nxt.planned_output_len = prompt.output_len
        nxt.turn = t
        key = prompt.routing_key  # every turn, as bench_serving's wrapper copies the request
        turn_prompt = Prompt(list(messages), 0, prompt.output_len, prompt.group, routing_key=key)
        body = run.body(nxt, turn_prompt, prompt.output_len)
        records.append(nxt)
        rec = nxt
        await run.execute(rec, body, release=t == last)


def _mean_ms(s: Summary) -> float | None:
    return s.mean * 1e3 if s.count else None


def per_turn_figures(records: list[RequestRecord]) -> list[dict[str, Any]]:
    """Per turn of the successful measured requests: count, mean TTFT and E2E (ms), cached and
    prompt tokens (server-reported); empty unless the run had conversations."""
    by_turn: dict[int, list[RequestRecord]] = defaultdict(list)
    for r in records:
        if r.turn and not r.warmup and r.success:
            by_turn[r.turn].append(r)
    if len(by_turn) < 2:
        return []
    return [
        {
            "turn": t,
            "completed": len(rs),
            "mean_ttft_ms": _mean_ms(summarize([r.ttft for r in rs if r.ttft is not None])),
            "mean_e2e_latency_ms": _mean_ms(summarize([r.latency for r in rs if r.latency is not None])),
            "cached_tokens": sum(r.cached_tokens or 0 for r in rs),
            "prompt_tokens": sum(r.prompt_tokens or 0 for r in rs),
        }
        for t, rs in sorted(by_turn.items())
    ]


def per_turn_lines(records: list[RequestRecord]) -> list[str]:
    """``Turn t`` rows for the Sentinel block; none for single requests."""

    def ms(x: float | None) -> str:
        return "n/a" if x is None else f"{x:.2f}"

    lines = []
    for f in per_turn_figures(records):
        label = f"Turn {f['turn']} (ok, TTFT/E2E ms, cached/prompt):"
        ttft, e2e = ms(f["mean_ttft_ms"]), ms(f["mean_e2e_latency_ms"])
        lines.append(f"{label:<40} {f['completed']}, {ttft}/{e2e}, {f['cached_tokens']}/{f['prompt_tokens']}")
    return lines
