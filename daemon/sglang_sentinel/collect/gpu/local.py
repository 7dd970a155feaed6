"""GPU energy for a command run beside a server on this host (``sentinel bench``, ``sweep``):
whether to meter, which GPUs, and the meter.

``auto`` meters when the target is this machine (:func:`sglang_sentinel.netloc.is_this_host`),
NVML answers and a GPU here runs a compute process; it cannot tell whose process that is, so a
host with several servers names the server's GPUs (``--gpus`` or ``[energy] gpus``). ``on``
meters or says why it cannot. The reads go through a :class:`GpuPoller` without its background
thread, as the daemon's do: bounded by ``[collectors.gpu] timeout_seconds`` (a wedged driver costs
a figure marked ``timeout``, never a hung command), its NVML the real one or ``backend = "fake"``'s.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Literal

from sglang_sentinel.collect.gpu.energy import IdleBaseline, LoadMeter, select_gpus
from sglang_sentinel.collect.gpu.fake import nvml_backend
from sglang_sentinel.collect.gpu.poller import GpuPoller
from sglang_sentinel.collect.gpu.reading import Nvml
from sglang_sentinel.collect.settings import CostSettings, EnergySettings, GpuSettings
from sglang_sentinel.netloc import is_this_host

__all__ = ["EnergyUnavailable", "LocalEnergy", "open_local_energy"]


class EnergyUnavailable(Exception):
    """Metering was required (``on``, or GPUs named) and cannot be done here; the message says why."""


@dataclass
class LocalEnergy:
    """The meter (None: not metering, ``note`` says why) and what it meters."""

    meter: LoadMeter | None
    note: str
    gpus: list[tuple[int, str]] = field(default_factory=list)  # (NVML index, UUID) metered
    poller: GpuPoller | None = None

    def close(self) -> None:
        if self.poller is not None:
            self.poller.stop(1.0)
            self.poller = None


def open_local_energy(
    mode: Literal["auto", "on"],
    gpus: Sequence[str],
    *,
    target_host: str,
    gpu: GpuSettings,
    energy: EnergySettings,
    cost: CostSettings,
    baseline_reason: str,
    nvml: Callable[[], Nvml] | None = None,
) -> LocalEnergy:
    """The meter ``mode`` asks for against a server at ``target_host``.

    ``gpus`` (indices or UUIDs; empty: ``[energy] gpus``, else the GPUs running a compute process,
    else with ``on`` all of them). ``baseline_reason``: what a figure says while no idle window
    has been measured. ``nvml``: the NVML module to use (default: ``gpu``'s backend). Raises
    :class:`EnergyUnavailable` where ``on`` or named GPUs cannot be metered; with ``auto`` that
    is a :class:`LocalEnergy` without a meter and its note.
    """
    required = mode == "on" or bool(gpus)

    def skip(why: str) -> LocalEnergy:
        if required:
            raise EnergyUnavailable(why)
        return LocalEnergy(None, why)

    if not required and not is_this_host(target_host):
        # Before NVML: this host's GPUs are not the server's (and NVML init can take seconds).
        return LocalEnergy(None, f"the server ({target_host}) is not on this host")
    poller = GpuPoller(
        nvml if nvml is not None else nvml_backend(gpu),
        timeout=gpu.timeout_seconds,
        init_timeout=gpu.init_timeout_seconds,
        pcie_throughput=False,  # 2 x 20 ms per GPU, and nothing here reads it
        processes=True,  # which GPUs run a compute process: auto's choice
        xid_events=False,
        quiet_init=True,
    )
    metering = None
    try:
        snapshot = poller.run_cycle()
        if snapshot.status != "ok":
            detail = f" ({snapshot.detail})" if snapshot.detail else ""
            return skip(f"NVML is not usable here: {snapshot.status}{detail}")
        identities = [(d.identity.index, d.identity.uuid) for d in snapshot.devices]
        wanted = tuple(gpus) or energy.gpus
        if wanted:
            chosen = select_gpus(identities, wanted)
            if chosen is None:
                # Named GPUs that are not here: measuring the others would under-count the server.
                seen = ", ".join(str(i) for i, _ in identities)
                raise EnergyUnavailable(f"no GPU {', '.join(wanted)} here (NVML sees {seen})")
            how = "named"
        else:
            busy = {
                d.identity.uuid for d in snapshot.devices if d.reading is not None and d.reading.processes
            }
            if busy:
                chosen, how = busy, "running a compute process"
            elif mode == "on":
                chosen, how = {uuid for _, uuid in identities}, "all: none runs a compute process"
            else:
                return LocalEnergy(None, "no GPU on this host runs a compute process")
        metered = [(i, uuid) for i, uuid in identities if uuid in chosen]
        baseline = IdleBaseline(math.inf)  # only an idle window of its own: see IdleBaseline
        baseline.reason = baseline_reason
        meter = LoadMeter(
            poller.energy_meter(tuple(uuid for _, uuid in metered)),
            baseline=baseline,
            price_per_kwh=cost.price_per_kwh,
            currency=cost.currency,
        )
        metering = LocalEnergy(
            meter, f"GPUs {', '.join(str(i) for i, _ in metered)} ({how})", metered, poller
        )
        return metering
    finally:
        if metering is None:
            poller.stop(1.0)
