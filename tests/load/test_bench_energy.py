"""GPU energy of `sentinel bench` runs: the load engine against the simulator, the GPUs a fake NVML
whose counters run at the real H200's busy power (651.508 W), reset and vanish (docs/energy.md)."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.cli import main
from sglang_sentinel.collect.gpu import FakeNvml, GpuPoller
from sglang_sentinel.collect.gpu.energy import (
    COUNTER_RESOLUTION_JOULES,
    EnergyMeter,
    EnergySample,
    IdleBaseline,
    LoadMeter,
)
from sglang_sentinel.load import ArrivalProcess, Backend, LoadSpec, RandomDataset, format_result_block
from sglang_sentinel.load.bench import run_bench
from sglang_sentinel.load.result import RunResult
from support import energy_fixtures
from support.energy_fixtures import BUSY_WATTS, UUIDS

# The shared fake GPUs and their poller (tests/support/energy_fixtures.py), as this module's fixtures.
fake = energy_fixtures.fake
poller = energy_fixtures.poller

RESOLUTION = 2 * COUNTER_RESOLUTION_JOULES  # one mJ per GPU per read


def _spec(base_url: str) -> LoadSpec:
    return LoadSpec(
        base_url=base_url,
        backend=Backend.SGLANG,
        dataset=RandomDataset(input_len=64, output_len=64, range_ratio=1.0),
        arrival=ArrivalProcess.POISSON,
        request_rate=20.0,
        num_requests=30,
        warmup_requests=1,
        ready_timeout_s=30.0,
    )


def _bench_meter(meter: EnergyMeter, *, price: float | None = None) -> LoadMeter:
    # As `sentinel bench` makes it (collect.gpu.local): the baseline from its own idle window only.
    return LoadMeter(meter, baseline=IdleBaseline(math.inf), price_per_kwh=price, currency="EUR")


def _window_reads(fake: FakeNvml) -> list[dict[int, int]]:
    """The meter's reads in order, one {GPU index: mJ} per sample."""
    reads = [(i, v) for name, i, v in fake.energy_reads if name == "sentinel-gpu-energy"]
    return [dict(reads[k : k + 2]) for k in range(0, len(reads), 2)]


async def test_the_figures_are_the_measured_windows_counter_delta_over_output_tokens(
    sim_factory: Callable[..., Any], fake: FakeNvml, poller: GpuPoller
) -> None:
    sim = sim_factory("--speed", "30")
    meter = _bench_meter(poller.energy_meter(), price=0.25)
    result = await run_bench(_spec(sim.base_url), energy=meter, idle_seconds=0.3)
    assert result.metrics.completed == 30
    # The reads: the idle window's two ends (after the warm-up), the measured window's two ends.
    samples = _window_reads(fake)
    assert len(samples) == 4
    opened, closed = samples[2], samples[3]
    delta = sum(closed[i] - opened[i] for i in (0, 1)) / 1000.0
    tokens = result.metrics.total_output_tokens
    e = result.energy
    assert e is not None
    assert e["reason"] is None
    assert e["output_tokens"] == tokens > 0
    assert e["joules"] == pytest.approx(delta, abs=RESOLUTION)
    assert e["joules_per_output_token"] == pytest.approx(delta / tokens, abs=RESOLUTION / tokens)
    assert e["output_tokens_per_joule"] == pytest.approx(tokens / e["joules"])
    assert e["gpus"] == list(UUIDS)
    # The window brackets the measured phase: it opens before the clock starts, closes after the
    # last response.
    assert e["seconds"] >= result.metrics.duration - 1e-3
    # Two GPUs at a steady 651.508 W, idle or not (the fake's draw does not follow the load).
    assert e["mean_power_watts"] == pytest.approx(2 * BUSY_WATTS, rel=0.05)
    assert e["baseline_power_watts"] == pytest.approx(2 * BUSY_WATTS, rel=0.05)
    marginal = max(0.0, e["joules"] - e["baseline_power_watts"] * e["seconds"]) / tokens
    assert e["marginal_joules_per_output_token"] == pytest.approx(marginal)
    cost = e["joules_per_output_token"] * 1e6 / 3.6e6 * 0.25
    assert (e["energy_cost_per_million_output_tokens"], e["currency"]) == (pytest.approx(cost), "EUR")
    # The JSON line carries the same figures; the block prints them in its own section.
    record = result.to_dict()
    assert record["energy"] == e
    assert record["energy_note"] is None
    block = format_result_block(result)
    assert "-" * 20 + "GPU energy" + "-" * 20 in block
    assert "{:<40} {:<10}".format("GPUs metered:", 2) in block
    assert "{:<40} {:<10.4f}".format("Energy per output token (J):", e["joules_per_output_token"]) in block
    assert "{:<40} {:<10.2f}".format("Idle GPU power (W):", e["baseline_power_watts"]) in block
    assert "GPU energy cost /1M output tok (EUR):" in block
    # Below bench_serving's block: its rows stay line for line.
    assert block.index("GPU energy") > block.index(" Sentinel ")


class BreaksAfterRead:
    """A meter that applies ``fault`` right after its ``n``-th read: inside the measured window
    when ``n`` is the window's opening read, however fast or slow the box is."""

    def __init__(self, meter: EnergyMeter, n: int, fault: Callable[[], None]) -> None:
        self.meter, self.n, self.fault = meter, n, fault
        self.reads = 0

    def sample(self) -> EnergySample:
        sample = self.meter.sample()
        self.reads += 1
        if self.reads == self.n:
            self.fault()
        return sample


@pytest.mark.parametrize(
    ("fault", "reason", "gpu"),
    [
        (lambda nvml: nvml.reset_energy(1), "counter_reset", UUIDS[1]),
        (lambda nvml: nvml.lose_gpu(0), "gpu_lost", UUIDS[0]),
    ],
    ids=["counter-reset", "gpu-lost"],
)
async def test_a_fault_inside_the_window_leaves_no_figure_and_says_why(
    sim_factory: Callable[..., Any],
    fake: FakeNvml,
    poller: GpuPoller,
    fault: Callable[[FakeNvml], None],
    reason: str,
    gpu: str,
) -> None:
    sim = sim_factory("--speed", "30")
    broken = BreaksAfterRead(poller.energy_meter(), 1, lambda: fault(fake))  # no idle window: read 1 opens
    result = await run_bench(_spec(sim.base_url), energy=_bench_meter(broken), idle_seconds=0)
    assert broken.reads == 2
    e = result.energy
    assert e is not None
    assert (e["joules"], e["joules_per_output_token"], e["reason"]) == (None, None, reason)
    assert gpu in e["detail"]
    assert e["baseline_reason"] == "no idle gap measured yet"
    block = format_result_block(result)
    assert "{:<40} {!s:<10}".format("GPU energy:", f"not known: {reason} ({e['detail']})") in block
    assert "Energy per output token" not in block
    # The run's own figures still count: only its energy is unknown.
    assert result.metrics.completed == 30
    assert result.to_dict()["energy"]["reason"] == reason


async def test_a_run_without_a_meter_has_no_energy(sim_factory: Callable[..., Any]) -> None:
    sim = sim_factory("--speed", "50")
    result: RunResult = await run_bench(_spec(sim.base_url))
    assert result.energy is None
    assert "GPU energy" not in format_result_block(result)
    assert result.to_dict()["energy"] is None
    # Not metered by auto (collect.gpu.local says why): no section, one note line at the block's end.
    result.energy_note = "NVML is not usable here: library_not_found"
    block = format_result_block(result).splitlines()
    assert block[-2:] == [
        "note: GPU energy not measured: NVML is not usable here: library_not_found",
        "=" * 50,
    ]
    assert "-GPU energy-" not in "\n".join(block)
    assert result.to_dict()["energy_note"] == result.energy_note


# ---------------------------------------------------------------- the command


def _fake_config(tmp_path: Path) -> Path:
    """The daemon's demo backend: 2 replayed H200s whose counters run at the sample's 651.508 W."""
    path = tmp_path / "sentinel.toml"
    path.write_text(
        '[collectors.gpu]\nbackend = "fake"\nfake_devices = 2\n\n'
        '[cost]\nprice_per_kwh = 0.3\ncurrency = "EUR"\n'
    )
    return path


def _argv(base_url: str, out: Path, *extra: str) -> list[str]:
    return [
        "bench",
        "--log-level",
        "error",
        "--base-url",
        base_url,
        "--num-prompts",
        "12",
        "--random-input-len",
        "32",
        "--random-output-len",
        "32",
        "--random-range-ratio",
        "1",
        "--request-rate",
        "20",
        "--output-file",
        str(out),
        *extra,
    ]


def test_bench_prints_and_writes_the_energy_of_the_servers_gpus(
    sim_factory: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("--speed", "30")
    out = tmp_path / "res.jsonl"
    argv = _argv(sim.base_url, out, "--config", str(_fake_config(tmp_path)), "--gpu-idle-seconds", "0.2")
    assert main(argv) == 0
    captured = capsys.readouterr()
    # auto: the server is on this host and the fake's GPUs run a compute process each.
    assert "sentinel bench: GPU energy of GPUs 0, 1 (running a compute process)" in captured.err
    record = json.loads(out.read_text())
    e = record["energy"]
    assert e["reason"] is None
    assert e["gpus"] == list(UUIDS)
    assert e["output_tokens"] == record["total_output_tokens"] == 12 * 32
    assert e["joules_per_output_token"] == pytest.approx(e["joules"] / record["total_output_tokens"])
    assert e["mean_power_watts"] == pytest.approx(2 * BUSY_WATTS, rel=0.05)
    assert e["baseline_power_watts"] == pytest.approx(2 * BUSY_WATTS, rel=0.05)
    assert e["currency"] == "EUR"
    assert record["energy_note"] is None
    assert "{:<40} {:<10.2f}".format("GPU energy (J):", e["joules"]) in captured.out
    assert "GPU energy cost /1M output tok (EUR):" in captured.out


def test_bench_energy_off_and_named_gpus_that_are_not_here(
    sim_factory: Callable[..., Any], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("--speed", "50")
    config = str(_fake_config(tmp_path))
    out = tmp_path / "res.jsonl"
    assert main(_argv(sim.base_url, out, "--config", config, "--gpu-energy", "off")) == 0
    captured = capsys.readouterr()
    record = json.loads(out.read_text())
    # Asked not to: no figures, and nothing to explain.
    assert (record["energy"], record["energy_note"]) == (None, None)
    assert "GPU energy" not in captured.out + captured.err
    # A GPU named that NVML does not see: a usage error before any request, not a partial figure.
    out.unlink()
    assert main(_argv(sim.base_url, out, "--config", config, "--gpus", "0", "7")) == 2
    assert "sentinel bench: --gpu-energy: no GPU 0, 7 here (NVML sees 0, 1)" in capsys.readouterr().err
    assert not out.exists()
