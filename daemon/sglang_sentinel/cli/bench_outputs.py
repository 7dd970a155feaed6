"""``sentinel bench``'s report files beside ``--output-file``: ``--output-csv`` and ``--output-html``.

Their paths (and ``--output-file``'s) are checked before the run, and ``--output-html``'s
matplotlib too: a bad path found after an hour-long run would waste it (exit 2, naming the
flag). They are written after the run in every case, partial runs included, as the JSONL is.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path
from typing import TYPE_CHECKING

from sglang_sentinel.cli.common import CliError

if TYPE_CHECKING:
    from sglang_sentinel.load.result import RunResult

__all__ = ["check_outputs", "run_flags", "write_reports"]


def _check_output_path(flag: str, path: Path) -> None:
    """Exit 2 before the run when ``path`` cannot be written: finding out after it wastes it."""
    parent = path.parent
    if path.is_dir():
        raise CliError(f"{flag} {path}: is a directory", 2)
    if not parent.is_dir():
        raise CliError(f"{flag} {path}: directory {parent} does not exist", 2)
    if not os.access(parent, os.W_OK | os.X_OK) or (path.exists() and not os.access(path, os.W_OK)):
        raise CliError(f"{flag} {path}: not writable", 2)


def check_outputs(args: argparse.Namespace) -> None:
    for flag in ("--output-file", "--output-csv", "--output-html"):
        path = getattr(args, flag[2:].replace("-", "_"))
        if path is not None:
            _check_output_path(flag, path)
    if args.output_html is not None:
        from sglang_sentinel.reportkit import ReportError, require_matplotlib

        try:
            require_matplotlib("--output-html")
        except ReportError as exc:
            raise CliError(str(exc), 2) from None


# Not part of a report's list of flags: how argparse routes the command, and the refused flags.
_NOT_FLAGS = ("handler", "bench_serving_rejected", "command")


def run_flags(args: argparse.Namespace) -> list[tuple[str, str]]:
    """The run's options as (flag, value), secrets masked: what the HTML report lists."""
    from sglang_sentinel.redact import MASK, is_secret_name, redact

    out: list[tuple[str, str]] = []
    for dest, value in sorted(vars(args).items()):
        if dest in _NOT_FLAGS or dest.startswith("rejected_"):
            continue
        if dest == "header":
            shown = " ".join(
                f"{k}={MASK}" if is_secret_name(k.strip()) else f"{k}={v}"
                for k, _, v in (h.partition("=") for h in value)
            )
        elif isinstance(value, list | tuple):
            shown = " ".join(map(str, value))
        else:
            shown = "" if value is None else str(value)
        out.append(("--" + dest.replace("_", "-"), redact(shown)))
    return out


def write_reports(args: argparse.Namespace, result: RunResult) -> None:
    """--output-csv and --output-html, in every case (partial runs too), as --output-file."""
    if args.output_csv is not None:
        from sglang_sentinel.load.request_csv import write_csv

        try:
            write_csv(result, args.output_csv)
        except OSError as exc:
            raise CliError(f"cannot write --output-csv {args.output_csv}: {exc.strerror}") from None
    if args.output_html is not None:
        from sglang_sentinel.load.run_report import write_bench_report
        from sglang_sentinel.reportkit import ReportError

        try:
            write_bench_report(result, args.output_html, run_flags(args))
        except ReportError as exc:
            raise CliError(str(exc)) from None
