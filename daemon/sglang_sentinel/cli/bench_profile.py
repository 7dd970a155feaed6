"""``sentinel bench --profile``'s flags and the plan they make; the calls are
:mod:`sglang_sentinel.load.torch_profile`'s (what they send and when is documented there).
"""

from __future__ import annotations

import argparse
from urllib.parse import urlsplit

from sglang_sentinel.cli.common import CliError
from sglang_sentinel.load.torch_profile import ACTIVITIES, ProfilePlan

__all__ = ["add_profile_options", "profile_plan"]


def add_profile_options(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group(
        "profiler (SGLang's /start_profile and /stop_profile, bench_serving's flags)"
    )
    g.add_argument("--profile", action="store_true", help="run SGLang's torch profiler over the measured run")
    g.add_argument("--profile-activities", nargs="+", default=["CPU", "GPU"], choices=ACTIVITIES)
    g.add_argument("--profile-start-step", type=int, default=None, help="start at this forward step")
    g.add_argument(
        "--profile-steps", type=int, default=None, help="profile this many steps; the server stops"
    )
    g.add_argument("--profile-num-steps", type=int, default=None)
    g.add_argument("--profile-by-stage", action="store_true", default=False)
    g.add_argument("--profile-stages", nargs="+", default=None)
    g.add_argument("--profile-output-dir", default=None, help="the server's trace directory")
    g.add_argument("--profile-prefix", default=None, help="prefix of the trace file names")
    g.add_argument("--pd-separated", action="store_true", help="profile the PD workers named below")
    urls = g.add_mutually_exclusive_group()
    urls.add_argument("--profile-prefill-url", nargs="*", default=None, metavar="URL")
    urls.add_argument("--profile-decode-url", nargs="*", default=None, metavar="URL")


def _check_url(flag: str, url: str) -> str:
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise CliError(f"{flag} {url!r}: an http:// or https:// URL", 2)
    return url.rstrip("/")


def profile_plan(args: argparse.Namespace) -> ProfilePlan | None:
    """The plan the profiler flags describe, None without --profile; `CliError` (exit 2) for a bad URL."""
    if not args.profile:
        return None
    for flag in ("profile_start_step", "profile_steps", "profile_num_steps"):
        value = getattr(args, flag)
        if value is not None and value < 0:
            raise CliError(f"--{flag.replace('_', '-')} must be >= 0, got {value}", 2)
    workers: list[tuple[str, str]] = []
    if args.pd_separated:
        for k, url in enumerate(args.profile_prefill_url or []):
            workers.append((f"Prefill-{k}", _check_url("--profile-prefill-url", url)))
        for k, url in enumerate(args.profile_decode_url or []):
            workers.append((f"Decode-{k}", _check_url("--profile-decode-url", url)))
    return ProfilePlan(
        activities=tuple(args.profile_activities),
        start_step=args.profile_start_step,
        steps=args.profile_steps,
        num_steps=args.profile_num_steps,
        by_stage=args.profile_by_stage,
        stages=tuple(args.profile_stages) if args.profile_stages is not None else None,
        output_dir=args.profile_output_dir,
        prefix=args.profile_prefix,
        pd_separated=args.pd_separated,
        workers=tuple(workers),
    )
