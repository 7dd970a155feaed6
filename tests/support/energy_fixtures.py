"""The fake GPUs the energy tests meter: two replayed H200s whose energy counters run at the real
H200's busy power, and a poller over them without its background thread (so the run's own reads
are the only energy reads besides its first cycle). Shared by the daemon-run, calibration-step
and bench tests of energy per token (docs/energy.md): a test module takes them with
``from support.energy_fixtures import BUSY_WATTS, fake, poller``."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from sglang_sentinel.collect.gpu import FakeNvml, GpuPoller

#: nvmlDeviceGetPowerUsage of the busy H200 sample, in watts.
BUSY_WATTS = 651.508
#: The two fake GPUs' UUIDs (FakeNvml: the sample's UUID with the device index as its last two digits).
UUIDS = ("GPU-00000000-1111-2222-3333-444444444400", "GPU-00000000-1111-2222-3333-444444444401")


@pytest.fixture
def fake() -> FakeNvml:
    nvml = FakeNvml(devices=2, sample="busy")
    nvml.energy_watts = BUSY_WATTS
    # A day since the driver loaded, as on a real GPU: a counter reset never climbs back above a
    # window's start within a test (the sample's own 4.8 kJ would be passed again after ~7 s).
    nvml.step_energy(None, 86_400 * 651_508)
    return nvml


@pytest.fixture
def poller(fake: FakeNvml) -> Iterator[GpuPoller]:
    p = GpuPoller(lambda: fake, interval=1.0, timeout=2.0, init_timeout=2.0, xid_events=False)
    p.run_cycle()
    yield p
    p.stop(1.0)
