"""What every subcommand module shares: the error it raises and the options it takes.

The bottom of :mod:`sglang_sentinel.cli`: it imports nothing of sentinel, so a command module, in
this package or in a plugin (entry-point group ``sentinel.commands``), can use it without
importing the parser that imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import math
import signal
import threading
from collections.abc import Callable, Iterator

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


def bounded(
    kind: type[int] | type[float],
    *,
    ge: float | None = None,
    gt: float | None = None,
    le: float | None = None,
) -> Callable[[str], int | float]:
    """An argparse ``type=`` for a number within bounds.

    A bad value is refused while parsing, so the message names the flag as the user wrote it
    (``argument --num-prompts: must be >= 1, got -5``, exit 2) rather than the field the value
    would have been copied into."""

    def convert(text: str) -> int | float:
        try:
            value = kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise argparse.ArgumentTypeError(f"expected {what}, got {text!r}") from None
        if isinstance(value, float) and math.isnan(value):
            raise argparse.ArgumentTypeError(f"expected a number, got {text!r}")
        if ge is not None and value < ge:
            raise argparse.ArgumentTypeError(f"must be >= {ge:g}, got {text}")
        if gt is not None and value <= gt:
            raise argparse.ArgumentTypeError(f"must be > {gt:g}, got {text}")
        if le is not None and value > le:
            raise argparse.ArgumentTypeError(f"must be <= {le:g}, got {text}")
        return value

    convert.__name__ = kind.__name__
    return convert


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
