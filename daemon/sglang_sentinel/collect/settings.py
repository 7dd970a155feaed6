"""Which collectors run and how (section ``[collectors]``)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from sglang_sentinel.section import Section

__all__ = [
    "BUILTIN_COLLECTORS",
    "DEFAULT_COLLECTORS",
    "CollectorsSettings",
    "CostSettings",
    "EnergySettings",
    "GpuSettings",
    "SGLangMetricsSettings",
]

# The names ``enabled`` accepts. Kept here, not read from the registry, so that loading the config
# does not import httpx and NVML; a test keeps it equal to what the registry registers.
BUILTIN_COLLECTORS = ("sglang", "sglang_log", "gpu", "router")
# "router" is not on by default: it has nothing to read unless [server] kind = "router", and then
# the config turns it on (sglang_sentinel.config) unless `enabled` is given explicitly.
DEFAULT_COLLECTORS = ("sglang", "sglang_log", "gpu")


class SGLangMetricsSettings(Section):
    """``[collectors.sglang]``: re-exposing the server's own ``/metrics``."""

    # Default: http://<server.host>:<server.port>/metrics, the server sentinel supervises.
    url: str | None = None
    # Fetched at scrape time, so this bounds how much one slow server adds to every scrape.
    timeout_seconds: float = Field(default=2.0, gt=0, le=30)
    # A runaway payload (or the wrong URL) must not eat the daemon's memory.
    max_bytes: int = Field(default=32 * 2**20, ge=1024)
    # Cardinality for large fleets (sglang_sentinel.collect.histograms): keep SGLang's histograms as
    # they are, coarsen them to the boundaries of coarsen_buckets that the server has (default:
    # 0 and the 1-2-5 series; counts stay exact, _sum/_count untouched), or drop them.
    histograms: Literal["keep", "coarsen", "drop"] = "keep"
    # Empty: the default set. +Inf is always kept.
    coarsen_buckets: tuple[float, ...] = ()

    @field_validator("coarsen_buckets")
    @classmethod
    def _boundaries(cls, value: tuple[float, ...]) -> tuple[float, ...]:
        if any(not math.isfinite(b) for b in value):
            raise ValueError("coarsen_buckets: finite numbers only (+Inf is always kept)")
        if list(value) != sorted(set(value)):
            raise ValueError("coarsen_buckets: strictly increasing, no repeats")
        return value

    @field_validator("url")
    @classmethod
    def _http_url(cls, value: str | None) -> str | None:
        # Checked here, not at the first scrape: a typo would otherwise be a failing collector
        # series discovered hours later.
        if value is None:
            return value
        parts = urlsplit(value)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ValueError(f"not an http(s) URL with a host: {value!r}")
        try:
            _ = parts.port
        except ValueError as exc:
            raise ValueError(f"{value!r}: {exc}") from None
        return value


class GpuSettings(Section):
    """``[collectors.gpu]``: NVML reads in background threads."""

    # "fake" serves 8 H200s replaying real readings: demos and dashboards on a box without GPUs.
    backend: Literal["nvml", "fake"] = "nvml"
    # Whether this host must have NVIDIA GPUs. Unset: when the launch profile needs them (child and
    # systemd mode; the embedded default's simulator needs none; external mode launches nothing).
    # Where none are expected and no NVIDIA driver is present (NVML library not found, driver not
    # loaded, no GPU, and none seen since start), the collector is *not applicable*, not failing.
    # A GPU host watched in external mode: set true, so a lost driver is a failure.
    expected: bool | None = None
    fake_devices: int = Field(default=8, ge=1, le=64)
    # backend = "fake" only (the nvml backend never reads it), like fake_devices: a JSON file
    # {"lost": [1]} naming the fake GPUs lost now, reread when it changes; unset or absent, none
    # is. How the live alert tests lose a GPU of a running daemon (collect/gpu/fake.py).
    fake_faults_file: Path | None = None
    interval_seconds: float = Field(default=5.0, gt=0, le=300)
    # Per-cycle deadline for every GPU's read; a read still running then is abandoned.
    timeout_seconds: float = Field(default=3.0, gt=0, le=60)
    # nvmlInit without persistence mode can take seconds per GPU.
    init_timeout_seconds: float = Field(default=30.0, gt=0, le=600)
    # 2 × 20 ms per GPU per cycle: the slowest NVML calls.
    pcie_throughput: bool = True
    processes: bool = True
    xid_events: bool = True

    @model_validator(mode="after")
    def _timeout_within_interval(self) -> GpuSettings:
        if self.timeout_seconds > self.interval_seconds:
            raise ValueError("timeout_seconds must not exceed interval_seconds (one read per GPU at a time)")
        return self


class EnergySettings(Section):
    """``[energy]``: GPU energy per run and calibration step, from the gpu collector's NVML."""

    # "auto": meter whenever the gpu collector reads real GPUs (or the fake backend); "off": never.
    mode: Literal["auto", "off"] = "auto"
    # The server's GPUs, as NVML indices ("0") or UUIDs; empty: every GPU this sentinel sees.
    # A GPU named here that is missing makes every figure absent (gpus_not_found), never partial.
    gpus: tuple[str, ...] = ()
    # The shortest gap between two loads that measures the idle baseline.
    baseline_min_gap_seconds: float = Field(default=10.0, gt=0, le=86400)
    # SentinelEnergyPerTokenRise fires when a reference profile's J/token exceeds this multiple of
    # its own trailing baseline while its throughput holds (exported as sentinel_load_energy_alert_ratio).
    alert_ratio: float = Field(default=1.15, gt=1.0, le=10.0)

    @field_validator("gpus")
    @classmethod
    def _gpu_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for gpu in value:
            if not (gpu.isdigit() or gpu.upper().startswith(("GPU-", "MIG-"))):
                raise ValueError(f"{gpu!r} is neither an NVML index (0, 1, ...) nor a GPU UUID (GPU-...)")
        return value


class CostSettings(Section):
    """``[cost]``: turns GPU energy into an energy cost per million output tokens.

    Energy cost only: the GPUs' electricity at this price, not the host, cooling or hardware.
    """

    price_per_kwh: float | None = Field(default=None, gt=0)
    currency: str = Field(default="USD", min_length=1, max_length=8, pattern=r"^[A-Za-z]+$")


class CollectorsSettings(Section):
    enabled: tuple[str, ...] = DEFAULT_COLLECTORS
    sglang: SGLangMetricsSettings = Field(default_factory=SGLangMetricsSettings)
    gpu: GpuSettings = Field(default_factory=GpuSettings)

    @field_validator("enabled")
    @classmethod
    def _known(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        unknown = [name for name in value if name not in BUILTIN_COLLECTORS]
        if unknown:
            raise ValueError(
                f"unknown collector(s) {', '.join(unknown)}; known: {', '.join(BUILTIN_COLLECTORS)}"
            )
        if len(set(value)) != len(value):
            raise ValueError("a collector is listed twice")
        return value
