"""``sentinel tune``: find the fastest launch configuration that still answers correctly.

The base launch is the config's ``[server]`` profile; the flags to vary come from ``[tune]
space`` and ``--vary FLAG=V1,V2,...`` (docs/tune.md). Each configuration is a server life of
its own as a managed child: correctness gate first, then calibrations (a race against the best so
far, or successive halving), the
reference profile for the finalists. State lives in ``<state_dir>/tune/<id>/state.json``; the
same config resumes its unfinished tune (``--new`` starts over, ``--resume ID`` names one).

Exit status: 0 a winner (or the baseline kept); 1 no configuration was correct and measured;
2 bad usage or configuration; 130 interrupted (the state is kept: run again to resume).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_sentinel.cli.common import CliError, add_common_options, ignoring_sighup

if TYPE_CHECKING:
    from sglang_sentinel.config import Settings
    from sglang_sentinel.tune.settings import TuneSettings

__all__ = ["register"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "tune",
        help="find the fastest launch flags that still answer correctly (restarts the server per trial)",
        description="Try launch configurations one server life each: correctness gate, calibration "
        "(race against the best so far, or successive halving), reference profile; pick a winner only "
        "beyond the noise.",
    )
    add_common_options(p)
    p.add_argument(
        "--vary",
        action="append",
        default=[],
        metavar="FLAG=V1,V2,...",
        help="a flag and its values (repeatable; adds to or replaces [tune] space)",
    )
    p.add_argument("--budget-time", type=float, default=None, metavar="S", help="trial seconds of the tune")
    p.add_argument("--budget-tokens", type=int, default=None, metavar="N", help="tokens the tune may send")
    p.add_argument("--json", action="store_true", help="print the result document instead of the table")
    p.add_argument("--report", type=Path, default=None, metavar="DIR", help="write the HTML report here")
    p.add_argument(
        "--adopt",
        action="store_true",
        help="make the winner the configured profile (appended to --config when it has no such table) "
        "and record it known-good for [server.fallback]",
    )
    r = p.add_mutually_exclusive_group()
    r.add_argument(
        "--resume", default=None, metavar="ID", help="resume this tune (default: the unfinished one)"
    )
    r.add_argument("--new", action="store_true", help="start a new tune even if one is unfinished")
    p.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    with ignoring_sighup():
        return _tune_command(args)


def _tune_settings(settings: Settings, args: argparse.Namespace) -> TuneSettings:
    from pydantic import ValidationError

    from sglang_sentinel.tune.settings import TuneSettings
    from sglang_sentinel.tune.space import merge_vary

    try:
        tune = merge_vary(settings.tune, args.vary)
        data = tune.model_dump()
        if args.budget_time is not None:
            data["budget_time_s"] = args.budget_time
        if args.budget_tokens is not None:
            data["budget_tokens"] = args.budget_tokens
        return TuneSettings.model_validate(data)
    except ValidationError as exc:
        err = exc.errors(include_url=False)[0]
        where = ".".join(str(x) for x in err["loc"])
        raise CliError(
            f"invalid option (tune.{where}): {str(err['msg']).removeprefix('Value error, ')}", 2
        ) from None
    except ValueError as exc:
        raise CliError(str(exc), 2) from None


def _tune_command(args: argparse.Namespace) -> int:
    from sglang_sentinel.config import load_settings
    from sglang_sentinel.daemon import resolve_state_dir
    from sglang_sentinel.log import configure_logging
    from sglang_sentinel.supervise.launch import ProfileError, version_text
    from sglang_sentinel.supervise.prelaunch import render_launch_command
    from sglang_sentinel.tune.space import SpaceError, expand, space_values
    from sglang_sentinel.tune.state import (
        StateFileError,
        find_unfinished,
        fingerprint,
        load_doc,
        new_tune_id,
        tune_root,
    )

    settings = load_settings(args.config)
    # Warnings and up by default: the trial lines on stderr are the progress, and every server
    # start would otherwise add half a dozen info events between them.
    configure_logging(args.log_level or "warning", args.log_format or settings.log.format)
    tune = _tune_settings(settings, args)
    if settings.server.mode != "child":
        raise CliError(
            f"[server] mode = {settings.server.mode!r}: a tune starts the server with each "
            "configuration's flags, which only child mode does (mode = \"child\"; a systemd unit's "
            "command line is the unit's)",
            2,
        )
    if not tune.space:
        raise CliError("nothing to vary: give --vary FLAG=V1,V2,... or a [tune.space] table", 2)
    if tune.reference_profile and tune.reference_profile not in settings.schedule.profiles:
        known = ", ".join(sorted(settings.schedule.profiles)) or "none"
        raise CliError(
            f"tune.reference_profile: no [schedule.profiles.{tune.reference_profile}] (known: {known}; "
            '"" for none)',
            2,
        )
    if args.report is not None:
        from sglang_sentinel.reportkit import ReportError, require_matplotlib

        try:
            # Before any server starts: finding out after hours of trials would waste them.
            require_matplotlib("--report")
        except ReportError as exc:
            raise CliError(str(exc), 2) from None
    try:
        configs = expand(tune)
    except SpaceError as exc:
        raise CliError(str(exc), 2) from None
    try:
        base = asyncio.run(render_launch_command(settings.server))
    except ProfileError as exc:
        raise CliError(f"server.profile: {exc}", 2) from None
    state_dir = resolve_state_dir(settings, os.environ)
    lab = _lab(settings, tune, base, state_dir)  # directory fixed below
    argvs, seen, kept = [], set(), []
    for flags in configs:
        argv = lab.argv_for(flags)
        if tuple(argv) in seen:
            continue  # the same command line twice (e.g. `false` of a flag the base lacks)
        seen.add(tuple(argv))
        argvs.append(argv)
        kept.append(flags)
    fp = fingerprint(
        {
            "argv": base.redacted_argv(),
            "configs": kept,
            "tune": tune.model_dump(exclude={"budget_time_s", "budget_tokens"}),
            "calibration": settings.calibration.model_dump(),
        }
    )
    writer = _ReportWriter(args.report)
    tune_id = args.resume
    if tune_id is None and not args.new:
        tune_id = find_unfinished(state_dir, fp)
        if tune_id is not None:
            print(f"resuming tune {tune_id} (--new to start over)", file=sys.stderr)
    if tune_id is not None:
        directory = tune_root(state_dir) / tune_id
        try:
            doc = load_doc(directory)
        except StateFileError as exc:
            raise CliError(str(exc), 2) from None
        if doc.get("fingerprint") != fp:
            print(
                f"sentinel tune: warning: tune {tune_id} was started with another config (launch, space or "
                "[tune]/[calibration] settings); its remaining trials run with this one's",
                file=sys.stderr,
            )
        doc["budget"]["time_s"], doc["budget"]["tokens"] = tune.budget_time_s, tune.budget_tokens
        if doc["finished_at"] is not None:
            writer(doc)
            return _output(doc, args, writer)
    else:
        from sglang_sentinel.tune.driver import new_doc

        tune_id = new_tune_id()
        directory = tune_root(state_dir) / tune_id
        doc = new_doc(
            tune_id,
            tune,
            space=space_values(tune),
            configs=kept,
            argvs=argvs,
            base_argv=base.redacted_argv(),
            sglang_version=version_text(base.sglang_version),
            fp=fp,
        )
        print(f"tune {tune_id}: {len(kept)} configurations, state in {directory}", file=sys.stderr)
    lab = _lab(settings, tune, base, directory)
    try:
        doc, interrupted = asyncio.run(_run(doc, directory, lab, tune, on_trial=writer))
    except StateFileError as exc:
        raise CliError(str(exc), 1) from None
    if interrupted:
        if args.json:
            print(json.dumps(doc, indent=1))  # what ran so far, marked interrupted_at
        print(f"interrupted: run the same command again to resume tune {tune_id}", file=sys.stderr)
        return 130
    code = _output(doc, args, writer)
    if args.adopt:
        from sglang_sentinel.tune.adopt import adopt_winner

        for line in adopt_winner(doc, base, args.config, state_dir):
            print(line, file=sys.stderr)
    return code


class _ReportWriter:
    """``--report DIR``: the page and its JSON, rewritten (atomically) after every finished trial,
    at the end and on an interruption, so a killed or interrupted tune keeps them up to its last
    trial, marked partial (docs/tune-report.md). A failure is said once and the tune goes on."""

    def __init__(self, directory: Path | None) -> None:
        self.directory = directory
        self.failed = False

    def __call__(self, doc: dict[str, Any]) -> None:
        if self.directory is None or self.failed:
            return
        from sglang_sentinel.reportkit import ReportError
        from sglang_sentinel.tune.report import write_report

        try:
            write_report(doc, self.directory)
        except (ReportError, OSError) as exc:
            self.failed = True
            print(f"sentinel tune: report not written in {self.directory}: {exc}", file=sys.stderr)


def _lab(settings: Settings, tune: TuneSettings, base: Any, directory: Path) -> Any:
    from sglang_sentinel.tune.gpu import nvml_state_reader
    from sglang_sentinel.tune.trial import ServerLab

    gpu_cfg = settings.collectors.gpu
    if gpu_cfg.backend == "fake":
        from sglang_sentinel.collect.gpu.fake import FakeNvml

        fake = FakeNvml(gpu_cfg.fake_devices, "busy")
        factory: Any = lambda: fake  # noqa: E731
    else:
        import pynvml

        factory = lambda: pynvml  # noqa: E731
    reference = settings.schedule.profiles.get(tune.reference_profile) if tune.reference_profile else None
    return ServerLab(
        settings.server,
        base,
        tune,
        settings.calibration,
        directory=directory,
        reference=reference,
        gpu_state=nvml_state_reader(factory),
        say=lambda line: print(line, file=sys.stderr, flush=True),
    )


async def _run(
    doc: dict[str, Any],
    directory: Path,
    lab: Any,
    tune: TuneSettings,
    *,
    on_trial: Callable[[dict[str, Any]], None] = lambda doc: None,
) -> tuple[dict[str, Any], bool]:
    from sglang_sentinel.tune.driver import Tune
    from sglang_sentinel.tune.state import now_iso, save_doc

    say = lambda line: print(line, file=sys.stderr, flush=True)  # noqa: E731
    runner = Tune(doc, directory, lab, tune, say=say, on_trial=on_trial)
    task = asyncio.ensure_future(runner.run())
    loop = asyncio.get_running_loop()
    interrupted = False

    def stop() -> None:
        nonlocal interrupted
        interrupted = True
        task.cancel()  # the life in progress stops its server (finally: sup.stop())

    handled = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop)
            handled.append(sig)
    try:
        with contextlib.suppress(asyncio.CancelledError):
            await task
    finally:
        for sig in handled:
            loop.remove_signal_handler(sig)
    if interrupted:
        runner.doc["interrupted_at"] = now_iso()
        save_doc(directory, runner.doc)
        on_trial(runner.doc)
    return runner.doc, interrupted


def _output(doc: dict[str, Any], args: argparse.Namespace, writer: _ReportWriter) -> int:
    from sglang_sentinel.tune.table import format_table

    if args.json:
        print(json.dumps(doc, indent=1))
    else:
        print(format_table(doc))
    if writer.directory is not None and not writer.failed:
        print(f"report: {writer.directory / 'index.html'}", file=sys.stderr)
    return 0 if doc.get("winner") else 1
