"""``sentinel sim`` / ``sentinel-sim`` / ``python -m sglang_sentinel_sim``: the simulator in the foreground.

``sentinel sim`` reaches this module through the ``sentinel.commands`` entry point (pyproject):
``sentinel`` never imports the simulator by name.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
from collections.abc import Sequence
from typing import Any

from sglang_sentinel.cli.common import CliError, add_common_options, ignoring_sighup

__all__ = ["main", "register"]

_DESCRIPTION = (
    "Serve SGLang's HTTP API, metrics and log lines (any release 0.5.9 – 0.5.23) from a simulated GLM-5 "
    "deployment. Contract: docs/sim.md."
)


def register(subparsers: Any) -> None:
    """Add ``sim`` to ``sentinel``'s subcommands."""
    parser: argparse.ArgumentParser = subparsers.add_parser(
        "sim", help="run the SGLang-compatible simulator", description=_DESCRIPTION
    )
    _add_arguments(parser)


def main(argv: Sequence[str] | None = None) -> int:
    """``sentinel-sim`` and ``python -m sglang_sentinel_sim``: the same options as ``sentinel sim``."""
    parser = argparse.ArgumentParser(prog="sentinel-sim", description=_DESCRIPTION)
    _add_arguments(parser)
    args = parser.parse_args(argv)
    try:
        return _handle(args)
    except CliError as exc:
        print(f"sentinel-sim: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130


def _add_arguments(parser: argparse.ArgumentParser) -> None:
    from sglang_sentinel_sim import disagg
    from sglang_sentinel_sim.launchflags import add_launch_arguments
    from sglang_sentinel_sim.profiles import DEFAULT_PROFILE, PROFILES
    from sglang_sentinel_sim.versions import DEFAULT_VERSION, VERSIONS

    add_common_options(parser)
    g = parser.add_argument_group("server (SGLang's flag names)")
    g.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    g.add_argument("--port", type=int, default=30000, help="API port; 0 = OS-assigned (see --ready-file)")
    g.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on API routes")
    g.add_argument("--enable-metrics", action="store_true", help="serve /metrics")
    g.add_argument("--served-model-name", default=None)
    g.add_argument("--model-path", "--model", dest="model_path", default=None)
    g.add_argument("--max-total-tokens", type=int, default=None, help="KV pool capacity in tokens")
    g.add_argument("--max-running-requests", type=int, default=None)
    g.add_argument("--chunked-prefill-size", type=int, default=None)
    g.add_argument("--max-prefill-tokens", type=int, default=None)
    g.add_argument("--context-length", type=int, default=None)
    g.add_argument("--decode-log-interval", type=int, default=40)
    g.add_argument("--stream-interval", type=int, default=1)
    g.add_argument("--reasoning-parser", default="profile", help="glm45 or none (default: the profile's)")
    g.add_argument("--skip-server-warmup", action="store_true")
    g.add_argument("--enable-cache-report", action="store_true")
    g.add_argument("--tp-size", "--tp", dest="tp_size", type=int, default=None, help="default: the profile's")
    g.add_argument("--enable-priority-scheduling", action="store_true")
    g.add_argument(
        "--enable-metrics-for-all-schedulers",
        action="store_true",
        help="every TP rank writes the scheduler metrics (tp_rank label)",
    )
    g.add_argument("--enable-hisparse", action="store_true", help="from 0.5.10")
    add_launch_arguments(parser)
    _add_multinode_arguments(parser)
    disagg.add_arguments(g)
    s = parser.add_argument_group("simulation")
    s.add_argument(
        "--profile",
        default=DEFAULT_PROFILE,
        choices=sorted(PROFILES),
        help=f"deployment to simulate (default {DEFAULT_PROFILE})",
    )
    s.add_argument(
        "--sglang-version",
        default=DEFAULT_VERSION,
        choices=VERSIONS,
        metavar="VERSION",
        help=f"SGLang release to speak, any of {VERSIONS[0]} – {VERSIONS[-1]} read by the daemon's "
        "version table: log lines, /metrics, /v1/loads, crash texts, flags accepted "
        f"(default {DEFAULT_VERSION})",
    )
    s.add_argument("--speed", type=float, default=1.0, help="run S times faster in every respect (default 1)")
    s.add_argument(
        "--capacity-scale",
        type=float,
        default=1.0,
        metavar="F",
        help="divide every performance-model time constant by F: 0.85 = 15%% slower, 1.2 = 20%% faster",
    )
    s.add_argument(
        "--control-port", type=int, default=0, help="control API port on 127.0.0.1 (default 0 = OS-assigned)"
    )
    s.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="inject a fault: NAME[:key=value,...] (repeatable; list in docs/sim.md)",
    )
    s.add_argument("--lifetime", type=float, default=None, help="stop after this many real seconds")
    s.add_argument("--startup-time", type=float, default=None, help="server seconds from launch to ready")
    s.add_argument(
        "--health-timeout",
        type=float,
        default=float(os.environ.get("SGLANG_HEALTH_CHECK_TIMEOUT", "20")),
        help="health probe timeout in server seconds (SGLANG_HEALTH_CHECK_TIMEOUT, default 20)",
    )
    s.add_argument(
        "--ready-file", default=None, help="write {base_url, control_url, pid, ...} JSON here once bound"
    )
    s.add_argument("--seed", type=int, default=0)
    s.add_argument(
        "--check-args",
        action="store_true",
        help="validate the arguments (faults included) and exit: 0 usable, 2 not (sentinel config uses it)",
    )
    s.add_argument(
        "--disable-access-log", action="store_true", help="no uvicorn-style access lines on stdout"
    )
    parser.set_defaults(handler=_handle)


def _add_multinode_arguments(parser: argparse.ArgumentParser) -> None:
    m = parser.add_argument_group("multi-node (SGLang's flag names; docs/sim.md 'Multi-node')")
    m.add_argument("--nnodes", type=int, default=1, help="nodes in the group (default 1)")
    m.add_argument(
        "--node-rank", type=int, default=0, help="this node's rank; >= 1 = dummy health server only"
    )
    m.add_argument("--dist-init-addr", default=None, metavar="HOST:PORT", help="rank 0's rendezvous address")
    m.add_argument(
        "--dist-timeout",
        type=float,
        default=None,
        help="rendezvous/NCCL timeout, server seconds (default 600)",
    )


def _handle(args: argparse.Namespace) -> int:
    from sglang_sentinel.log import configure_logging
    from sglang_sentinel_sim import disagg
    from sglang_sentinel_sim.config import SimConfig
    from sglang_sentinel_sim.faults import FaultError, check_fault_version, parse_fault_spec
    from sglang_sentinel_sim.launchflags import launch_flags_from

    configure_logging(args.log_level or "info", args.log_format or "auto")
    if args.config and args.config.endswith((".yaml", ".yml")):
        # The simulator reads no sentinel TOML; a YAML --config is SGLang's options file.
        _merge_config_file(args)
    config = SimConfig(
        host=args.host,
        port=args.port,
        control_port=args.control_port,
        profile=args.profile,
        speed=args.speed,
        capacity_scale=args.capacity_scale,
        api_key=args.api_key,
        enable_metrics=args.enable_metrics,
        faults=tuple(args.fault),
        lifetime=args.lifetime,
        served_model_name=args.served_model_name,
        model_path=args.model_path,
        max_total_tokens=args.max_total_tokens,
        max_running_requests=args.max_running_requests,
        chunked_prefill_size=args.chunked_prefill_size,
        max_prefill_tokens=args.max_prefill_tokens,
        context_length=args.context_length,
        decode_log_interval=args.decode_log_interval,
        stream_interval=args.stream_interval,
        reasoning_parser=args.reasoning_parser,
        startup_time=args.startup_time,
        health_timeout=args.health_timeout,
        health_generation=os.environ.get("SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION", "true").lower()
        not in ("0", "false", "no"),
        ready_file=args.ready_file,
        seed=args.seed,
        log_ms=os.environ.get("SGLANG_LOG_MS", "").lower() in ("1", "true"),
        access_log=not args.disable_access_log,
        skip_server_warmup=args.skip_server_warmup,
        enable_cache_report=args.enable_cache_report,
        sglang_version=args.sglang_version,
        enable_priority_scheduling=args.enable_priority_scheduling,
        enable_metrics_for_all_schedulers=args.enable_metrics_for_all_schedulers,
        tp_size=args.tp_size,
        enable_hisparse=args.enable_hisparse,
        launch=launch_flags_from(args),
        nnodes=args.nnodes,
        node_rank=args.node_rank,
        dist_init_addr=args.dist_init_addr,
        dist_timeout=args.dist_timeout,
        **disagg.config_options(args),
    )
    try:
        config.validate()
        for spec in config.faults:
            check_fault_version(parse_fault_spec(spec), config.sglang_version)
    except (ValueError, FaultError) as exc:
        raise CliError(str(exc), 2) from None
    if args.check_args:
        return 0
    # A simulator started from a terminal (a demo, a test bed) keeps serving when that terminal
    # closes; it stops on SIGTERM/SIGINT only.
    with ignoring_sighup():
        return asyncio.run(_serve(config))


def _merge_config_file(args: argparse.Namespace) -> None:
    """SGLang's ``--config FILE.yaml``: each key is a long option (dashes or underscores), the command
    line wins. Sentinel passes the API key this way so that it is not in the child's argv.

    Only the JSON flavour of YAML is read (what sentinel writes; no YAML parser is a dependency).
    """
    import json
    from pathlib import Path

    try:
        data = json.loads(Path(args.config).read_text(encoding="utf-8"))
    except OSError as exc:
        raise CliError(f"--config {args.config}: {exc.strerror or exc}", 2) from None
    except ValueError:
        raise CliError(f'--config {args.config}: not JSON-style YAML (want {{"api-key": ...}})', 2) from None
    if not isinstance(data, dict):
        raise CliError(f"--config {args.config}: must hold a mapping of option to value", 2)
    for key, value in data.items():
        dest = str(key).replace("-", "_")
        if dest == "config" or not hasattr(args, dest):
            raise CliError(f"--config {args.config}: unknown option {key!r}", 2)
        if getattr(args, dest) is None:
            setattr(args, dest, value)


def _sigkill_self() -> None:
    # SGLang's kill_process_tree ends with SIGKILL on its own pid: a parent sees signal 9.
    os.kill(os.getpid(), signal.SIGKILL)


async def _serve(config: Any) -> int:
    from sglang_sentinel_sim.server import SimServer

    if config.node_rank >= 1:
        from sglang_sentinel_sim.follower import run_follower

        return await run_follower(config, on_fatal=_sigkill_self)
    server = SimServer(config, on_fatal=_sigkill_self)
    try:
        await server.start()
    except OSError as exc:
        # Its text names the port (SimServer.start): the API's or the control API's.
        raise CliError(f"cannot bind the {exc.strerror or exc}", 1) from None
    loop = asyncio.get_running_loop()

    async def drain_then_die() -> None:
        await server.drain()
        _sigkill_self()

    def on_sigterm() -> None:
        server.spawn(drain_then_die(), "drain")

    def on_sigint() -> None:
        server.spawn(server.stop("interrupted"), "stop")

    loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    loop.add_signal_handler(signal.SIGINT, on_sigint)
    await server.wait_stopped()
    return server.exit_code
