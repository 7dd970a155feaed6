"""The ``sentinel`` command line: one subcommand per capability.

Each subcommand lives in its own module of this package (``sglang_sentinel.cli.bench``, ...), which
exposes ``register(subparsers)``; that adds a parser whose default ``handler(args) -> int`` runs
it. The library packages never import this package: the CLI sits on top of them. Commands
shipped by other distributions register through the entry-point group ``sentinel.commands``
(each entry a module with ``register`` or the ``register`` function itself) and are listed after
the built-in ones. Heavy imports belong inside the handlers so that ``sentinel --help`` stays fast.

Exit codes: 0 success, 1 the operation failed, 2 bad usage or configuration, 130 interrupted.
"""

from __future__ import annotations

import argparse
import importlib
import signal
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any

from sglang_sentinel import __version__
from sglang_sentinel.cli import early_stop
from sglang_sentinel.cli.common import CliError, add_common_options

__all__ = ["COMMANDS", "ENTRY_POINT_GROUP", "CliError", "add_common_options", "build_parser", "main"]

# (subcommand module, in the order `sentinel --help` lists them)
COMMANDS: tuple[str, ...] = (
    "sglang_sentinel.cli.config",
    "sglang_sentinel.cli.collect",
    "sglang_sentinel.cli.check",
    "sglang_sentinel.cli.bench",
    "sglang_sentinel.cli.sweep",
    "sglang_sentinel.cli.tune",
    "sglang_sentinel.cli.run",
    "sglang_sentinel.cli.fleet",
    "sglang_sentinel.cli.status",
    "sglang_sentinel.cli.reset",
)

ENTRY_POINT_GROUP = "sentinel.commands"


def _register_plugins(sub: Any, taken: set[str]) -> None:
    """Register the commands of the ``sentinel.commands`` entry points, after the built-in ones.

    Loaded here, when the parser is built, not at import: an installed plugin costs nothing
    until the command line is parsed. A plugin naming a command that is already registered is
    skipped (the built-in one wins, and argparse would refuse the duplicate). A plugin that
    cannot be loaded costs its own command only: one line on stderr, the others still work.
    """
    from importlib.metadata import entry_points

    for ep in sorted(entry_points(group=ENTRY_POINT_GROUP), key=lambda e: e.name):
        if ep.name in taken:
            continue
        try:
            target = ep.load()
            register: Callable[[Any], None] = getattr(target, "register", target)
            register(sub)
        except Exception as exc:
            print(f"sentinel: command {ep.name!r} ({ep.value}) not loaded: {exc!r}", file=sys.stderr)
            continue
        taken.add(ep.name)


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
    _register_plugins(sub, set(sub.choices))
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args_list = list(sys.argv[1:] if argv is None else argv)
    if args_list[:1] == ["run"] and threading.current_thread() is threading.main_thread():
        # SIGTERM before the daemon's event loop installs its own handler (imports, config,
        # parsing): nothing has started yet, so stopping is exiting, with status 0 like any
        # requested stop; recorded too, for the daemon, where the exit is swallowed (early_stop).
        previous = signal.signal(signal.SIGTERM, early_stop.handle_sigterm)
        try:
            return _main(args_list)
        finally:
            signal.signal(signal.SIGTERM, previous)
    return _main(args_list)


def _print_error(text: str) -> None:
    """An exit reason on stderr; at error priority when stderr is the journal (the syslog prefix
    journald reads, as every log line carries), so `journalctl -p err` shows why it exited."""
    from sglang_sentinel.log import stream_is_journal

    prefix = "<3>" if stream_is_journal(sys.stderr) else ""
    print("\n".join(prefix + line for line in text.splitlines() or [""]), file=sys.stderr)


def _main(argv: Sequence[str]) -> int:
    # Here, not at the top: importing the config (pydantic) takes a while, and `run` wants its
    # SIGTERM handler installed first.
    from sglang_sentinel.config import ConfigError

    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        code: int = args.handler(args)
        return code
    except ConfigError as exc:
        _print_error(f"sentinel: {exc}")
        return 2
    except CliError as exc:
        _print_error(f"sentinel {args.command}: {exc}")
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
