"""``sentinel config``: validate the configuration and print the effective values as JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from sentinel.cli.common import add_common_options
from sentinel.config import load_settings
from sentinel.redact import is_secret_name, redact

__all__ = ["register"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "config", help="validate the configuration and print the effective values"
    )
    add_common_options(p)
    p.set_defaults(handler=_handle)


# Keys whose values are credentials (redact.is_secret_name: "api_key", "password", "..._token", but
# not "tokens_per_hour"): shown as set/unset, never printed (configs get pasted into tickets).


def _mask(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: ("<set>" if v else "<unset>")
            if is_secret_name(k) and not isinstance(v, dict | list)
            else _mask(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_mask(v) for v in value]
    if isinstance(value, str):
        # A key can also hide in a value (extra_args = ["--api-key", ...], env, a URL).
        return redact(value)
    return value


def _handle(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    print(json.dumps(_mask(settings.model_dump(mode="json")), indent=2, sort_keys=True))
    return 0
