"""GPU energy over a window, from NVML's energy counters: what a run or a calibration step cost.

The figure is a difference of ``nvmlDeviceGetTotalEnergyConsumption`` (millijoules since the
driver loaded, Volta and newer) read at the window's two ends, summed over the server's GPUs: the
driver integrates the power itself, so the figure holds however the power swung between reads,
where power x time would hold only for a steady draw read often. The counter's resolution is
1 mJ per GPU per read.

A window whose figure cannot be trusted has no figure, and says why: a GPU that did not answer
at either end (``gpu_lost``, ``read_failed``: its energy is unknown, and the sum of the others
would be too low), a counter that went backwards (``counter_reset``: the driver was reloaded or
the GPU reset; the counter restarted at 0), a GPU set that changed between the ends
(``gpus_changed``), no GPU at all (``no_gpus``) or NVML itself unusable (its status).

Pure functions and frozen values; the NVML calls happen in :func:`read_energy`, which the poller
runs on its own worker thread (:meth:`GpuPoller.read_energy`), for the daemon and for the commands
run beside a server on this host alike (:mod:`sglang_sentinel.collect.gpu.local`).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from sglang_sentinel.collect.gpu.errors import ErrorClass, classify, error_name
from sglang_sentinel.collect.gpu.reading import Nvml
from sglang_sentinel.collect.settings import CostSettings, EnergySettings

__all__ = [
    "COUNTER_RESOLUTION_JOULES",
    "EnergyDelta",
    "EnergyMeter",
    "EnergySample",
    "IdleBaseline",
    "LoadMeter",
    "energy_between",
    "energy_figures",
    "read_energy",
    "select_gpus",
]

# One millijoule per GPU per read (the counter's unit).
COUNTER_RESOLUTION_JOULES = 1e-3


@dataclass(frozen=True, slots=True)
class EnergySample:
    """The energy counters of a set of GPUs at one moment (wall clock ``timestamp``)."""

    timestamp: float
    joules: Mapping[str, float] = field(default_factory=dict)  # uuid -> counter, J
    missing: Mapping[str, str] = field(default_factory=dict)  # uuid -> why it has no reading
    status: str = "ok"  # "ok", or why no GPU could be read at all (NVML's status)


@dataclass(frozen=True, slots=True)
class EnergyDelta:
    """The energy of the GPUs over ``[start, end]``; ``joules`` None with ``reason`` when unknown."""

    start: float
    end: float
    joules: float | None
    per_gpu: Mapping[str, float] = field(default_factory=dict)  # uuid -> J over the window
    reason: str | None = None
    detail: str = ""

    @property
    def seconds(self) -> float:
        return max(0.0, self.end - self.start)

    @property
    def mean_power_watts(self) -> float | None:
        if self.joules is None or self.seconds <= 0:
            return None
        return self.joules / self.seconds

    @property
    def gpus(self) -> int:
        return len(self.per_gpu)


class EnergyMeter(Protocol):
    """Reads the energy counters of the server's GPUs; blocking, bounded by the meter's deadline."""

    def sample(self) -> EnergySample: ...


def select_gpus(identities: Sequence[tuple[int, str]], wanted: Sequence[str]) -> set[str] | None:
    """The UUIDs among ``(index, uuid)`` that ``wanted`` names (indices or UUIDs); all when empty.

    None when a wanted GPU is not there: measuring the others would under-count the server.
    """
    if not wanted:
        return {uuid for _, uuid in identities}
    chosen: set[str] = set()
    for w in wanted:
        match = [uuid for index, uuid in identities if w == str(index) or w.lower() == uuid.lower()]
        if not match:
            return None
        chosen.update(match)
    return chosen


def read_energy(
    nvml: Nvml, handles: Mapping[str, object], *, clock: Callable[[], float] = time.time
) -> EnergySample:
    """One read of each GPU's energy counter (uuid -> handle). Never raises for NVML's errors."""
    joules: dict[str, float] = {}
    missing: dict[str, str] = {}
    for uuid, handle in handles.items():
        try:
            joules[uuid] = int(nvml.nvmlDeviceGetTotalEnergyConsumption(handle)) / 1000.0
        except Exception as exc:
            name = error_name(exc)
            missing[uuid] = "gpu_lost" if classify(exc) is ErrorClass.LIFECYCLE else name
    return EnergySample(timestamp=clock(), joules=joules, missing=missing)


def energy_between(start: EnergySample, end: EnergySample) -> EnergyDelta:
    """The counters' difference, or no figure with the reason it cannot be trusted."""

    def absent(reason: str, detail: str) -> EnergyDelta:
        return EnergyDelta(start.timestamp, end.timestamp, None, reason=reason, detail=detail)

    for sample in (start, end):
        if sample.status != "ok":
            return absent(sample.status, "NVML unusable")
    for sample, where in ((start, "start"), (end, "end")):
        if sample.missing:
            uuid, why = sorted(sample.missing.items())[0]
            reason = "gpu_lost" if why == "gpu_lost" else "read_failed"
            return absent(reason, f"{uuid} at the window's {where}: {why}")
    if not start.joules:
        return absent("no_gpus", "no GPU to measure")
    if set(start.joules) != set(end.joules):
        changed = sorted(set(start.joules) ^ set(end.joules))
        return absent("gpus_changed", "GPU set changed: " + ", ".join(changed))
    per_gpu: dict[str, float] = {}
    for uuid, before in start.joules.items():
        delta = end.joules[uuid] - before
        if delta < 0:
            return absent(
                "counter_reset", f"{uuid}: counter went from {before:.3f} J to {end.joules[uuid]:.3f} J"
            )
        per_gpu[uuid] = delta
    if not any(per_gpu.values()) and end.timestamp > start.timestamp:
        # A powered GPU always draws (an idle H200: ~79 W), so counters that did not move mean the
        # driver had not updated them yet (a window shorter than its update interval): no figure,
        # rather than 0 J per token.
        return absent(
            "counter_not_advanced",
            f"no energy counter moved in {end.timestamp - start.timestamp:.3f} s",
        )
    return EnergyDelta(
        start.timestamp, end.timestamp, sum(per_gpu.values()), per_gpu=dict(sorted(per_gpu.items()))
    )


class IdleBaseline:
    """The GPUs' draw with no synthetic load: measured over the gap between two loads.

    Every load (a run, a calibration step) reports its first and last sample; the gap from one
    load's end to the next one's start, when it is long enough and its counters are sound, gives
    the baseline power. It is the GPUs' draw without sentinel's load, so the server's own traffic
    in the gap is in it: on a shared server, marginal energy is what sentinel's load added.
    ``sentinel bench`` and ``sweep`` measure it once, over an idle window of their own
    (:meth:`LoadMeter.measure_idle`), and take no gap between their loads (``min_gap_seconds``
    infinite): a gap right after a load holds its tail.
    """

    def __init__(self, min_gap_seconds: float = 10.0) -> None:
        self.min_gap_seconds = min_gap_seconds
        self._last_end: EnergySample | None = None
        self.watts: float | None = None
        self.measured_at: float | None = None
        self.gap_seconds: float | None = None
        # Why there is no baseline yet (None once there is one): what a figure without it says.
        self.reason: str | None = "no idle gap measured yet"

    def measured(self, gap: EnergyDelta) -> None:
        """Take ``gap`` (a window with none of sentinel's load) as the baseline, if its counters are sound."""
        if gap.joules is None:
            if self.watts is None:
                self.reason = f"idle window: {gap.reason}"
            return
        self.watts = gap.mean_power_watts
        self.measured_at = gap.end
        self.gap_seconds = gap.seconds
        self.reason = None

    def load_started(self, sample: EnergySample) -> None:
        last, self._last_end = self._last_end, None
        if last is None:
            return
        gap = energy_between(last, sample)
        if gap.seconds >= self.min_gap_seconds:
            self.measured(gap)

    def load_ended(self, sample: EnergySample) -> None:
        self._last_end = sample

    def as_dict(self) -> dict[str, float | None]:
        return {"watts": self.watts, "measured_at": self.measured_at, "gap_seconds": self.gap_seconds}


def energy_figures(
    delta: EnergyDelta,
    output_tokens: int,
    *,
    baseline_watts: float | None = None,
    baseline_reason: str | None = None,
    price_per_kwh: float | None = None,
    currency: str = "",
) -> dict[str, Any]:
    """The JSON figures of one window: energy, J/token, tokens/J, mean power, marginal, cost.

    A figure that cannot be known is None (absent in the series), with ``reason`` saying why
    (``baseline_reason``: why there is no baseline, when there is none and a reason is given).
    """
    out: dict[str, Any] = {
        "joules": delta.joules,
        "seconds": delta.seconds,
        "gpus": sorted(delta.per_gpu),
        "per_gpu_joules": dict(delta.per_gpu),
        "output_tokens": output_tokens,
        "mean_power_watts": delta.mean_power_watts,
        "joules_per_output_token": None,
        "output_tokens_per_joule": None,
        "baseline_power_watts": baseline_watts,
        "marginal_joules_per_output_token": None,
        "reason": delta.reason,
    }
    if delta.detail:
        out["detail"] = delta.detail
    if baseline_watts is None and baseline_reason:
        out["baseline_reason"] = baseline_reason
    joules = delta.joules
    if joules is None:
        return out
    if output_tokens <= 0:
        out["reason"] = "no_output_tokens"
        return out
    out["joules_per_output_token"] = joules / output_tokens
    out["output_tokens_per_joule"] = output_tokens / joules if joules > 0 else None
    if baseline_watts is not None:
        marginal = joules - baseline_watts * delta.seconds
        out["marginal_joules_per_output_token"] = max(0.0, marginal) / output_tokens
    if price_per_kwh is not None:
        # Energy cost only: the GPUs' electricity, not the host, cooling or the hardware.
        kwh_per_million = joules / output_tokens * 1e6 / 3.6e6
        out["energy_cost_per_million_output_tokens"] = kwh_per_million * price_per_kwh
        out["currency"] = currency
    return out


class LoadMeter:
    """A meter as loads use it: samples off the event loop, the idle baseline, energy cost.

    One per server, shared by its scheduled runs and calibration steps: every load it sees ends
    an idle gap (``load_started``) and opens the next (``load_ended``).
    """

    def __init__(
        self,
        meter: EnergyMeter,
        *,
        baseline: IdleBaseline | None = None,
        price_per_kwh: float | None = None,
        currency: str = "",
    ) -> None:
        self.meter = meter
        self.baseline = baseline if baseline is not None else IdleBaseline()
        self.price_per_kwh = price_per_kwh
        self.currency = currency

    @classmethod
    def configured(
        cls, meter: EnergyMeter | None, energy: EnergySettings, cost: CostSettings
    ) -> LoadMeter | None:
        """The meter ``[energy]`` and ``[cost]`` ask for; None when off or there is no GPU reader."""
        if meter is None or energy.mode == "off":
            return None
        return cls(
            meter,
            baseline=IdleBaseline(energy.baseline_min_gap_seconds),
            price_per_kwh=cost.price_per_kwh,
            currency=cost.currency,
        )

    def status(self) -> dict[str, Any]:
        """The status document's ``energy`` section (the per-run figures are in each run record)."""
        return {
            "metered": True,
            "baseline_power_watts": self.baseline.watts,
            "baseline_measured_at": self.baseline.measured_at,
            "baseline_gap_seconds": self.baseline.gap_seconds,
            "price_per_kwh": self.price_per_kwh,
            "currency": self.currency if self.price_per_kwh is not None else None,
        }

    async def sample(self) -> EnergySample:
        return await asyncio.to_thread(self.meter.sample)

    async def measure_idle(self, seconds: float) -> None:
        """The baseline, measured now over ``seconds`` of no load of ours (``sentinel bench``, ``sweep``)."""
        start = await self.sample()
        await asyncio.sleep(seconds)  # the idle window itself: the counters run while nothing is sent
        self.baseline.measured(energy_between(start, await self.sample()))

    async def load_started(self) -> EnergySample:
        sample = await self.sample()
        self.baseline.load_started(sample)
        return sample

    async def load_ended(
        self, start: EnergySample | None, output_tokens: int, end: EnergySample | None = None
    ) -> dict[str, Any]:
        """The figures of the window from ``start`` to ``end`` (read now when None; ``start`` None:
        the load never began). ``end`` read when the load's last response came in, so that the
        window holds no time after it (metrics, tokenizers)."""
        end = end if end is not None else await self.sample()
        self.baseline.load_ended(end)
        if start is None:
            delta = EnergyDelta(end.timestamp, end.timestamp, None, reason="not_started")
        else:
            delta = energy_between(start, end)
        return energy_figures(
            delta,
            output_tokens,
            baseline_watts=self.baseline.watts,
            baseline_reason=self.baseline.reason,
            price_per_kwh=self.price_per_kwh,
            currency=self.currency,
        )
