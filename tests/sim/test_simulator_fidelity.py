"""The default profile reproduces the deployment's figures (docs/sim.md, benchmarks/sim_fidelity.py)."""

from __future__ import annotations

import asyncio

import pytest

from sentinel_sim.profiles import DEFAULT_PROFILE, get_profile
from support.sim_fidelity import (
    TARGETS,
    Figures,
    drive_scenario,
    run_virtual,
    scenario_all_at_once,
    scenario_poisson,
)

# Relative tolerance per figure (the fit lands within ~3 % of every figure).
TOLERANCE = {
    "single_stream_out_tps": 0.03,
    "decode_tps_at_21": 0.03,
    "s32_out_tps": 0.03,
    "s32_total_tps": 0.03,
    "s32_mean_concurrency": 0.05,
    "s64_out_tps": 0.02,
    "s64_total_tps": 0.02,
    "s64_peak_concurrency": 0.0,
}


def test_virtual_engine_reproduces_the_figures() -> None:
    got = run_virtual(get_profile(DEFAULT_PROFILE))
    for key, target in TARGETS.items():
        assert abs(got[key] / target - 1) <= TOLERANCE[key] + 1e-9, (key, got[key], target)


@pytest.mark.slow
def test_served_simulator_matches_its_engine_over_http(sim_factory) -> None:  # type: ignore[no-untyped-def]
    speed = 8.0
    sim = sim_factory("--speed", str(speed), "--disable-access-log")
    virtual = run_virtual(get_profile(DEFAULT_PROFILE))

    async def both() -> tuple[Figures, Figures]:
        s32 = await drive_scenario(sim.base_url, scenario_all_at_once(), speed)
        s64 = await drive_scenario(sim.base_url, scenario_poisson(), speed)
        return s32, s64

    s32, s64 = asyncio.run(both())
    lag = sim.control("/state")["engine"]["max_lag_s"]
    live = {
        "s32_out_tps": s32.out_tps,
        "s32_total_tps": s32.total_tps,
        "s32_mean_concurrency": s32.mean_concurrency,
        "s64_out_tps": s64.out_tps,
        "s64_total_tps": s64.total_tps,
    }
    for key, value in live.items():
        # HTTP, the client and a shared CPU add a little to every request; 6 % covers it.
        assert abs(value / virtual[key] - 1) <= 0.06, (key, value, virtual[key], f"engine lag {lag:.3f} s")
    assert s64.peak_concurrency >= 62
    assert s32.completed == 32
    assert s64.completed == 64
