"""Loading ``sentinel fleet``'s TOML: every problem is one :class:`FleetConfigError` naming the field."""

from __future__ import annotations

import tomllib
from pathlib import Path

from pydantic import ValidationError

from sglang_sentinel.fleet.settings import FleetFile

__all__ = ["FleetConfigError", "load_fleet_file"]


class FleetConfigError(Exception):
    """A configuration that cannot be used; the message is for a human, verbatim."""


def load_fleet_file(path: Path) -> FleetFile:
    try:
        with path.open("rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise FleetConfigError(f"config file {path}: not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise FleetConfigError(f"config file {path}: invalid TOML: {exc}") from None
    except OSError as exc:
        raise FleetConfigError(f"config file {path}: {exc.strerror or exc}") from None
    try:
        config = FleetFile.model_validate(data)
    except ValidationError as exc:
        lines = [f"invalid configuration ({path}):"]
        for err in exc.errors(include_url=False):
            loc = ".".join(str(p) for p in err["loc"]) or "(top level)"
            msg = "unknown key" if err["type"] == "extra_forbidden" else err["msg"]
            if (
                err["type"] != "extra_forbidden"
                and "input" in err
                and not isinstance(err["input"], dict | list)
            ):
                msg = f"{msg} (got {err['input']!r})"
            lines.append(f"  {loc}: {msg}")
        raise FleetConfigError("\n".join(lines)) from None
    if not config.fleet.targets and config.fleet.file_sd is None:
        raise FleetConfigError(
            f"invalid configuration ({path}):\n  fleet: no [[fleet.targets]] and no file_sd"
        )
    return config
