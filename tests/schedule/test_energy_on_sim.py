"""GPU energy per output token of scheduled runs: the load engine against the simulator, the GPUs
a fake NVML whose counters run at the real H200's busy power (651.508 W), step, reset and vanish."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sglang_sentinel.collect.gpu import FakeNvml, GpuPoller
from sglang_sentinel.collect.gpu.energy import (
    COUNTER_RESOLUTION_JOULES,
    EnergyMeter,
    EnergySample,
    IdleBaseline,
    LoadMeter,
)
from sglang_sentinel.schedule.executor import LoadEngineExecutor
from sglang_sentinel.schedule.metrics import ScheduleMetrics
from sglang_sentinel.schedule.polite import ServerLoadReader
from sglang_sentinel.schedule.scheduler import LoadScheduler
from sglang_sentinel.schedule.settings import ScheduleSettings
from sglang_sentinel.statedir import StateDir
from support import energy_fixtures
from support.energy_fixtures import BUSY_WATTS, UUIDS

# The shared fake GPUs and their poller (tests/support/energy_fixtures.py), as this module's fixtures.
fake = energy_fixtures.fake
poller = energy_fixtures.poller


class ReadyServer:
    def __init__(self) -> None:
        self.epoch = time.time() - 600

    def ready_epoch(self) -> float | None:
        return self.epoch

    def launch_hash(self) -> str | None:
        return "sim"

    def started_warm(self) -> bool:
        return False


@pytest.fixture
async def readers() -> AsyncIterator[list[ServerLoadReader]]:
    made: list[ServerLoadReader] = []
    yield made
    for reader in made:
        await reader.aclose()


def _scheduler(
    tmp_path: Path, base_url: str, meter: LoadMeter, readers: list[ServerLoadReader]
) -> LoadScheduler:
    reader = ServerLoadReader(base_url, "metrics", 2.0)
    readers.append(reader)
    settings = ScheduleSettings.model_validate(
        {
            "warmup_seconds": 0,
            "reference_exclusion_seconds": 0,
            "profiles": {
                "ref": {
                    "num_prompts": 40,
                    "request_rate": 20,
                    "input_len": 64,
                    "output_len": 64,
                    "run_on_ready": False,
                }
            },
        }
    )
    return LoadScheduler(
        settings,
        server=ReadyServer(),
        executor=LoadEngineExecutor(base_url, energy=meter),
        metrics=ScheduleMetrics(),
        state=StateDir(tmp_path),
        load_reader=reader,
    )


def _value(sched: LoadScheduler, name: str, **labels: str) -> float | None:
    reg = CollectorRegistry()
    reg.register(sched.metrics)
    return reg.get_sample_value(name, labels)


def _last_record(tmp_path: Path) -> dict[str, Any]:
    record: dict[str, Any] = StateDir(tmp_path).history("runs.jsonl")[-1]
    return record


async def test_joules_per_token_is_the_counter_delta_over_output_tokens(
    tmp_path: Path,
    sim_factory: Callable[..., Any],
    fake: FakeNvml,
    poller: GpuPoller,
    readers: list[ServerLoadReader],
) -> None:
    sim = sim_factory("--enable-metrics", "--speed", "30")
    sched = _scheduler(tmp_path, sim.base_url, LoadMeter(poller.energy_meter()), readers)
    assert await asyncio.wait_for(sched.fire("ref"), 60) == "completed"
    record = _last_record(tmp_path)
    assert record["reference"] is True
    energy = record["energy"]
    # The meter's reads, in order: the idle gap's end (before the warm-up), the measured
    # window's start, its end; one value per GPU each. The figure is the last two's difference.
    reads = [(i, v) for name, i, v in fake.energy_reads if name == "sentinel-gpu-energy"]
    assert len(reads) == 6
    opened, closed = dict(reads[2:4]), dict(reads[4:6])
    delta_joules = sum(closed[i] - opened[i] for i in (0, 1)) / 1000.0
    tokens = record["output_tokens"]
    assert tokens == energy["output_tokens"] > 0
    resolution = 2 * COUNTER_RESOLUTION_JOULES  # one mJ per GPU per read
    assert energy["joules"] == pytest.approx(delta_joules, abs=resolution)
    assert energy["joules_per_output_token"] == pytest.approx(delta_joules / tokens, abs=resolution / tokens)
    assert energy["output_tokens_per_joule"] == pytest.approx(tokens / delta_joules)
    assert energy["gpus"] == list(UUIDS)
    assert sum(energy["per_gpu_joules"].values()) == pytest.approx(energy["joules"])
    # Two GPUs at a steady 651.508 W: the counters' mean power is that draw.
    assert energy["mean_power_watts"] == pytest.approx(2 * BUSY_WATTS, rel=0.01)
    assert energy["reason"] is None
    # The reference series carry the same figures.
    assert _value(sched, "sentinel_load_energy_joules_per_output_token", profile="ref") == pytest.approx(
        energy["joules_per_output_token"]
    )
    assert _value(sched, "sentinel_load_energy_joules", profile="ref") == pytest.approx(energy["joules"])
    assert _value(sched, "sentinel_load_output_tokens_per_joule", profile="ref") == pytest.approx(
        energy["output_tokens_per_joule"]
    )
    assert _value(sched, "sentinel_load_power_watts", profile="ref") == pytest.approx(
        energy["mean_power_watts"]
    )


@pytest.mark.slow
async def test_idle_baseline_between_runs_and_the_marginal_energy(
    tmp_path: Path,
    sim_factory: Callable[..., Any],
    fake: FakeNvml,
    poller: GpuPoller,
    readers: list[ServerLoadReader],
) -> None:
    sim = sim_factory("--enable-metrics", "--speed", "30")
    meter = LoadMeter(
        poller.energy_meter(), baseline=IdleBaseline(min_gap_seconds=0.2), price_per_kwh=0.25, currency="EUR"
    )
    sched = _scheduler(tmp_path, sim.base_url, meter, readers)
    assert await asyncio.wait_for(sched.fire("ref"), 60) == "completed"
    first = _last_record(tmp_path)["energy"]
    assert first["baseline_power_watts"] is None  # no gap measured yet
    assert first["marginal_joules_per_output_token"] is None
    await asyncio.sleep(0.3)  # the gap between two runs (at least min_gap_seconds)
    assert await asyncio.wait_for(sched.fire("ref"), 60) == "completed"
    record = _last_record(tmp_path)
    second = record["energy"]
    # The fake's GPUs draw the same with and without load: the baseline is their draw, and the
    # load added nothing above it.
    assert second["baseline_power_watts"] == pytest.approx(2 * BUSY_WATTS, rel=0.02)
    assert second["marginal_joules_per_output_token"] == pytest.approx(
        0.0, abs=0.05 * second["joules_per_output_token"]
    )
    cost = second["joules_per_output_token"] * 1e6 / 3.6e6 * 0.25
    assert second["energy_cost_per_million_output_tokens"] == pytest.approx(cost)
    if not record["reference"]:
        # The series carry reference runs only. On a loaded box the polite check can still read
        # the first run's requests on the server's (sampled) gauges and shrink the second run:
        # recorded with its energy, as above, but no reference.
        assert record["excluded_reason"] == "shrunk", record
        return
    assert _value(sched, "sentinel_load_baseline_power_watts") == pytest.approx(
        second["baseline_power_watts"]
    )
    assert _value(
        sched, "sentinel_load_energy_cost_per_million_output_tokens", profile="ref", currency="EUR"
    ) == pytest.approx(cost)


class BreaksInsideTheWindow:
    """The poller's meter with ``fault`` applied right after the measured window's opening read.

    A run reads the meter at the idle gap's end (before the warm-up), at the window's opening
    (after it) and at its close; the fault follows the second read, so it lands inside the
    window however fast or slow the box is. (Waiting for the run's first completed request
    instead let it land in the warm-up, before the window, on a fast box: a sound figure.)
    """

    def __init__(self, meter: EnergyMeter, fault: Callable[[], None]) -> None:
        self.meter = meter
        self.fault = fault
        self.reads = 0

    def sample(self) -> EnergySample:
        sample = self.meter.sample()
        self.reads += 1
        if self.reads == 2:
            self.fault()
        return sample


async def test_a_counter_reset_mid_run_leaves_no_figure_and_says_why(
    tmp_path: Path,
    sim_factory: Callable[..., Any],
    fake: FakeNvml,
    poller: GpuPoller,
    readers: list[ServerLoadReader],
) -> None:
    sim = sim_factory("--enable-metrics", "--speed", "10")
    # A real counter holds the energy since the driver loaded (megajoules after a day); the
    # sample's holds 4.8 kJ, which a reset GPU at 651 W passes again after ~7 s: a reset whose
    # counter climbed back above the window's start reads as a (too low) figure, so the test
    # starts from a day's worth.
    fake.step_energy(None, 86_400 * 651_508)
    meter = BreaksInsideTheWindow(poller.energy_meter(), lambda: fake.reset_energy(1))
    sched = _scheduler(tmp_path, sim.base_url, LoadMeter(meter), readers)
    assert await asyncio.wait_for(sched.fire("ref"), 60) == "completed"
    assert meter.reads == 3
    energy = _last_record(tmp_path)["energy"]
    assert energy["joules"] is None
    assert energy["joules_per_output_token"] is None
    assert energy["reason"] == "counter_reset"
    assert UUIDS[1] in energy["detail"]
    assert _value(sched, "sentinel_load_energy_joules_per_output_token", profile="ref") is None
    assert _value(sched, "sentinel_load_energy_unavailable_total", profile="ref", reason="counter_reset") == 1
    # The run's throughput still counts: only its energy is unknown.
    assert _value(sched, "sentinel_load_output_throughput_tokens_per_second", profile="ref")


async def test_a_gpu_lost_mid_run_leaves_no_figure_and_says_why(
    tmp_path: Path,
    sim_factory: Callable[..., Any],
    fake: FakeNvml,
    poller: GpuPoller,
    readers: list[ServerLoadReader],
) -> None:
    sim = sim_factory("--enable-metrics", "--speed", "10")
    meter = BreaksInsideTheWindow(poller.energy_meter(), lambda: fake.lose_gpu(0))
    sched = _scheduler(tmp_path, sim.base_url, LoadMeter(meter), readers)
    assert await asyncio.wait_for(sched.fire("ref"), 60) == "completed"
    assert meter.reads == 3
    energy = _last_record(tmp_path)["energy"]
    assert (energy["joules"], energy["reason"]) == (None, "gpu_lost")
    assert UUIDS[0] in energy["detail"]
    assert _value(sched, "sentinel_load_energy_unavailable_total", profile="ref", reason="gpu_lost") == 1
