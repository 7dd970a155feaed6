"""GPU energy over a window from NVML's counters, on the fake NVML fed with real H200 readings."""

from __future__ import annotations

import threading

import pynvml
import pytest

from sglang_sentinel.collect.gpu import FakeNvml, GpuPoller, load_sample
from sglang_sentinel.collect.gpu.energy import (
    COUNTER_RESOLUTION_JOULES,
    EnergySample,
    IdleBaseline,
    energy_between,
    energy_figures,
    read_energy,
)

UUID0 = "GPU-00000000-1111-2222-3333-444444444400"
UUID1 = "GPU-00000000-1111-2222-3333-444444444401"


def _poller(fake: FakeNvml) -> GpuPoller:
    poller = GpuPoller(lambda: fake, interval=1.0, timeout=0.5, init_timeout=0.5, xid_events=False)
    poller.run_cycle()
    return poller


def test_counter_steps_give_the_exact_delta_per_gpu() -> None:
    fake = FakeNvml(devices=2, sample="busy")
    poller = _poller(fake)
    try:
        start = poller.read_energy()
        # The real H200's counter at its recorded value, in J.
        base = load_sample("busy")["devices"][0]["total_energy_mj"]["value"] / 1000.0
        assert start.joules == {UUID0: base, UUID1: base}
        fake.step_energy(0, 651_508)  # 1 s at the busy H200's 651.508 W
        fake.step_energy(1, 80_382)  # 1 s at the idle one's 80.382 W
        end = poller.read_energy()
        delta = energy_between(start, end)
        assert delta.reason is None
        assert delta.per_gpu == {UUID0: pytest.approx(651.508), UUID1: pytest.approx(80.382)}
        assert delta.joules == pytest.approx(731.89, abs=COUNTER_RESOLUTION_JOULES)
    finally:
        poller.stop(1.0)


def test_only_the_servers_gpus_are_summed() -> None:
    fake = FakeNvml(devices=3, sample="busy")
    poller = _poller(fake)
    try:
        start = poller.read_energy(("1",))
        fake.step_energy(None, 5_000)
        delta = energy_between(start, poller.read_energy(("1",)))
        assert list(delta.per_gpu) == [UUID1]
        assert delta.joules == pytest.approx(5.0)
        assert poller.read_energy(("7",)).status == "gpus_not_found"
    finally:
        poller.stop(1.0)


def test_counters_that_did_not_move_give_no_figure_rather_than_zero() -> None:
    """A window shorter than the driver's counter update: 0 J would be 0 J/token, never true."""
    start = EnergySample(timestamp=100.0, joules={UUID0: 1000.0, UUID1: 2000.0})
    end = EnergySample(timestamp=100.04, joules={UUID0: 1000.0, UUID1: 2000.0})
    delta = energy_between(start, end)
    assert delta.joules is None
    assert delta.reason == "counter_not_advanced"
    fig = energy_figures(delta, 64)
    assert fig["joules_per_output_token"] is None
    assert fig["output_tokens_per_joule"] is None
    # One GPU's counter moving is a real (if small) figure.
    moved = energy_between(start, EnergySample(timestamp=100.04, joules={UUID0: 1000.5, UUID1: 2000.0}))
    assert moved.joules == pytest.approx(0.5)


def test_the_daemons_fake_gpus_draw_their_samples_power() -> None:
    """backend = "fake" (demo mode, live tests): the counters run at the replayed H200's draw."""
    from sglang_sentinel.collect.gpu.collector import GpuCollector, _factory
    from sglang_sentinel.collect.settings import GpuSettings

    collector = _factory(GpuSettings(backend="fake", fake_devices=1))
    assert isinstance(collector, GpuCollector)
    fake = collector.poller._nvml_factory()
    assert isinstance(fake, FakeNvml)
    assert fake.energy_watts == pytest.approx(651.508)


def test_a_counter_reset_makes_the_figure_absent_with_its_reason() -> None:
    fake = FakeNvml(devices=2, sample="busy")
    poller = _poller(fake)
    try:
        start = poller.read_energy()
        fake.step_energy(None, 10_000)
        fake.reset_energy(1)  # driver reload: GPU 1's counter restarts at 0
        fake.step_energy(None, 10_000)
        delta = energy_between(start, poller.read_energy())
        assert delta.joules is None
        assert delta.reason == "counter_reset"
        assert UUID1 in delta.detail
        fig = energy_figures(delta, 1000)
        assert fig["joules_per_output_token"] is None
        assert fig["reason"] == "counter_reset"
    finally:
        poller.stop(1.0)


def test_a_gpu_lost_mid_window_makes_the_figure_absent() -> None:
    fake = FakeNvml(devices=2, sample="busy")
    poller = _poller(fake)
    try:
        start = poller.read_energy()
        fake.lose_gpu(1)
        end = poller.read_energy()
        assert end.missing == {UUID1: "gpu_lost"}
        delta = energy_between(start, end)
        assert (delta.joules, delta.reason) == (None, "gpu_lost")
        # After the poller re-initialises with the GPU gone, the set differs from the start's.
        poller.run_cycle()
        fake.clear_faults()
        fake.devices = 1
        poller.run_cycle()
        poller.run_cycle()
        later = poller.read_energy()
        assert list(later.joules) == [UUID0]
        assert energy_between(start, later).reason == "gpus_changed"
    finally:
        poller.stop(1.0)


def test_a_transient_error_is_read_failed_and_nvml_down_is_its_status() -> None:
    fake = FakeNvml(devices=1, sample="busy")
    poller = _poller(fake)
    try:
        start = poller.read_energy()
        fake.fail("nvmlDeviceGetTotalEnergyConsumption", pynvml.NVML_ERROR_UNKNOWN, times=1)
        assert energy_between(start, poller.read_energy()).reason == "read_failed"
    finally:
        poller.stop(1.0)
    absent = GpuPoller(lambda: FakeNvml(library_present=False), xid_events=False)
    absent.run_cycle()
    sample = absent.read_energy()
    assert sample.status == "library_not_found"
    assert energy_between(sample, sample).reason == "library_not_found"
    absent.stop(1.0)


def test_a_wedged_energy_read_times_out_without_blocking_the_caller() -> None:
    fake = FakeNvml(devices=1, sample="busy")
    poller = _poller(fake)
    release = fake.hang("nvmlDeviceGetTotalEnergyConsumption")
    try:
        assert poller.read_energy(timeout=0.2).missing == {UUID0: "timeout"}
        # The stuck read still holds the worker: the next one says so at once.
        assert poller.read_energy(timeout=0.2).missing == {UUID0: "stuck"}
    finally:
        release.set()
        poller.stop(1.0)


def test_figures_per_token_marginal_and_energy_cost() -> None:
    start = EnergySample(timestamp=100.0, joules={UUID0: 1000.0, UUID1: 2000.0})
    end = EnergySample(timestamp=110.0, joules={UUID0: 4000.0, UUID1: 5000.0})
    delta = energy_between(start, end)
    assert delta.joules == 6000.0
    assert delta.mean_power_watts == 600.0
    fig = energy_figures(delta, 3000, baseline_watts=160.0, price_per_kwh=0.3, currency="EUR")
    assert fig["joules_per_output_token"] == 2.0
    assert fig["output_tokens_per_joule"] == 0.5
    # 6000 J - 160 W x 10 s = 4400 J over 3000 tokens.
    assert fig["marginal_joules_per_output_token"] == pytest.approx(4400 / 3000)
    # 2 J/token x 1e6 tokens = 2e6 J = 0.5556 kWh at 0.3 EUR.
    assert fig["energy_cost_per_million_output_tokens"] == pytest.approx(2e6 / 3.6e6 * 0.3)
    assert fig["currency"] == "EUR"
    assert energy_figures(delta, 0)["reason"] == "no_output_tokens"


def test_idle_baseline_comes_from_the_gap_between_loads() -> None:
    baseline = IdleBaseline(min_gap_seconds=10.0)
    baseline.load_started(EnergySample(0.0, {UUID0: 0.0}))
    baseline.load_ended(EnergySample(5.0, {UUID0: 3000.0}))
    assert baseline.watts is None  # no gap seen yet
    baseline.load_started(EnergySample(25.0, {UUID0: 4600.0}))
    assert baseline.watts == pytest.approx(80.0)
    assert baseline.gap_seconds == 20.0
    # A gap too short to measure, or a reset inside it, leaves the last good baseline.
    baseline.load_ended(EnergySample(30.0, {UUID0: 8000.0}))
    baseline.load_started(EnergySample(32.0, {UUID0: 8100.0}))
    baseline.load_ended(EnergySample(40.0, {UUID0: 9000.0}))
    baseline.load_started(EnergySample(60.0, {UUID0: 10.0}))
    assert baseline.watts == pytest.approx(80.0)


def test_reads_record_their_thread_for_the_acceptance_check() -> None:
    fake = FakeNvml(devices=1, sample="busy")
    read_energy(fake, {})  # no GPU: nothing read
    fake.nvmlInit()
    handle = fake.nvmlDeviceGetHandleByIndex(0)
    done = threading.Event()

    def reader() -> None:
        read_energy(fake, {UUID0: handle})
        done.set()

    threading.Thread(target=reader, name="probe").start()
    assert done.wait(10.0)
    assert [name for name, _, _ in fake.energy_reads] == ["probe"]
