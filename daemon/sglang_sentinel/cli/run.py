"""``sentinel run``: the always-on daemon (see :mod:`sglang_sentinel.daemon`)."""

from __future__ import annotations

import argparse
from typing import Any

from sglang_sentinel.cli import early_stop
from sglang_sentinel.cli.common import CliError, add_common_options

__all__ = ["parse_listen", "register"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "run",
        help="run the daemon: supervise the server, load it on a schedule, export everything",
        description="Run the daemon. Without a config it starts the built-in simulator as its managed "
        "child on loopback and runs everything against it (the embedded default).",
    )
    add_common_options(p)
    p.add_argument(
        "--listen",
        metavar="HOST:PORT",
        default=None,
        help="exporter address, overriding [exporter] host/port (e.g. 127.0.0.1:9480, [::1]:9480)",
    )
    p.add_argument(
        "--server-port",
        type=int,
        default=None,
        metavar="PORT",
        help="the server's port, overriding [server] port (the child listens there; probes go there)",
    )
    p.set_defaults(handler=_handle)


def parse_listen(value: str) -> tuple[str, int]:
    """``HOST:PORT`` (``[v6]:PORT`` for IPv6) → (host, port); ValueError with a human message."""
    host, sep, port_text = value.rpartition(":")
    if not sep or not host:
        raise ValueError(f"--listen {value!r}: expected HOST:PORT")
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    if not host.strip():
        # An empty host would bind every interface: that must be written, never implied.
        raise ValueError(
            f"--listen {value!r}: empty host; write 127.0.0.1 (loopback) or, to listen on every"
            " interface, 0.0.0.0 or [::] explicitly"
        )
    try:
        port = int(port_text)
    except ValueError:
        raise ValueError(f"--listen {value!r}: port {port_text!r} is not a number") from None
    if not 0 <= port <= 65535:
        raise ValueError(f"--listen {value!r}: port must be within 0..65535")
    return host, port


def _handle(args: argparse.Namespace) -> int:
    import asyncio

    from sglang_sentinel.config import Settings, load_settings
    from sglang_sentinel.daemon import Daemon, DaemonError
    from sglang_sentinel.log import configure_logging

    if args.server_port is not None and not 1 <= args.server_port <= 65535:
        raise CliError(f"--server-port {args.server_port}: must be within 1..65535", 2)
    listen: tuple[str, int] | None = None
    if args.listen is not None:
        try:
            listen = parse_listen(args.listen)
        except ValueError as exc:
            raise CliError(str(exc), 2) from None

    def overrides(settings: Settings) -> Settings:
        # The command line on top of the file: at start and again at every reload (SIGHUP).
        if args.server_port is not None:
            server = settings.server.model_copy(update={"port": args.server_port})
            settings = settings.model_copy(update={"server": server})
        if listen is not None:
            exporter = settings.exporter.model_copy(update={"host": listen[0], "port": listen[1]})
            settings = settings.model_copy(update={"exporter": exporter})
        return settings

    settings = overrides(load_settings(args.config))
    configure_logging(args.log_level or settings.log.level, args.log_format or settings.log.format)
    daemon = Daemon(settings, config_path=args.config, overrides=overrides)
    try:
        return asyncio.run(daemon.run(stop_requested=early_stop.requested))
    except DaemonError as exc:
        raise CliError(str(exc), exc.exit_code) from None
