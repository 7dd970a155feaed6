"""``sentinel fleet``'s configuration file: ``[fleet]`` (targets, schedule, canaries), ``[exporter]``."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, model_validator

from sglang_sentinel.export.settings import ExporterSettings
from sglang_sentinel.redact import register_secret
from sglang_sentinel.section import Secret, Section
from sglang_sentinel.supervise.settings import CanaryCheckSettings

__all__ = ["NAME_PATTERN", "FleetFile", "FleetSettings", "FleetSloSettings", "FleetTarget"]

# A target's name is a label value and the ``?target=`` of a scrape: kept to what needs no quoting.
NAME_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,127}$"

# auto (the default): told apart each round until decided (sglang_sentinel.router.detect); probed as
# a "server" until then, with sentinel_target_kind_undecided 1 on the target's scrape.
TargetKind = Literal["server", "router", "auto"]


class FleetTarget(Section):
    # From the configuration (or the file_sd ``name`` label), never from what the target says.
    name: str = Field(pattern=NAME_PATTERN)
    url: str = Field(pattern=r"^https?://[^/\s]+/?$")
    kind: TargetKind = "auto"
    # Run the canaries against this target (off: readiness only).
    canaries: bool = True
    # A router's own metrics listener (smg --prometheus-port), where its breakers show.
    router_metrics_url: str = ""
    # Bearer key for the probes (SGLang's --api-key, the router's --api-key). TOML only: a
    # file_sd file is Prometheus's too, and its labels end up in series.
    api_key: Secret = ""

    @model_validator(mode="after")
    def _register_key(self) -> FleetTarget:
        register_secret(self.api_key)  # masked in every log line from now on
        return self


class FleetSloSettings(Section):
    """``[fleet.slo]``: a small closed-loop load through each target every ``every_rounds`` rounds."""

    enabled: bool = False
    every_rounds: int = Field(default=10, ge=1, le=10_000)
    num_requests: int = Field(default=8, ge=1, le=1000)
    max_concurrency: int = Field(default=2, ge=1, le=64)
    input_len: int = Field(default=128, ge=1, le=32768)
    output_len: int = Field(default=32, ge=1, le=8192)
    # Bounds the whole run (a wedged target must not hold a fleet slot for 15 min).
    timeout: float = Field(default=120.0, gt=0, le=3600)


class FleetSettings(Section):
    targets: tuple[FleetTarget, ...] = ()
    # A Prometheus file_sd JSON file, re-read when it changes (deploy/fleet/README.md: the
    # ``name`` label names each target, ``kind`` is optional).
    file_sd: Path | None = None
    file_sd_check_interval: float = Field(default=5.0, gt=0, le=3600)
    # Every target is probed once per interval, each at its own phase (derived from its name, so
    # a restart keeps the spread) plus up to ``jitter`` × interval of random delay per round.
    interval: float = Field(default=30.0, ge=1, le=86400)
    jitter: float = Field(default=0.1, ge=0, le=0.5)
    readiness_timeout: float = Field(default=10.0, gt=0, le=300)
    # At most this many targets probed at the same moment: canaries are load.
    max_concurrency: int = Field(default=16, ge=1, le=1024)
    canary: CanaryCheckSettings = Field(default_factory=CanaryCheckSettings)
    slo: FleetSloSettings = Field(default_factory=FleetSloSettings)

    @model_validator(mode="after")
    def _unique_names(self) -> FleetSettings:
        names = [t.name for t in self.targets]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"target names must be unique, repeated: {', '.join(dup)}")
        return self


class FleetFile(Section):
    fleet: FleetSettings = Field(default_factory=FleetSettings)
    exporter: ExporterSettings = Field(default_factory=lambda: ExporterSettings(port=9481))
    log_level: Literal["debug", "info", "warning", "error"] = "info"
