from __future__ import annotations

import itertools
from typing import Any

import pytest

from sglang_sentinel.calibrate import CalibrationSettings, SloSettings, Workload, run_search
from sglang_sentinel.calibrate.search import step_requests

WORKLOAD = Workload(
    base_url="http://127.0.0.1:1", backend="sglang", input_len=256, output_len=256, range_ratio=0
)


def settings(**kw: Any) -> CalibrationSettings:
    return CalibrationSettings(**kw)


async def test_full_sweep_finds_ceiling_and_knee_from_server_queue(synthetic: Any) -> None:
    server = synthetic(ceiling=200.0, max_running=24)
    result = await run_search(server, settings(), WORKLOAD)
    assert result.stop_reason == "saturated"
    sat = result.saturation_output_throughput.value
    assert sat is not None
    assert abs(sat - server.throughput(128)) / server.throughput(128) < 0.03
    # The queue, not a plateau step above it, stopped escalation: nothing beyond 32 was probed.
    assert max(p.concurrency for p in server.plans) == 32
    assert any("server queue" in r for s in result.steps for r in s.saturation_reasons)
    knee = result.knee_concurrency.value
    assert knee is not None
    assert len(result.knee_concurrency.steps) == 2
    lo = result.steps[result.knee_concurrency.steps[0]].concurrency
    assert knee / lo <= CalibrationSettings().resolution or knee - lo <= 1
    assert server.throughput(int(knee)) >= 0.9 * 0.98 * server.throughput(128)
    assert server.throughput(lo) < 0.9 * 1.02 * server.throughput(128)
    assert result.requests_spent == server.spent
    # The supporting steps of each figure exist and say what they are.
    assert all(i < len(result.steps) for i in result.saturation_output_throughput.steps)
    assert result.full_sweep_requests == result.requests_spent


async def test_plateau_without_server_metrics(synthetic: Any) -> None:
    server = synthetic(ceiling=200.0, max_running=None, metrics=False)
    result = await run_search(server, settings(), WORKLOAD)
    assert result.stop_reason == "saturated"
    assert any("plateau" in r for s in result.steps for r in s.saturation_reasons)
    sat = result.saturation_output_throughput.value
    assert sat is not None
    assert sat >= 0.95 * 200.0


async def test_a_plateau_that_read_low_is_judged_again_from_the_step_before_it(
    synthetic: Any,
) -> None:
    # Saturated from ~16 on (no queue: nothing server-side says so). The step at 32 reads 20% low,
    # so 16->32 is a plateau and 32->64 climbs out of it by 25% of linear: judged only against its
    # neighbour, the last step would overturn the plateau and the sweep would end as a lower bound.
    server = synthetic(ceiling=200.0, max_running=None, dips={32: 0.8})
    result = await run_search(server, settings(max_concurrency=64), WORKLOAD)
    assert result.stop_reason == "saturated"
    assert not result.lower_bound
    top = max(result.steps, key=lambda st: st.concurrency)
    assert top.concurrency == 64
    assert any(r.startswith("throughput plateau: 16->64 gained") for r in top.saturation_reasons)
    sat = result.saturation_output_throughput.value
    assert sat is not None
    assert sat >= 0.95 * 200.0


async def test_a_dip_on_a_server_that_still_scales_is_no_ceiling(synthetic: Any) -> None:
    # The same dip on a server far from its ceiling: 16->64 gains nearly all of linear, so the
    # plateau at 32 is not confirmed and the sweep reports the lower bound it is.
    server = synthetic(ceiling=1e6, max_running=None, dips={32: 0.5})
    result = await run_search(server, settings(max_concurrency=64), WORKLOAD)
    assert result.stop_reason == "max-concurrency"
    assert result.lower_bound
    step32 = next(st for st in result.steps if st.concurrency == 32)
    assert step32.saturated  # the dip did read as a plateau
    top = max(result.steps, key=lambda st: st.concurrency)
    assert not top.saturated, top.saturation_reasons


async def test_slo_boundary_is_bisected_and_goodput_reported(synthetic: Any) -> None:
    server = synthetic(ceiling=200.0, max_running=24)
    slo = SloSettings(tpot_seconds=0.105, tpot_percentile=50)
    result = await run_search(server, settings(slo=slo, resolution=1.15), WORKLOAD)
    limit = result.max_concurrency_within_slo.value
    assert limit is not None
    assert len(result.max_concurrency_within_slo.steps) == 2
    ok_i, bad_i = result.max_concurrency_within_slo.steps
    assert result.steps[ok_i].slo_ok
    assert not result.steps[bad_i].slo_ok
    assert result.steps[bad_i].concurrency / result.steps[ok_i].concurrency <= 1.15 or (
        result.steps[bad_i].concurrency - result.steps[ok_i].concurrency <= 1
    )
    assert any(s.phase == "refine-slo" for s in result.steps)
    assert result.max_rate_within_slo.value is not None
    assert result.max_rate_within_slo.value > 0
    assert result.goodput.value == pytest.approx(result.max_rate_within_slo.value)
    assert "TPOT p50" in result.max_concurrency_within_slo.note


async def test_stop_at_slo_stops_escalation(synthetic: Any) -> None:
    server = synthetic(ceiling=200.0, max_running=24)
    slo = SloSettings(ttft_seconds=0.3)
    result = await run_search(server, settings(slo=slo, stop_at_slo=True), WORKLOAD)
    assert result.stop_reason == "slo"
    assert "lower bound" in result.saturation_output_throughput.note


async def test_errors_stop_the_search(synthetic: Any) -> None:
    server = synthetic(error_from=8)
    result = await run_search(server, settings(), WORKLOAD)
    assert result.stop_reason == "errors"
    assert max(p.concurrency for p in server.plans) == 8
    at8 = next(s for s in result.steps if s.concurrency == 8)
    assert at8.slo_violations[0].startswith("error ratio")
    # The SLO boundary (error ratio) is then bracketed below the failing step.
    assert result.max_concurrency_within_slo.value is not None
    assert result.max_concurrency_within_slo.value < 8


async def test_client_bound_step_is_told_apart(synthetic: Any) -> None:
    server = synthetic(client_bound_from=16)
    result = await run_search(server, settings(), WORKLOAD)
    assert result.stop_reason == "client-bound"
    bound = next(s for s in result.steps if s.concurrency == 16)
    assert not bound.trusted
    assert bound.measurement.client_bound
    assert max(p.concurrency for p in server.plans) == 16
    assert any("load generator" in w for w in result.warnings)
    # The untrusted step sets no figure.
    assert bound.index not in result.saturation_output_throughput.steps


async def test_request_budget(synthetic: Any) -> None:
    server = synthetic()
    result = await run_search(server, settings(max_requests=30), WORKLOAD)
    assert result.stop_reason == "budget-requests"
    assert result.requests_spent <= 30
    assert "lower bound" in result.saturation_output_throughput.note


async def test_time_budget_with_fake_clock(synthetic: Any) -> None:
    server = synthetic()
    ticks = itertools.count(0.0, 10.0)
    result = await run_search(server, settings(max_duration=35), WORKLOAD, clock=lambda: next(ticks))
    assert result.stop_reason == "budget-time"
    assert 1 <= len(result.steps) <= 3


async def test_max_concurrency_without_saturation(synthetic: Any) -> None:
    server = synthetic(ceiling=10_000.0, max_running=None)
    result = await run_search(server, settings(max_concurrency=16), WORKLOAD)
    assert result.stop_reason == "max-concurrency"
    assert max(p.concurrency for p in server.plans) == 16


@pytest.mark.parametrize("scale", [0.85, 1.2])
async def test_incremental_tracks_capacity_change_in_a_third(synthetic: Any, scale: float) -> None:
    base = synthetic(ceiling=200.0, max_running=24)
    cfg = settings()
    full = await run_search(base, cfg, WORKLOAD)
    changed = synthetic(ceiling=200.0 * scale, per_stream=12.5 * scale, max_running=24, seed=11)
    inc = await run_search(changed, cfg, WORKLOAD, previous=full)
    assert inc.mode == "incremental"
    assert inc.seeded_from == full.started_at
    assert inc.requests_spent <= full.requests_spent / 3 + 1
    truth = changed.throughput(128)
    got = inc.saturation_output_throughput.value
    assert got is not None
    assert abs(got - truth) / truth < 0.05
    assert inc.full_sweep_requests == full.requests_spent
    assert inc.knee_concurrency.value is not None


async def test_incremental_after_capacity_grew_past_the_old_saturation_point(synthetic: Any) -> None:
    base = synthetic(ceiling=200.0, max_running=24)
    cfg = settings(incremental_budget_ratio=2.0)
    full = await run_search(base, cfg, WORKLOAD)
    grown = synthetic(ceiling=400.0, max_running=48)
    inc = await run_search(grown, cfg, WORKLOAD, previous=full)
    assert inc.steps[0].phase == "reprobe"
    assert not inc.steps[0].saturated
    assert any(s.phase == "escalate" for s in inc.steps)
    assert inc.stop_reason == "saturated"


def test_step_sizes() -> None:
    cfg = CalibrationSettings(step_min_requests=6, step_requests_per_slot=1.5)
    assert [step_requests(c, cfg) for c in (1, 4, 8, 32)] == [6, 6, 12, 48]


def test_settings_reject_inverted_range() -> None:
    with pytest.raises(ValueError, match="exceeds max_concurrency"):
        CalibrationSettings(start_concurrency=64, max_concurrency=8)


@pytest.mark.parametrize("scale", [0.82, 1.15])
async def test_incremental_estimates_a_ceiling_it_cannot_afford_to_reprobe(
    synthetic: Any, scale: float
) -> None:
    # A server that never saturates within max_concurrency: the ceiling is the top step, which a
    # third of the full sweep's requests cannot buy again; the incremental run probes as high as it
    # can and scales the old ceiling by the change it measured there.
    base = synthetic(ceiling=600.0, max_running=None, per_stream=12.5, metrics=True)
    cfg = settings(max_concurrency=64)  # below where this server would saturate
    full = await run_search(base, cfg, WORKLOAD)
    assert full.stop_reason == "max-concurrency"
    changed = synthetic(ceiling=600.0 * scale, per_stream=12.5 * scale, max_running=None, seed=3)
    inc = await run_search(changed, cfg, WORKLOAD, previous=full)
    assert inc.requests_spent <= full.requests_spent / 3
    truth = changed.throughput(64)
    got = inc.saturation_output_throughput.value
    assert got is not None
    assert abs(got - truth) / truth < 0.05
    assert inc.saturation_output_throughput.note.startswith("estimated")


async def test_incremental_measures_a_new_running_cap_directly(synthetic: Any) -> None:
    base = synthetic(ceiling=600.0, max_running=None)
    cfg = settings()
    full = await run_search(base, cfg, WORKLOAD)
    capped = synthetic(ceiling=600.0, max_running=50)
    inc = await run_search(capped, cfg, WORKLOAD, previous=full)
    assert inc.stop_reason == "saturated"
    assert any("server queue" in r for s in inc.steps for r in s.saturation_reasons)
    truth = capped.throughput(64)
    got = inc.saturation_output_throughput.value
    assert got is not None
    assert abs(got - truth) / truth < 0.05
    assert not inc.saturation_output_throughput.note.startswith("estimated")


def test_interpolation_on_log_log_axes() -> None:
    from datetime import UTC, datetime

    from sglang_sentinel.calibrate.model import Step, StepMeasurement
    from sglang_sentinel.calibrate.search import _interpolate

    def step(c: int, thr: float) -> Step:
        m = StepMeasurement(
            concurrency=c,
            started_at=datetime.now(UTC),
            duration=1,
            sent=c,
            completed=c,
            failed=0,
            output_throughput=thr,
            total_throughput=thr,
            request_throughput=1,
            mean_concurrency=c,
        )
        return Step(index=0, phase="escalate", measurement=m, slo_ok=True, saturated=False)

    steps = [step(16, 100.0), step(64, 400.0)]
    assert _interpolate(steps, 32) == pytest.approx(200.0)  # a power law is a line on log-log axes
    assert _interpolate(steps, 16) == 100.0
    assert _interpolate(steps, 128) is None


async def test_incremental_falls_back_to_full_sweep_when_seed_is_unusable(synthetic: Any) -> None:
    cfg = settings(full_sweep_every=2)
    full = await run_search(synthetic(), cfg, WORKLOAD)
    other = WORKLOAD.model_copy(update={"input_len": 1024})
    r = await run_search(synthetic(), cfg, other, previous=full)
    assert r.mode == "full"
    assert any("another server or workload" in w for w in r.warnings)
    inc1 = await run_search(synthetic(), cfg, WORKLOAD, previous=full)
    inc2 = await run_search(synthetic(), cfg, WORKLOAD, previous=inc1)
    assert (inc1.mode, inc1.incremental_depth, inc2.mode, inc2.incremental_depth) == (
        "incremental",
        1,
        "incremental",
        2,
    )
    assert inc2.full_sweep_requests == full.requests_spent
    third = await run_search(synthetic(), cfg, WORKLOAD, previous=inc2)
    assert third.mode == "full"
    assert third.incremental_depth == 0


async def test_cancel_returns_the_partial_result(synthetic: Any) -> None:
    import asyncio

    cancel = asyncio.Event()
    server = synthetic()

    def on_step(step: Any, _progress: Any) -> None:
        if step.index == 2:
            cancel.set()

    r = await run_search(server, settings(), WORKLOAD, on_step=on_step, cancel=cancel)
    assert r.stop_reason == "cancelled"
    assert len(r.steps) == 3
    assert r.saturation_output_throughput.value is not None
