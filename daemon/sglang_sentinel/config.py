"""Configuration: one TOML file plus ``SENTINEL_*`` environment variables.

Precedence, highest first: environment (``SENTINEL_SECTION__KEY=value``), the TOML file
(``--config PATH`` or ``SENTINEL_CONFIG``), the defaults. The defaults alone are the embedded
default deployment: the built-in simulator as a managed child on loopback.

Every problem (unreadable file, TOML syntax, unknown key, invalid value) becomes one
:class:`ConfigError` whose message names the file and each offending field; the CLI turns it
into exit code 2.
"""

from __future__ import annotations

import os
import tomllib
from collections.abc import Mapping
from contextvars import ContextVar
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError, model_validator
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    TomlConfigSettingsSource,
)

from sglang_sentinel.calibrate.settings import CalibrationSettings
from sglang_sentinel.collect.settings import CollectorsSettings, CostSettings, EnergySettings
from sglang_sentinel.export.settings import ExporterSettings
from sglang_sentinel.group.settings import GroupSettings
from sglang_sentinel.schedule.settings import ScheduleSettings
from sglang_sentinel.section import Section
from sglang_sentinel.supervise.settings import ServerSettings
from sglang_sentinel.tune.settings import TuneSettings

__all__ = ["ENV_PREFIX", "ConfigError", "LogSettings", "Settings", "load_settings", "resolve_state_dir"]

ENV_PREFIX = "SENTINEL_"
# Read by the CLI itself, not settings fields: the config path, and the API key that `bench` and
# `sweep` send (cli/target.py; the daemon's own key is [server] api_key or api_key_file).
_ENV_NOT_FIELDS = frozenset({"SENTINEL_CONFIG", "SENTINEL_API_KEY"})


class ConfigError(Exception):
    """A configuration that cannot be used. The message is meant for a human, verbatim."""


class LogSettings(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


@dataclass(frozen=True, slots=True)
class _Inputs:
    path: Path | None
    environ: Mapping[str, str]


# What one load_settings() call reads. settings_customise_sources is a classmethod without
# per-call arguments; a context variable hands it this call's file and environment. Each thread
# (and each asyncio task) sees its own value, so a SIGHUP reload on one thread and a load on
# another never see each other's inputs, and nothing process-wide (os.environ) is swapped.
_INPUTS: ContextVar[_Inputs | None] = ContextVar("sentinel_config_inputs", default=None)


def _collectors_for(kind: str, c: CollectorsSettings) -> CollectorsSettings:
    # A router target's pool series come from the "router" collector: on by default there,
    # but an explicit [collectors] enabled list is the operator's word.
    if kind == "router" and "router" not in c.enabled and "enabled" not in c.model_fields_set:
        return c.model_copy(update={"enabled": (*c.enabled, "router")})
    return c


class Settings(BaseSettings):
    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX,
        env_nested_delimiter="__",
        extra="forbid",
        frozen=True,
        case_sensitive=False,
    )

    log: LogSettings = Field(default_factory=LogSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    exporter: ExporterSettings = Field(default_factory=ExporterSettings)
    collectors: CollectorsSettings = Field(default_factory=CollectorsSettings)
    schedule: ScheduleSettings = Field(default_factory=ScheduleSettings)
    calibration: CalibrationSettings = Field(default_factory=CalibrationSettings)
    group: GroupSettings = Field(default_factory=GroupSettings)
    tune: TuneSettings = Field(default_factory=TuneSettings)
    energy: EnergySettings = Field(default_factory=EnergySettings)
    cost: CostSettings = Field(default_factory=CostSettings)
    state_dir: Path = Path("/var/lib/sentinel")

    @model_validator(mode="after")
    def _router_collector(self) -> Settings:
        collectors = _collectors_for(self.server.kind, self.collectors)
        if collectors is not self.collectors:
            object.__setattr__(self, "collectors", collectors)  # frozen model, still being built
        return self

    @model_validator(mode="after")
    def _group_follower_mode(self) -> Settings:
        g = self.group
        if g.enabled and g.node_rank >= 1 and self.server.mode == "external":
            # Its only HTTP server is SGLang's dummy /health (200 whatever happens): nothing to observe.
            raise ValueError(
                "group.node_rank >= 1 needs [server] mode = child or systemd (a rank >= 1 answers only a "
                "dummy /health, so external observation would see nothing)"
            )
        return self

    def with_target_kind(self, kind: Literal["server", "router"]) -> Settings:
        """These settings with ``[server] kind`` resolved (``auto`` detected at start)."""
        server = self.server.model_copy(update={"kind": kind})
        return self.model_copy(
            update={"server": server, "collectors": _collectors_for(kind, self.collectors)}
        )

    def with_gpu_expectation(self) -> Settings:
        """These settings with ``[collectors.gpu] expected`` resolved: as written, else whether the
        launch (child or systemd mode) needs GPUs. An unusable profile counts as needing them:
        validation refuses it anyway, and the cautious reading of a missing driver is a failure."""
        gpu = self.collectors.gpu
        if gpu.expected is not None:
            return self
        from sglang_sentinel.supervise.launch import ProfileError, resolve_profile

        expected = False
        if self.server.mode != "external":
            try:
                expected = resolve_profile(self.server)[1].required_gpus > 0
            except ProfileError:
                expected = True
        collectors = self.collectors.model_copy(update={"gpu": gpu.model_copy(update={"expected": expected})})
        return self.model_copy(update={"collectors": collectors})

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        inputs = _INPUTS.get()
        if inputs is None:
            # Settings() built directly: keyword arguments over the process environment (read only).
            return (init_settings, env_settings)
        # Highest first. The file is read (and its errors raised) before the environment is
        # checked, so a missing file is reported as such, not as a stray variable.
        toml = () if inputs.path is None else (_TomlFile(settings_cls, inputs.path),)
        return (init_settings, _MappingEnv(settings_cls, inputs.environ), *toml)


class _TomlFile(TomlConfigSettingsSource):
    """pydantic-settings' TOML source, for one named file that must be readable."""

    def __init__(self, settings_cls: type[BaseSettings], path: Path) -> None:
        self._path = path
        super().__init__(settings_cls, toml_file=path)

    def _read_files(self, files: Any, deep_merge: bool = False) -> dict[str, Any]:
        # The stock source skips a path that is not a regular file; a config named by --config or
        # SENTINEL_CONFIG must exist, and may be a pipe (--config <(...)).
        return self._read_file(self._path)

    def _read_file(self, file_path: Any) -> dict[str, Any]:
        path = self._path
        try:
            with path.open("rb") as fh:
                return tomllib.load(fh)
        except FileNotFoundError:
            raise ConfigError(f"config file {path}: not found") from None
        except PermissionError:
            raise ConfigError(f"config file {path}: permission denied") from None
        except IsADirectoryError:
            raise ConfigError(f"config file {path}: is a directory") from None
        except tomllib.TOMLDecodeError as exc:
            raise ConfigError(f"config file {path}: invalid TOML: {exc}") from None
        except OSError as exc:
            raise ConfigError(f"config file {path}: {exc.strerror or exc}") from None


class _MappingEnv(EnvSettingsSource):
    """pydantic-settings' env source (prefix, ``__`` nesting, JSON values) over a given mapping.

    The stock source reads ``os.environ``; the daemon reloads on SIGHUP with the environment it
    started with while its scrape and GPU threads run, so the mapping is passed in instead.
    A ``SENTINEL_*`` variable naming no section is an error here: the stock source ignores it,
    and a typo would silently leave the default in place.
    """

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]) -> None:
        self._environ = environ
        super().__init__(settings_cls)
        unknown = _unknown_env(environ)
        if unknown:
            raise ConfigError(
                "unknown environment variable(s): "
                + ", ".join(unknown)
                + f" (known sections: {', '.join(sorted(Settings.model_fields))})"
            )

    def _load_env_vars(self) -> Mapping[str, str | None]:
        # Settings are case-insensitive (model_config): keys are matched lower-cased, as the stock
        # source does with case_sensitive=False.
        return {key.lower(): value for key, value in self._environ.items()}


def _unknown_env(environ: Mapping[str, str]) -> list[str]:
    fields = {name.upper() for name in Settings.model_fields}
    bad = []
    for key in environ:
        upper = key.upper()
        if not upper.startswith(ENV_PREFIX) or upper in _ENV_NOT_FIELDS:
            continue
        head = upper[len(ENV_PREFIX) :].split("__", 1)[0]
        if head not in fields:
            bad.append(key)
    return sorted(bad)


def _secret_field(loc: tuple[int | str, ...]) -> bool:
    """A field whose value an error must never echo (it is refused before it can be masked)."""
    name = str(loc[-1]).lower() if loc else ""
    return any(word in name for word in ("key", "token", "secret", "password"))


def _format_validation(exc: ValidationError, origin: str) -> str:
    lines = [f"invalid configuration ({origin}):"]
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif "input" in err and not isinstance(err["input"], dict | list) and not _secret_field(err["loc"]):
            msg = f"{msg} (got {err['input']!r})"
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def load_settings(path: Path | str | None = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Build the settings from an optional TOML file and the environment.

    ``environ`` defaults to a copy of ``os.environ`` taken now; it is only read, never installed.
    ``path`` defaults to ``$SENTINEL_CONFIG`` (of ``environ``); with neither, only env and
    defaults apply.
    """
    env = dict(os.environ if environ is None else environ)
    if path is None and env.get("SENTINEL_CONFIG"):
        path = env["SENTINEL_CONFIG"]
    file = None if path is None else Path(path)
    origin = "defaults and environment" if file is None else f"{file} and environment"
    token = _INPUTS.set(_Inputs(file, env))
    try:
        return Settings()
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc, origin)) from None
    finally:
        _INPUTS.reset(token)


def resolve_state_dir(settings: Settings, environ: Mapping[str, str]) -> Path:
    """The configured state_dir; when it was left at its default: systemd's $STATE_DIRECTORY, the
    default if writable, else the user's XDG state directory (so the README's first command works
    without root)."""
    if "state_dir" in settings.model_fields_set:
        return settings.state_dir
    if environ.get("STATE_DIRECTORY"):
        # systemd's StateDirectory= may list several, colon-separated: the first is ours.
        return Path(environ["STATE_DIRECTORY"].split(":")[0])
    default = settings.state_dir
    if os.access(default, os.W_OK) or (not default.exists() and os.access(default.parent, os.W_OK)):
        return default
    base = Path(environ.get("XDG_STATE_HOME") or Path.home() / ".local" / "state")
    return base / "sentinel"
