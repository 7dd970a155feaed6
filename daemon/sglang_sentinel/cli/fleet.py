"""``sentinel fleet``: probe many servers and routers from one process (see :mod:`sglang_sentinel.fleet`)."""

from __future__ import annotations

import argparse
from typing import Any

from sglang_sentinel.cli.common import CliError, add_common_options
from sglang_sentinel.cli.run import parse_listen

__all__ = ["register"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "fleet",
        help="probe many servers/routers (readiness, canaries); results at /probe?target=NAME",
        description="Probe every target of [fleet] (and of its file_sd file) on its own schedule; "
        "serve each target's latest results at /probe?target=NAME (blackbox_exporter's shape) and "
        "the prober's own health at /metrics. Never restarts anything.",
    )
    add_common_options(p)
    p.add_argument("--listen", metavar="HOST:PORT", default=None, help="override [exporter] host/port")
    p.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    import asyncio
    import os
    import signal
    from pathlib import Path

    from sglang_sentinel.export.server import ExporterConfigError
    from sglang_sentinel.fleet import FleetConfigError, FleetService, load_fleet_file
    from sglang_sentinel.log import configure_logging

    path = args.config or os.environ.get("SENTINEL_CONFIG")
    if not path:
        raise CliError("sentinel fleet: --config PATH is required (a TOML file with [fleet])", 2)
    try:
        config = load_fleet_file(Path(path))
    except FleetConfigError as exc:
        raise CliError(str(exc), 2) from None
    if args.listen is not None:
        try:
            host, port = parse_listen(args.listen)
        except ValueError as exc:
            raise CliError(str(exc), 2) from None
        config = config.model_copy(
            update={"exporter": config.exporter.model_copy(update={"host": host, "port": port})}
        )
    configure_logging(args.log_level or config.log_level, args.log_format or "auto")

    async def main() -> int:
        service = FleetService(config)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        try:
            await service.start()
        except ExporterConfigError as exc:
            await service.stop()
            raise CliError(str(exc), 2) from None
        try:
            await stop.wait()
        finally:
            await service.stop()
        return 0

    return asyncio.run(main())
