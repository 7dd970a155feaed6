"""What every subcommand module shares: the error it raises and the options it takes.

The bottom of :mod:`sglang_sentinel.cli`: it imports nothing of sentinel but `bounded` (from
:mod:`sglang_sentinel.load.argtypes`, where the dataset modules' flags use it too), so a command
module, in this package or in a plugin (entry-point group ``sentinel.commands``), can use it
without importing the parser that imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import signal
import threading
from collections.abc import Iterator

from sglang_sentinel.load.argtypes import bounded

__all__ = ["CliError", "add_common_options", "bounded", "flag_error", "ignoring_sighup"]


# The load spec's fields as bench/sweep spell them on the command line: an error the spec raises
# after parsing (a value valid alone, wrong in combination) still names the flag.
_FLAGS = {
    "num_requests": "--num-prompts",
    "max_concurrency": "--max-concurrency",
    "request_rate": "--request-rate",
    "warmup_requests": "--warmup-requests",
    "request_timeout_s": "--request-timeout",
    "duration_s": "--duration",
    "ready_timeout_s": "--ready-check-timeout-sec",
    "top_p": "--top-p",
    "start_concurrency": "--start-concurrency",
    "growth_factor": "--growth-factor",
}


def flag_error(message: str) -> CliError:
    """A usage error (exit 2) from a spec's message, its field names replaced by their flags."""
    head, sep, rest = message.partition(" ")
    return CliError(f"{_FLAGS.get(head, head)}{sep}{rest}", 2)


class CliError(Exception):
    """A failure to report as one line on stderr, with an exit code, and no traceback."""

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


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


@contextlib.contextmanager
def ignoring_sighup() -> Iterator[None]:
    """SIGHUP ignored for the block: a one-shot command (sim, bench, sweep) started from a terminal
    or an ssh session keeps going when that closes; SIGINT/SIGTERM still stop it."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGHUP, previous)
