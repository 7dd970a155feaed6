"""What one server life measures: the correctness gate, calibrations, the reference profile.

The gate comes first and decides alone: a configuration that answers wrong is rejected however
fast it is. Its prompts are the configured canaries (known answers, ``[server.checks.canary]``)
and a known-answer question of the simulator's and SGLang's usual test set, cycled, then plain
prompts checked by the garbage/NaN detector only, up to ``correctness_prompts``.
"""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from sglang_sentinel.calibrate.model import CalibrationResult
from sglang_sentinel.calibrate.settings import CalibrationSettings
from sglang_sentinel.schedule.settings import LoadProfileSettings
from sglang_sentinel.supervise.probes import probe_canary
from sglang_sentinel.supervise.settings import CanaryCheckSettings, CanarySettings

__all__ = [
    "calibration_round",
    "correctness_prompts",
    "gate_reason",
    "reference_round",
    "run_gate",
    "tune_calibration",
]

_EXTRA_KNOWN = (
    CanarySettings(
        name="capital", prompt="What is the capital of France? Answer in one word.", expect=r"\bparis\b"
    ),
)
_OPEN_TOPICS = (
    "how a request queue drains",
    "why a cache helps a server",
    "what a batch of requests is",
    "how latency is measured",
    "what a token is",
    "why memory limits matter",
)
# Concurrent gate prompts: enough to finish a few dozen quickly, few enough not to be a load test.
_GATE_CONCURRENCY = 8


def correctness_prompts(canary: CanaryCheckSettings, count: int, max_tokens: int) -> list[CanarySettings]:
    known = [*canary.canaries, *_EXTRA_KNOWN]
    prompts: list[CanarySettings] = []
    # Each known-answer prompt at least once (when count allows), then open prompts, alternating.
    for i in range(count):
        if i < len(known) or i % 3 == 0:
            base = known[i % len(known)]
            prompts.append(base.model_copy(update={"name": f"{base.name}_{i:02d}"}))
        else:
            topic = _OPEN_TOPICS[i % len(_OPEN_TOPICS)]
            prompts.append(
                CanarySettings(
                    name=f"open_{i:02d}",
                    prompt=f"In two sentences, explain {topic}.",
                    expect=r"\S",
                    max_tokens=max_tokens,
                )
            )
    return prompts


async def run_gate(
    client: httpx.AsyncClient, canary: CanaryCheckSettings, count: int, max_tokens: int
) -> dict[str, Any]:
    """The document's ``correctness``: passed, prompts, failures [{prompt, why}]."""
    prompts = correctness_prompts(canary, count, max_tokens)
    sem = asyncio.Semaphore(_GATE_CONCURRENCY)

    async def one(c: CanarySettings) -> tuple[CanarySettings, Any]:
        async with sem:
            return c, await probe_canary(client, c, canary)

    results = await asyncio.gather(*(one(c) for c in prompts))
    failures = []
    for c, r in results:
        if not r.ok:
            why = r.reason + (f": {r.detail[:120]!r}" if r.detail else "")
            failures.append({"prompt": c.prompt, "why": why})
    return {"passed": not failures, "prompts": len(prompts), "failures": failures}


def gate_reason(correctness: dict[str, Any]) -> str:
    failures = correctness["failures"]
    first = failures[0]
    return (
        f"correctness gate: {len(failures)} of {correctness['prompts']} prompts failed; "
        f"e.g. {first['prompt'][:60]!r}: {first['why']}"
    )


def calibration_round(kind: str, result: CalibrationResult) -> dict[str, Any]:
    sat = result.saturation_output_throughput
    step = None
    if sat.steps:
        by_index = {s.index: s for s in result.steps}
        step = by_index.get(sat.steps[-1])
    m = step.measurement if step is not None else None
    tokens = sum(round(s.measurement.total_throughput * s.measurement.duration) for s in result.steps)
    return {
        "kind": kind,
        "throughput_tok_s": sat.value,
        "ttft_p99_s": m.ttft.p99 if m is not None and m.ttft is not None else None,
        "tpot_p50_s": m.tpot.p50 if m is not None and m.tpot is not None else None,
        "knee_concurrency": result.knee_concurrency.value,
        # Where the saturation figure was measured: the race's probes of the other configurations
        # run at this concurrency (tune_calibration).
        "saturation_concurrency": step.concurrency if step is not None else None,
        "slo_capacity_rps": result.max_rate_within_slo.value,
        "tokens": tokens,
        "duration_s": round(result.duration, 3),
        "stop_reason": result.stop_reason,
    }


async def reference_round(
    name: str, profile: LoadProfileSettings, base_url: str, api_key: str
) -> dict[str, Any]:
    from sglang_sentinel.load.records import LoadCounters
    from sglang_sentinel.schedule.executor import LoadEngineExecutor
    from sglang_sentinel.schedule.plan import plan_run

    plan = plan_run(name, profile, 1.0)
    report = await LoadEngineExecutor(base_url, api_key)(plan, LoadCounters(), asyncio.Event())
    s = report.summary
    return {
        "kind": "reference",
        "profile": name,
        "throughput_tok_s": s.get("output_throughput") if report.figures is not None else None,
        "ttft_p99_s": s.get("ttft_p99"),
        "tpot_p50_s": s.get("tpot_p50"),
        "knee_concurrency": None,
        "slo_capacity_rps": None,
        "tokens": report.input_tokens + report.output_tokens + report.warmup_tokens,
        "duration_s": s.get("duration"),
        "failures": report.failures,
    }


def tune_calibration(
    base: CalibrationSettings,
    kind: str,
    *,
    short_requests: int,
    short_max_concurrency: int | None,
    ttft_p99_s: float | None,
    tpot_p99_s: float | None,
    probe_concurrency: int | None = None,
    repeat: int = 0,
) -> CalibrationSettings:
    """[calibration] for a tune round: the tune's SLO; a short round on a smaller request budget.

    With ``probe_concurrency`` (the race, once the first configuration's full calibration found
    where it saturates) the short round is one step at that concurrency: two requests per slot,
    prompts of another seed than the full calibration's (a server that just ran the full
    calibration must not answer the probe from its prefix cache). One step is what makes it
    cheaper than a full calibration, whose low-concurrency steps cost the most wall time."""
    data = base.model_dump()
    slo = dict(data["slo"])
    if ttft_p99_s is not None:
        slo.update(ttft_seconds=ttft_p99_s, ttft_percentile=99)
    if tpot_p99_s is not None:
        slo.update(tpot_seconds=tpot_p99_s, tpot_percentile=99)
    data["slo"] = slo
    # Repeat n of a round in one server life: other prompts (a prefix cache must not answer it).
    data["seed"] = base.seed + 101 * repeat
    if kind == "short" and probe_concurrency is not None:
        c = max(1, probe_concurrency)
        requests = max(base.step_min_requests, 2 * c)
        data.update(
            start_concurrency=c,
            max_concurrency=c,
            step_requests_per_slot=max(base.step_requests_per_slot, 2.0),
            max_requests=requests,
            seed=base.seed + 7919 + 101 * repeat,
        )
    elif kind == "short":
        data["max_requests"] = min(base.max_requests, short_requests)
        top = short_max_concurrency if short_max_concurrency is not None else base.max_concurrency
        data["max_concurrency"] = top
        # A ranking needs the ceiling, not the low steps: start at a quarter of the top concurrency
        # (each step costs about one request's latency, whatever its concurrency).
        data["start_concurrency"] = max(base.start_concurrency, top // 4, 1)
        data["start_concurrency"] = min(data["start_concurrency"], top)
    return CalibrationSettings.model_validate(data)


def saturation_concurrency(trial: dict[str, Any]) -> int | None:
    """Where this trial's first full calibration saturated (None: no full round yet)."""
    for r in trial.get("rounds", ()):
        if r.get("kind") == "full" and isinstance(r.get("saturation_concurrency"), int):
            return int(r["saturation_concurrency"])
    return None
