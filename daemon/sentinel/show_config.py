"""``sentinel config``: validate the configuration and print the effective values as JSON."""

from __future__ import annotations

import argparse
import json
from typing import Any

from sentinel.config import load_settings

__all__ = ["register"]


def register(sub: Any) -> None:
    from sentinel.cli import add_common_options

    p: argparse.ArgumentParser = sub.add_parser(
        "config", help="validate the configuration and print the effective values"
    )
    add_common_options(p)
    p.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    settings = load_settings(args.config)
    print(json.dumps(settings.model_dump(mode="json"), indent=2, sort_keys=True))
    return 0
