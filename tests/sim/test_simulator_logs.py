"""The simulator's log lines, parsed by the same parser as the real SGLang samples."""

from __future__ import annotations

import asyncio
import io
import time
from pathlib import Path

import httpx

from sglang_sentinel.sglang.logparse import (
    DecodeBatch,
    HealthCheckFailed,
    HttpAccess,
    KvRetraction,
    Milestone,
    MilestoneKind,
    PrefillBatch,
    ServerCapacity,
    parse_line,
)
from sglang_sentinel_sim import serve

# Real SGLang output (copies of the project's reference samples, kept in the repository).
SAMPLES = Path(__file__).resolve().parents[1] / "collect" / "samples"


def _fields(event: object) -> set[str]:
    return {k for k in event.__slots__ if getattr(event, k) not in (None, ())}  # type: ignore[attr-defined]


def _real_events(kind: type) -> list[object]:
    out: list[object] = []
    for path in sorted(SAMPLES.glob("sglang-*.txt")) if SAMPLES.exists() else []:
        for line in path.read_text().splitlines():
            ev = parse_line(line)
            if isinstance(ev, kind):
                out.append(ev)
    return out


async def test_startup_milestones_batches_and_access_lines() -> None:
    err, out = io.StringIO(), io.StringIO()
    async with serve(speed=100, err=err, out=out) as sim, httpx.AsyncClient(base_url=sim.base_url) as c:
        await c.post(
            "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 130, "ignore_eos": True}}
        )
        decode_steps = sim.engine.stats.decode_steps
    events = [parse_line(line) for line in err.getvalue().splitlines()]
    kinds = [e.kind for e in events if isinstance(e, Milestone)]
    for k in (
        MilestoneKind.SERVER_ARGS,
        MilestoneKind.INIT_DISTRIBUTED_BEGIN,
        MilestoneKind.LOAD_WEIGHT_BEGIN,
        MilestoneKind.LOAD_WEIGHT_END,
        MilestoneKind.KV_CACHE_ALLOCATED,
        MilestoneKind.MEMORY_POOL_END,
        MilestoneKind.HTTP_LISTENING,
        MilestoneKind.READY,
    ):
        assert k in kinds, k
    assert (
        kinds.index(MilestoneKind.LOAD_WEIGHT_END)
        < kinds.index(MilestoneKind.HTTP_LISTENING)
        < kinds.index(MilestoneKind.READY)
    )
    assert sum(1 for k in kinds if k == MilestoneKind.LOAD_WEIGHT_BEGIN) == 8  # one per TP rank
    (cap,) = [e for e in events if isinstance(e, ServerCapacity)]
    assert cap.max_total_num_tokens == 524288
    assert cap.ranks.tp == 0
    decodes = [e for e in events if isinstance(e, DecodeBatch)]
    assert len(decodes) == decode_steps // 40  # every 40 decode steps (warm-up included)
    assert all(d.ranks.tp == 0 and d.cuda_graph is False for d in decodes)
    assert all(d.gen_throughput is not None and d.gen_throughput > 0 for d in decodes)
    prefills = [e for e in events if isinstance(e, PrefillBatch)]
    assert [p.new_token for p in prefills] == [7, 1]  # the warm-up, then our 1-token prompt
    accesses = [parse_line(line) for line in out.getvalue().splitlines()]
    assert any(isinstance(a, HttpAccess) and a.path == "/generate" and a.status == 200 for a in accesses)


async def test_layout_matches_real_samples() -> None:
    err = io.StringIO()
    async with serve(speed=100, err=err) as sim, httpx.AsyncClient(base_url=sim.base_url) as c:
        await c.post(
            "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 90, "ignore_eos": True}}
        )
        del sim
    events = [parse_line(line) for line in err.getvalue().splitlines()]
    sim_decode = next(e for e in events if isinstance(e, DecodeBatch))
    sim_prefill = next(e for e in events if isinstance(e, PrefillBatch))
    real_decode = _real_events(DecodeBatch)
    real_prefill = _real_events(PrefillBatch)
    assert real_decode, "reference samples missing"
    # The plain v0.5.9 decode layout (sgl-project/sglang#22331's sample): same fields, nothing unknown.
    assert any(_fields(r) == _fields(sim_decode) for r in real_decode)
    assert sim_decode.extra == ()
    assert sim_prefill.extra == ()
    assert {
        "new_seq",
        "new_token",
        "cached_token",
        "token_usage",
        "running_req",
        "queue_req",
        "input_throughput",
    } <= _fields(sim_prefill)
    assert real_prefill


async def test_retraction_and_health_failure_lines() -> None:
    err = io.StringIO()
    async with (
        serve(
            speed=400, profile="tiny-llama-1x-h200", max_total_tokens=2000, err=err, health_timeout=20.0
        ) as sim,
        httpx.AsyncClient(base_url=sim.base_url) as c,
    ):
        body = {"input_ids": list(range(100)), "sampling_params": {"max_new_tokens": 400, "ignore_eos": True}}
        rs = await asyncio.gather(*(c.post("/generate", json=body) for _ in range(10)))
        assert all(r.status_code == 200 for r in rs)
        async with httpx.AsyncClient(base_url=sim.control_url) as ctl:
            await ctl.post("/faults", json={"name": "hang", "params": {"watchdog": 0}})
            assert (await c.get("/health")).status_code == 503
            assert (await ctl.get("/state")).json()["status"] == "unhealthy"
            await ctl.delete("/faults/hang")
        # Healthy again once the scheduler runs: waited for, since on a busy box a probe right
        # after the thaw can still miss its 50 ms (20 server seconds at speed 400) and fail.
        deadline = time.monotonic() + 30
        while (await c.get("/health")).status_code != 200:
            assert time.monotonic() < deadline, "/health did not recover after the hang was cleared"
            await asyncio.sleep(0.05)
    events = [parse_line(line) for line in err.getvalue().splitlines()]
    retractions = [e for e in events if isinstance(e, KvRetraction)]
    assert retractions
    assert retractions[0].new_token_ratio_after is not None
    failures = [e for e in events if isinstance(e, HealthCheckFailed)]
    assert failures  # the hang's (and any probe a busy box made miss its deadline after it)
    assert {f.timeout_seconds for f in failures} == {20.0}
