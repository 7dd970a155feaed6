"""The scheduler in virtual time: batching, chunked prefill, KV pressure, MTP."""

from __future__ import annotations

import asyncio

import pytest

from sglang_sentinel_sim.config import SimConfig
from sglang_sentinel_sim.engine import Engine, EngineHooks, Request
from sglang_sentinel_sim.profiles import Profile, get_profile
from sglang_sentinel_sim.reqstate import INJECTED_ABORT
from sglang_sentinel_sim.text import Script
from support.sim_virtual import simulate
from support.waits import until

GLM = get_profile("glm5-nvfp4-8x-rtxpro6000")


def test_single_request_timing_follows_the_model() -> None:
    (r,) = simulate(GLM, [(0.0, 100, 10)])
    prefill = GLM.prefill_base_s + 100 / GLM.prefill_tokens_per_s
    assert abs(r.ttft - prefill) < 1e-9
    # 9 decode steps with 1 running, 101..109 KV tokens of which 1..9 generated
    steps = sum(
        GLM.decode_base_s
        + GLM.decode_per_req_s
        + GLM.decode_per_kv_token_s * (101 + k)
        + GLM.decode_per_gen_token_s * (1 + k)
        for k in range(9)
    )
    assert abs(r.e2e - (prefill + steps)) < 1e-9
    assert r.output_tokens == 10


def test_batching_shares_steps() -> None:
    alone = simulate(GLM, [(0.0, 50, 100)])[0].e2e
    together = simulate(GLM, [(0.0, 50, 100)] * 8)
    assert all(r.output_tokens == 100 for r in together)
    # 8 streams take far less than 8x one stream: they share decode steps.
    assert max(r.e2e for r in together) < 1.3 * alone


def test_chunked_prefill_splits_long_prompts() -> None:
    profile = GLM.with_overrides(chunked_prefill_size=1000)
    (r,) = simulate(profile, [(0.0, 3500, 2)])
    prefill = 4 * profile.prefill_base_s + 3500 / profile.prefill_tokens_per_s
    assert abs(r.ttft - prefill) < 1e-9


class _Recorder(EngineHooks):
    def __init__(self) -> None:
        self.retractions: list[tuple[int, float, float]] = []
        self.prefills: list[int] = []

    def on_retract(self, engine: Engine, retracted: list[Request], old: float, new: float) -> None:
        self.retractions.append((len(retracted), old, new))

    def on_prefill_batch(
        self, engine: Engine, new_seqs: list[Request], new_tokens: int, cached: int, done: list[Request]
    ) -> None:
        self.prefills.append(new_tokens)


def _drive(engine: Engine, reqs: list[Request]) -> float:
    t = 0.0
    for req in reqs:
        engine.submit(req)
    while engine.busy:
        t += engine._plan_and_cost()
        engine._apply(t)
    return t


def test_kv_pressure_queues_and_retracts_but_everything_finishes() -> None:
    profile = get_profile("tiny-llama-1x-h200").with_overrides(max_total_num_tokens=3000)
    hooks = _Recorder()
    engine = Engine(profile, hooks=hooks, clock=lambda: 0.0)
    reqs = [Request(f"r{i}", 200, 400, Script([], 0, 1), ignore_eos=True) for i in range(12)]
    _drive(engine, reqs)
    assert all(r.generated == 400 for r in reqs)
    assert hooks.retractions, "a 3000-token pool cannot hold 12 x 600 tokens without retracting"
    assert sum(r.retractions for r in reqs) == engine.stats.retracted_reqs
    n, old, new = hooks.retractions[0]
    assert n >= 1
    assert new > old  # the ratio jumps after a retraction
    assert engine.kv_used == 0


def test_prompt_larger_than_pool_is_aborted_not_stuck() -> None:
    profile = get_profile("tiny-llama-1x-h200").with_overrides(max_total_num_tokens=100)
    engine = Engine(profile, clock=lambda: 0.0)
    req = Request("big", 500, 10, Script([], 0, 1), ignore_eos=True)
    _drive(engine, [req])
    assert req.finish_reason() is not None
    assert req.finish_reason()["type"] == "abort"  # type: ignore[index]


def test_mtp_emits_several_tokens_per_step_with_the_profile_accept_length() -> None:
    mtp = get_profile("glm5-nvfp4-8x-rtxpro6000-mtp")
    engine = Engine(mtp, clock=lambda: 0.0, seed=3)
    req = Request("m", 10, 2000, Script([], 0, 1), ignore_eos=True)
    _drive(engine, [req])
    assert req.generated == 2000
    accept = (req.generated - 1) / req.spec_steps
    assert abs(accept - mtp.mtp_accept_length) < 0.1


def test_prefix_cache_hits_repeated_prompts() -> None:
    engine = Engine(GLM, clock=lambda: 0.0)
    first = Request("a", 300, 5, Script([], 0, 1), prompt_key="same", ignore_eos=True)
    _drive(engine, [first])
    second = Request("b", 300, 5, Script([], 0, 1), prompt_key="same", ignore_eos=True)
    _drive(engine, [second])
    assert first.cached_tokens == 0
    assert second.cached_tokens == 299
    assert engine.flush_cache()
    third = Request("c", 300, 5, Script([], 0, 1), prompt_key="same", ignore_eos=True)
    _drive(engine, [third])
    assert third.cached_tokens == 0


def test_lone_request_outgrowing_the_pool_is_aborted_not_overcommitted() -> None:
    profile = get_profile("tiny-llama-1x-h200").with_overrides(max_total_num_tokens=300)
    engine = Engine(profile, clock=lambda: 0.0)
    req = Request("grow", 100, 400, Script([], 0, 1), ignore_eos=True)
    _drive(engine, [req])
    reason = req.finish_reason()
    assert reason is not None
    assert reason["type"] == "abort"
    assert "Out of memory" in reason["message"]
    assert req.generated == 200  # exactly what fit
    assert engine.kv_used == 0


@pytest.mark.parametrize(
    ("profile", "fault_at"), [(GLM, 3), (GLM, 1), (get_profile("glm5-nvfp4-8x-rtxpro6000-mtp"), 5)]
)
def test_the_error_chunk_fault_ends_the_request_at_its_token_with_no_handler_awake(
    profile: Profile, fault_at: int
) -> None:
    """The engine itself stops a stream at its planned error (reqstate.Request.fault_at): on a busy
    box the handler wakes late, and a request that had meanwhile run to its end came back whole.
    MTP's several tokens a step do not step over it; one that ends first is not touched."""
    engine = Engine(profile, clock=lambda: 0.0, seed=1)
    faulted = Request("f", 50, 400, Script([], 0, 1), ignore_eos=True)
    faulted.fault_at = fault_at
    short = Request("s", 50, fault_at, Script([], 0, 1), ignore_eos=True)
    short.fault_at = fault_at
    plain = Request("p", 50, 40, Script([], 0, 1), ignore_eos=True)
    _drive(engine, [faulted, short, plain])
    assert faulted.generated == fault_at
    assert faulted.finish_reason() == {
        "type": "abort", "message": INJECTED_ABORT, "status_code": 500, "err_type": None
    }  # fmt: skip
    assert short.finish_reason() == {"type": "length", "length": fault_at}
    assert plain.generated == 40
    assert plain.finish_reason() == {"type": "length", "length": 40}
    assert engine.kv_used == 0
    assert not engine.running


@pytest.mark.parametrize("scale", [0.85, 1.2])
def test_capacity_scale_divides_every_time_constant(scale: float) -> None:
    scaled = SimConfig(capacity_scale=scale).resolved_profile()
    for name in ("prefill_base_s", "decode_base_s", "decode_per_req_s", "decode_per_kv_token_s"):
        assert getattr(scaled, name) == pytest.approx(getattr(GLM, name) / scale)
    assert scaled.decode_per_gen_token_s == pytest.approx(GLM.decode_per_gen_token_s / scale)
    assert 1 / scaled.prefill_tokens_per_s == pytest.approx(1 / GLM.prefill_tokens_per_s / scale)
    # Start-up and limits are not performance constants.
    assert (scaled.load_weights_s, scaled.max_total_num_tokens) == (
        GLM.load_weights_s,
        GLM.max_total_num_tokens,
    )
    # Every forward's duration scales, so a whole mixed workload takes exactly 1/F as long.
    load = [(0.0, 300, 40), (0.1, 50, 80), (0.2, 900, 20)]
    base = simulate(GLM, load)
    fast = simulate(scaled, [(t / scale, n, m) for t, n, m in load])
    for b, f in zip(base, fast, strict=True):
        assert f.ttft == pytest.approx(b.ttft / scale)
        assert f.e2e == pytest.approx(b.e2e / scale)
    assert SimConfig().resolved_profile() == GLM


async def test_a_request_that_came_while_the_loop_was_late_waits_for_the_next_forward() -> None:
    """A forward sees only the requests that had reached the scheduler when it started.

    The loop plans when it wakes; on a busy host that is after the forward's start (the engine
    then catches up). Here the clock jumps past B's arrival before the loop first wakes, as a busy
    host would have it: B must not join A's prefill, which began before B arrived, nor pull that
    prefill forward to B's arrival; both must be served exactly as an engine on time serves them
    (the virtual engine, support.sim_virtual)."""
    speed = 1000.0
    now = [0.0]
    engine = Engine(GLM, speed=speed, clock=lambda: now[0], seed=1)
    engine.start()
    await asyncio.sleep(0)  # the loop starts, idle, at 0
    try:
        a = Request("a", 50, 20, Script([], 0, 1), ignore_eos=True)
        b = Request("b", 50, 20, Script([], 0, 1), ignore_eos=True)
        engine.submit(a)
        # In the middle of A's third decode step (server seconds), before the loop woke at all.
        arrival_b = GLM.prefill_base_s + 50 / GLM.prefill_tokens_per_s + 2.5 * GLM.decode_base_s
        now[0] = arrival_b / speed
        engine.submit(b)
        await until(lambda: not engine.busy, what="the engine finishing both requests")
    finally:
        await engine.stop()
    want_a, want_b = simulate(GLM, [(0.0, 50, 20), (arrival_b, 50, 20)])
    for served, want in ((a, want_a), (b, want_b)):
        assert served.generated == 20
        assert served.first_token_at * speed == pytest.approx(want.first_token, abs=1e-6), served.rid
        assert served.finished_at * speed == pytest.approx(want.finish, abs=1e-6), served.rid
