"""``sentinel config``: validate the configuration as ``run`` would and print the effective values.

Everything ``sentinel run`` rejects before it starts is rejected here too (exit 2, each problem
naming its field): the settings' own checks, the exporter's TLS/users files, the launch profile,
a simulator profile's arguments (sglang_sentinel/validate.py). ``state_dir`` is the directory the daemon
will really use (systemd's ``$STATE_DIRECTORY``, the XDG fallback), not only the configured one.

Output is JSON (default) or TOML (``--toml``: a complete config file of the effective values,
loadable with ``--config``). Credentials are never printed: JSON shows ``<set>``/``<unset>``,
TOML leaves them out with a comment.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
from typing import Any

from sglang_sentinel.cli.common import add_common_options
from sglang_sentinel.redact import is_secret_name, redact

__all__ = ["register", "to_toml"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "config",
        help="validate the configuration as `run` would and print the effective values",
        description="Validate everything `sentinel run` checks before it starts, then print the "
        "effective configuration (secrets masked).",
    )
    add_common_options(p)
    p.add_argument("--toml", action="store_true", help="print TOML (a loadable config file) instead of JSON")
    p.set_defaults(handler=_handle)


# Keys whose values are credentials (redact.is_secret_name: "api_key", "password", "..._token", but
# not "tokens_per_hour" or "api_key_file"): shown as set/unset, never printed (configs get pasted
# into tickets). Other strings pass through redact(), which only touches registered secrets and
# key-shaped text (extra_args = ["--api-key", ...], a Bearer header in env).


def _is_secret(key: str, value: Any) -> bool:
    return is_secret_name(key) and not isinstance(value, dict | list)


def _mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: ("<set>" if v else "<unset>") if _is_secret(k, v) else _mask(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_mask(v) for v in value]
    if isinstance(value, str):
        return redact(value)
    return value


_BARE_KEY = re.compile(r"^[A-Za-z0-9_-]+$")


def _key(name: str) -> str:
    return name if _BARE_KEY.match(name) else json.dumps(name)


def _scalar(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        return repr(value)
    if isinstance(value, str):
        # A JSON string is a valid TOML basic string (the same escapes).
        return json.dumps(redact(value), ensure_ascii=False)
    if isinstance(value, list):
        return "[" + ", ".join(_scalar(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{_key(k)} = {_scalar(v)}" for k, v in value.items() if v is not None) + "}"
    raise TypeError(f"cannot write {type(value).__name__} as TOML")


def _is_table_list(value: Any) -> bool:
    return isinstance(value, list) and bool(value) and all(isinstance(v, dict) for v in value)


def _table(path: list[str], table: dict[str, Any], out: list[str], header: str | None) -> None:
    if header is not None:
        out.append("")
        out.append(header)
    nested: list[tuple[str, Any]] = []
    for key, value in table.items():
        if value is None:
            continue  # TOML has no null: left out, the default (None) applies
        if _is_secret(key, value):
            out.append(f"# {_key(key)} = ... ({'set' if value else 'unset'}; not printed)")
        elif isinstance(value, dict) or _is_table_list(value):
            nested.append((key, value))
        else:
            out.append(f"{_key(key)} = {_scalar(value)}")
    for key, value in nested:
        sub = [*path, _key(key)]
        if isinstance(value, dict):
            _table(sub, value, out, "[" + ".".join(sub) + "]")
        else:
            for item in value:
                _table(sub, item, out, "[[" + ".".join(sub) + "]]")


def to_toml(document: dict[str, Any]) -> str:
    """``document`` (a settings dump in JSON mode) as TOML, secrets left out."""
    out: list[str] = ["# sentinel: effective configuration (sentinel config --toml); secrets left out"]
    _table([], document, out, None)
    return "\n".join(out) + "\n"


def _handle(args: argparse.Namespace) -> int:
    from sglang_sentinel.config import load_settings, resolve_state_dir
    from sglang_sentinel.validate import validate

    settings = load_settings(args.config)
    validate(settings)
    document = settings.model_dump(mode="json")
    document["state_dir"] = str(resolve_state_dir(settings, os.environ))
    if args.toml:
        # A profile's fields as written, not all of them: a profile with a base inherits every
        # field it leaves out, and writing the defaults out would override the base's values.
        document["server"]["profiles"] = {
            name: profile.model_dump(mode="json", exclude_unset=True)
            for name, profile in settings.server.profiles.items()
        }
        print(to_toml(document), end="")
    else:
        print(json.dumps(_mask(document), indent=2, sort_keys=True))
    return 0
