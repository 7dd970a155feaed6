"""The ``sentinel`` command line: one subcommand per capability.

Each subcommand lives in its own module, ``sentinel.<package>.command``, which exposes
``register(subparsers)``; that adds a parser whose default ``handler(args) -> int`` runs it.
Heavy imports belong inside the handlers so that ``sentinel --help`` stays fast.

Other distributions (and other top-level packages of this one: ``sentinel sim`` is
``sentinel_sim.command``) add subcommands through the ``sentinel.commands`` entry-point group, so
that ``sentinel`` never imports them by name.

Exit codes: 0 success, 1 the operation failed, 2 bad usage or configuration, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from sentinel import __version__
from sentinel.config import ConfigError

__all__ = ["COMMANDS", "PLUGIN_GROUP", "CliError", "main"]

# (subcommand module, in the order `sentinel --help` lists them)
COMMANDS: tuple[str, ...] = (
    "sentinel.show_config",
    "sentinel.collect.command",
    "sentinel.supervise.command",
    "sentinel.load.command",
    "sentinel.calibrate.command",
    "sentinel.run",
    "sentinel.status",
)


class CliError(Exception):
    """A failure to report as one line on stderr, with an exit code, and no traceback."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sentinel",
        description="Keep an SGLang server up, load it on a schedule, and export it all to Prometheus.",
    )
    parser.add_argument("--version", action="version", version=f"sentinel {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for module_name in COMMANDS:
        importlib.import_module(module_name).register(sub)
    for module_name in _plugin_command_modules():
        try:
            module = importlib.import_module(module_name)
        except ImportError as exc:
            # A broken plugin must not take the built-in commands down with it.
            print(f"sentinel: command plugin {module_name} not loaded: {exc}", file=sys.stderr)
            continue
        module.register(sub)
    return parser


PLUGIN_GROUP = "sentinel.commands"


def _plugin_command_modules() -> list[str]:
    """Modules named in the ``sentinel.commands`` entry-point group, sorted by command name.

    An entry point's value is a module exposing ``register(subparsers)``, like the built-in ones.
    Only the installed metadata is read here (a few milliseconds); the module is imported by the
    caller, and its own heavy imports wait for its handler.
    """
    from importlib.metadata import entry_points

    found = sorted(entry_points(group=PLUGIN_GROUP), key=lambda ep: ep.name)
    # The same distribution seen twice on sys.path (an editable install plus a build tree) is one.
    modules = dict.fromkeys(ep.value.partition(":")[0] for ep in found)
    return [name for name in modules if name not in COMMANDS]


def add_common_options(parser: argparse.ArgumentParser) -> None:
    """Options every subcommand shares: the config file and logging overrides."""
    parser.add_argument(
        "--config",
        metavar="PATH",
        default=None,
        help="TOML config file (default: $SENTINEL_CONFIG; without either, the built-in defaults)",
    )
    parser.add_argument(
        "--log-level", choices=("debug", "info", "warning", "error"), default=None, help="override log.level"
    )
    parser.add_argument(
        "--log-format", choices=("auto", "json", "console"), default=None, help="override log.format"
    )


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
        return code
    except ConfigError as exc:
        print(f"sentinel: {exc}", file=sys.stderr)
        return 2
    except CliError as exc:
        print(f"sentinel {args.command}: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
