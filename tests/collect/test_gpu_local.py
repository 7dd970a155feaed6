"""Whether `sentinel bench` / `sweep` meter GPU energy, and which GPUs (collect.gpu.local), with the
fake NVML in place of the driver."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Literal

import pytest

from sglang_sentinel.collect.gpu import FakeNvml, load_sample
from sglang_sentinel.collect.gpu.local import EnergyUnavailable, LocalEnergy, open_local_energy
from sglang_sentinel.collect.settings import CostSettings, EnergySettings, GpuSettings

UUID1 = "GPU-00000000-1111-2222-3333-444444444401"


@pytest.fixture
def opened() -> Iterator[list[LocalEnergy]]:
    made: list[LocalEnergy] = []
    yield made
    for local in made:
        local.close()


def _open(
    opened: list[LocalEnergy],
    nvml: FakeNvml,
    mode: Literal["auto", "on"] = "auto",
    gpus: tuple[str, ...] = (),
    host: str = "127.0.0.1",
    configured: tuple[str, ...] = (),
) -> LocalEnergy:
    local = open_local_energy(
        mode,
        gpus,
        target_host=host,
        gpu=GpuSettings(timeout_seconds=2.0),
        energy=EnergySettings(gpus=configured),
        cost=CostSettings(price_per_kwh=0.2),
        baseline_reason="not measured (--gpu-idle-seconds 0)",
        nvml=lambda: nvml,
    )
    opened.append(local)
    return local


def _idle_gpus(devices: int) -> FakeNvml:
    """GPUs no process runs on (the H200 sample with no memory used)."""
    sample = copy.deepcopy(load_sample("busy"))
    sample["devices"][0]["memory_info_v2"]["value"]["used"] = 0
    return FakeNvml(devices, sample)


def test_auto_meters_the_gpus_that_run_a_compute_process(opened: list[LocalEnergy]) -> None:
    local = _open(opened, FakeNvml(devices=3))
    assert local.meter is not None
    assert [i for i, _ in local.gpus] == [0, 1, 2]
    assert local.note == "GPUs 0, 1, 2 (running a compute process)"
    assert local.meter.price_per_kwh == 0.2
    assert local.meter.baseline.reason == "not measured (--gpu-idle-seconds 0)"
    assert set(local.meter.meter.sample().joules) == {uuid for _, uuid in local.gpus}


def test_auto_meters_nothing_for_a_server_elsewhere_and_never_touches_nvml(opened: list[LocalEnergy]) -> None:
    nvml = FakeNvml(devices=2)
    local = _open(opened, nvml, host="node2.invalid")
    assert local.meter is None
    assert local.note == "the server (node2.invalid) is not on this host"
    assert nvml.init_calls == 0


def test_auto_meters_nothing_where_no_gpu_is_busy_and_on_meters_them_all(opened: list[LocalEnergy]) -> None:
    assert _open(opened, _idle_gpus(2)).note == "no GPU on this host runs a compute process"
    local = _open(opened, _idle_gpus(2), "on")
    assert local.meter is not None
    assert [i for i, _ in local.gpus] == [0, 1]
    assert local.note == "GPUs 0, 1 (all: none runs a compute process)"


def test_without_nvml_auto_says_why_and_on_refuses(opened: list[LocalEnergy]) -> None:
    local = _open(opened, FakeNvml(devices=2, library_present=False))
    assert local.meter is None
    assert local.note.startswith("NVML is not usable here: library_not_found")
    with pytest.raises(EnergyUnavailable, match="NVML is not usable here: library_not_found"):
        _open(opened, FakeNvml(devices=2, library_present=False), "on")
    # So does auto when GPUs were named: the operator asked for them.
    with pytest.raises(EnergyUnavailable, match="library_not_found"):
        _open(opened, FakeNvml(devices=2, library_present=False), gpus=("0",))


def test_named_gpus_by_index_or_uuid_and_one_that_is_not_here(opened: list[LocalEnergy]) -> None:
    local = _open(opened, FakeNvml(devices=4), gpus=("0", UUID1.lower()))
    assert [i for i, _ in local.gpus] == [0, 1]
    assert local.note == "GPUs 0, 1 (named)"
    # [energy] gpus is the default when none are given on the command line.
    assert [i for i, _ in _open(opened, FakeNvml(devices=4), configured=("2",)).gpus] == [2]
    assert [i for i, _ in _open(opened, FakeNvml(devices=4), "on", gpus=("3",)).gpus] == [3]
    with pytest.raises(EnergyUnavailable, match=r"no GPU 0, 4 here \(NVML sees 0, 1, 2, 3\)"):
        _open(opened, FakeNvml(devices=4), gpus=("0", "4"))
