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
from pathlib import Path
from typing import Any, Literal

from pydantic import Field, ValidationError
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from sentinel.calibrate.settings import CalibrationSettings
from sentinel.collect.settings import CollectorsSettings
from sentinel.export.settings import ExporterSettings
from sentinel.schedule.settings import ScheduleSettings
from sentinel.section import Section
from sentinel.supervise.settings import ServerSettings

__all__ = ["ENV_PREFIX", "ConfigError", "LogSettings", "Settings", "load_settings"]

ENV_PREFIX = "SENTINEL_"
# Read by the CLI itself, not a settings field.
_ENV_NOT_FIELDS = frozenset({"SENTINEL_CONFIG"})


class ConfigError(Exception):
    """A configuration that cannot be used. The message is meant for a human, verbatim."""


class LogSettings(Section):
    level: Literal["debug", "info", "warning", "error"] = "info"
    format: Literal["auto", "json", "console"] = "auto"


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
    state_dir: Path = Path("/var/lib/sentinel")

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # The TOML data is handed over as init kwargs by load_settings(); env must beat it, so
        # env comes first and the file's values act as the next layer down.
        return (env_settings, init_settings)


def _read_toml(path: Path) -> dict[str, Any]:
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


def _unknown_env(environ: dict[str, str]) -> list[str]:
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


def _format_validation(exc: ValidationError, origin: str) -> str:
    lines = [f"invalid configuration ({origin}):"]
    for err in exc.errors(include_url=False):
        loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        elif "input" in err and not isinstance(err["input"], dict | list):
            msg = f"{msg} (got {err['input']!r})"
        lines.append(f"  {loc}: {msg}")
    return "\n".join(lines)


def load_settings(path: Path | str | None = None, environ: dict[str, str] | None = None) -> Settings:
    """Build the settings from an optional TOML file and the environment.

    ``path`` defaults to ``$SENTINEL_CONFIG``; with neither, only env and defaults apply.
    """
    env = dict(os.environ if environ is None else environ)
    if path is None and env.get("SENTINEL_CONFIG"):
        path = env["SENTINEL_CONFIG"]
    data: dict[str, Any] = {}
    origin = "defaults and environment"
    if path is not None:
        p = Path(path)
        data = _read_toml(p)
        origin = f"{p} and environment"
    unknown = _unknown_env(env)
    if unknown:
        raise ConfigError(
            "unknown environment variable(s): "
            + ", ".join(unknown)
            + f" (known sections: {', '.join(sorted(Settings.model_fields))})"
        )
    saved = None
    if environ is not None:
        # pydantic-settings reads os.environ; swap it for the duration when a caller passes its own.
        saved = dict(os.environ)
        os.environ.clear()
        os.environ.update(env)
    try:
        return Settings(**data)
    except ValidationError as exc:
        raise ConfigError(_format_validation(exc, origin)) from None
    finally:
        if saved is not None:
            os.environ.clear()
            os.environ.update(saved)
