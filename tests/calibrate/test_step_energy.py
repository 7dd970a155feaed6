"""GPU energy of calibration steps: the production step runner (LoadStepRunner) against the
simulator with a real LoadMeter, the GPUs a fake NVML whose counters run at the real H200's busy
power (651.508 W); then `sentinel sweep` with the fake backend, end to end."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.calibrate.api import base_spec
from sglang_sentinel.calibrate.model import StepPlan
from sglang_sentinel.calibrate.runner import LoadStepRunner
from sglang_sentinel.calibrate.settings import CalibrationSettings
from sglang_sentinel.cli import main
from sglang_sentinel.collect.gpu import FakeNvml, GpuPoller
from sglang_sentinel.collect.gpu.energy import COUNTER_RESOLUTION_JOULES, IdleBaseline, LoadMeter
from support import energy_fixtures
from support.energy_fixtures import BUSY_WATTS

# The shared fake GPUs and their poller (tests/support/energy_fixtures.py), as this module's fixtures.
fake = energy_fixtures.fake
poller = energy_fixtures.poller

RESOLUTION = 2 * COUNTER_RESOLUTION_JOULES  # one mJ per GPU per read


async def test_each_step_carries_its_windows_counter_delta_over_its_output_tokens(
    sim_factory: Callable[..., Any], fake: FakeNvml, poller: GpuPoller
) -> None:
    sim = sim_factory("--enable-metrics", "--speed", "30")
    cal = CalibrationSettings(input_len=32, output_len=32, range_ratio=1.0, metrics_interval=0.05)
    # As `sentinel sweep` makes it: an idle window before the first step, no gap baselines.
    meter = LoadMeter(poller.energy_meter(), baseline=IdleBaseline(math.inf))
    runner = LoadStepRunner(base_spec(cal, sim.base_url), cal, energy=meter, idle_seconds=0.3)
    steps = [
        await runner.run_step(StepPlan(concurrency=c, num_requests=12, phase="escalate")) for c in (2, 6)
    ]
    reads = [(i, v) for name, i, v in fake.energy_reads if name == "sentinel-gpu-energy"]
    samples = [dict(reads[k : k + 2]) for k in range(0, len(reads), 2)]
    # The idle window's two ends (once, before the first step), then each step's two ends.
    assert len(samples) == 6
    for k, step in enumerate(steps):
        opened, closed = samples[2 + 2 * k], samples[3 + 2 * k]
        delta = sum(closed[i] - opened[i] for i in (0, 1)) / 1000.0
        tokens = 12 * 32  # every request succeeded, each exactly output_len (range_ratio 1)
        assert step.completed == 12
        assert round(step.output_throughput * step.duration) == tokens
        e = step.energy
        assert e is not None
        assert e.reason is None
        assert e.gpus == 2
        assert e.joules == pytest.approx(delta, abs=RESOLUTION)
        assert e.joules_per_output_token == pytest.approx(delta / tokens, abs=RESOLUTION / tokens)
        assert e.output_tokens_per_joule == pytest.approx(tokens / delta, rel=1e-3)
        # The window holds the step's measured phase (first send to last response), no more.
        assert e.seconds >= step.duration - 1e-3
        assert e.mean_power_watts == pytest.approx(2 * BUSY_WATTS, rel=0.05)
        # The one idle window is every step's baseline.
        assert e.baseline_power_watts == pytest.approx(2 * BUSY_WATTS, rel=0.05)
    baselines = {s.energy.baseline_power_watts for s in steps if s.energy is not None}
    assert len(baselines) == 1


@pytest.mark.slow
def test_sweep_with_the_fake_backend_reports_energy_per_step(
    sim_factory: Callable[..., Any],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # As tests/calibrate/test_command.py: a shared box lags; not what this test is about.
    monkeypatch.setenv("SENTINEL_CALIBRATION__CLIENT_LAG_TOLERANCE", "1")
    sim = sim_factory("--enable-metrics", "--speed", "20", "--max-running-requests", "4")
    config = tmp_path / "sentinel.toml"
    config.write_text('[collectors.gpu]\nbackend = "fake"\nfake_devices = 2\n')
    out = tmp_path / "result.json"
    argv = [
        "sweep", "--config", str(config), "--log-level", "error", "--base-url", sim.base_url,
        "--random-input-len", "32", "--random-output-len", "64", "--random-range-ratio", "1",
        "--max-concurrency", "8", "--metrics-interval", "0.05", "--gpu-idle-seconds", "0.2",
        "--output-file", str(out), "--report", str(tmp_path / "report"),
    ]  # fmt: skip
    code = main(argv)
    captured = capsys.readouterr()
    assert code == 0, captured.out + captured.err
    assert "sentinel sweep: GPU energy of GPUs 0, 1 (running a compute process)" in captured.err
    result = json.loads(out.read_text())
    assert result["steps"]
    for step in result["steps"]:
        e = step["measurement"]["energy"]
        assert e["reason"] is None
        assert e["joules"] > 0
        assert e["baseline_power_watts"] == pytest.approx(2 * BUSY_WATTS, rel=0.05)
    assert "Fewest GPU J per output token at:" in captured.out
    # The calibration report's J/token plot, drawn because the steps carry energy.
    assert (tmp_path / "report" / "energy.png").is_file()
