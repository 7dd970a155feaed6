"""``sentinel collect``: run the configured collectors once and print what /metrics would serve.

For the operator at 3 a.m. without Prometheus at hand, and for checking a config change: the
exposition goes to stdout, each failing collector's reason to stderr, and the exit status says
whether every collector succeeded (0) or not (1).
"""

from __future__ import annotations

import argparse
import asyncio
import re
import sys
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang_sentinel.config import Settings

from sglang_sentinel.cli.common import add_common_options

__all__ = ["register"]

_FAILED = re.compile(r'^sentinel_collector_success\{collector="([^"]+)"\} 0\.0$', re.MULTILINE)


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "collect", help="run the collectors once and print the exposition /metrics would serve"
    )
    add_common_options(p)
    p.add_argument(
        "--openmetrics", action="store_true", help="print OpenMetrics instead of the Prometheus text format"
    )
    p.add_argument(
        "--wait",
        type=float,
        default=None,
        metavar="SECONDS",
        help="how long to wait for the first GPU cycle (default: the GPU init timeout)",
    )
    p.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    from sglang_sentinel.config import load_settings
    from sglang_sentinel.log import configure_logging

    settings = load_settings(args.config)
    # Logs to stderr, warnings only by default: stdout is the exposition.
    configure_logging(args.log_level or "warning", args.log_format or settings.log.format)
    return asyncio.run(_run(settings, args))


async def _run(settings: Settings, args: argparse.Namespace) -> int:
    from sglang_sentinel.collect.gpu import GpuCollector
    from sglang_sentinel.collect.registry import build_collector_set
    from sglang_sentinel.collect.render import render

    collectors = build_collector_set(settings.with_gpu_expectation())
    await collectors.start()
    try:
        gpu = collectors.get("gpu")
        if isinstance(gpu, GpuCollector):
            wait = args.wait if args.wait is not None else settings.collectors.gpu.init_timeout_seconds
            await asyncio.to_thread(gpu.poller.wait_for_first_cycle, wait)
        registry = collectors.registry()
        body = await asyncio.to_thread(render, registry, "openmetrics" if args.openmetrics else "text")
    finally:
        await collectors.stop(grace=2.0)
    text = body.decode()
    sys.stdout.write(text)
    # The success series of the very exposition printed above (collecting again could differ), with
    # the reason that collection recorded: a collector that never worked logs at info only (a server
    # still loading is no failure), so the log above may not say it.
    failed = _FAILED.findall(text)
    reasons = collectors.failing
    for name in failed:
        print(
            f"sentinel collect: collector {name} failed: {reasons.get(name, 'no reason recorded')}",
            file=sys.stderr,
        )
    for name, reason in collectors.not_applicable.items():
        print(f"sentinel collect: collector {name} not applicable: {reason}", file=sys.stderr)
    return 1 if failed else 0
