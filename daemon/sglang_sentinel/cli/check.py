"""``sentinel check``: print the rendered server command line and the preflight results.

Exit status 0 when nothing failed (warnings allowed), 1 when a check failed, 2 for a bad config.
"""

from __future__ import annotations

import argparse
import asyncio
import json
from typing import Any

from sglang_sentinel.cli.common import CliError, add_common_options

__all__ = ["register"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "check", help="print the server's rendered command line and run the preflight checks"
    )
    add_common_options(p)
    p.add_argument("--json", action="store_true", help="print one JSON object instead of text")
    p.set_defaults(handler=_handle)


def _resolution(cmd: Any) -> Any:
    """Which known SGLang behaviour the rendered version is read as (an unknown one: the newest)."""
    from sglang_sentinel.sglang.versions import resolve
    from sglang_sentinel.supervise.launch import version_text

    return resolve(version_text(cmd.sglang_version))


def _row_json(cmd: Any) -> dict[str, Any] | None:
    """The launch-table row that chose the DSA backends / KV dtype, with what was rendered."""
    row = cmd.launch_row
    if row is None:
        return None
    prefill, decode, kv = cmd.dsa
    return {
        "key": row.key,
        "verdict": row.verdict,
        "versions": row.versions,
        "gpu_arch": cmd.profile.gpu_arch or None,
        "what": row.what,
        "source": row.source,
        "rendered": {"prefill_backend": prefill, "decode_backend": decode, "kv_cache_dtype": kv},
    }


def _fallback_preview(settings: Any, cmd: Any) -> dict[str, Any]:
    """What [server.fallback] would relaunch with if the configured command failed now. In
    systemd mode the configured command is the unit's flags (its launch.env), as the supervisor
    reads them; the rendered profile is only for reference there."""
    import os

    from sglang_sentinel.daemon import resolve_state_dir
    from sglang_sentinel.supervise.fallback import Fallback
    from sglang_sentinel.supervise.launch import launch_version, unit_command
    from sglang_sentinel.supervise.unitenv import UnitEnvError, read_args

    s = settings.server
    if s.mode == "systemd":
        try:
            args = read_args([s.systemd.launch_env], s.systemd.args_variable)
        except UnitEnvError as exc:
            args, why = None, str(exc)
        else:
            why = f"{s.systemd.launch_env} does not exist or does not set {s.systemd.args_variable}"
        if args is None:
            return {
                "enabled": s.fallback.enabled,
                "known_good_configs": 0,
                "active": False,
                "sglang_version": None,
                "fallback": None,
                "why_none": f"the unit's launch flags are unknown: {why}",
            }
        cmd = unit_command(s, args)
    preview: dict[str, Any] = Fallback(s.fallback, resolve_state_dir(settings, os.environ)).preview(cmd)
    # Offline: the version the launch is known to speak (rendered for; the simulator's argument).
    preview["sglang_version"] = launch_version(cmd)
    return preview


def _handle(args: argparse.Namespace) -> int:
    from sglang_sentinel.config import load_settings
    from sglang_sentinel.log import configure_logging
    from sglang_sentinel.redact import redact, redact_obj
    from sglang_sentinel.statusdoc import RESET_CONFIGURED_COMMAND
    from sglang_sentinel.supervise.launch import (
        ProfileError,
        config_hash_of,
        detect_sglang_version,
        python_of,
        render_command,
        resolve_profile,
    )
    from sglang_sentinel.supervise.preflight import run_preflight

    settings = load_settings(args.config)
    configure_logging(args.log_level or settings.log.level, args.log_format or settings.log.format)
    s = settings.server
    try:
        _, profile = resolve_profile(s)
        detected: tuple[Any, str] = (None, "")
        if profile.kind == "sglang":
            # Also with a pinned version: the interpreter must still import SGLang (the pin only
            # chooses the flags), as the supervisor's own preflight checks before every start.
            detected = detect_sglang_version(python_of(profile))
        cmd = render_command(s, detected_version=detected[0], detect_message=detected[1])
        from sglang_sentinel.group import member_of

        member = member_of(settings.group)
        cmd = member.apply(cmd) if member is not None else cmd  # what the supervisor launches
    except ProfileError as exc:
        raise CliError(str(exc), 2) from None
    child = s.mode == "child"
    results = asyncio.run(
        run_preflight(
            cmd,
            s,
            check_port_free=child,
            detected=detected if profile.kind == "sglang" else None,
        )
    )
    if not child:
        # The unit (or whoever runs the server) owns the interpreter, model path and port; an
        # SGLang older than every release read is still reported (a failure in systemd mode, a
        # warning in external mode: preflight.check_sglang_supported).
        results = [r for r in results if r.name in ("gpus", "known_bad", "sglang_version")]
    failed = any(r.status == "fail" for r in results)
    fallback = _fallback_preview(settings, cmd) if s.mode != "external" else None
    if args.json:
        # redact(): the API key may also sit in extra_args, env or a fault spec, not only --api-key.
        print(
            redact(
                json.dumps(
                    {
                        "mode": s.mode,
                        "profile": cmd.profile_name,
                        "argv": cmd.redacted_argv(),
                        "env": redact_obj(cmd.env),
                        "command_line": cmd.display(),
                        "config_hash": config_hash_of(s, cmd),
                        "sglang_version": str(cmd.sglang_version) if cmd.sglang_version else None,
                        "version_source": cmd.version_source or None,
                        "sglang_behaves_as": str(_resolution(cmd).behaves_as)
                        if cmd.profile.kind == "sglang"
                        else None,
                        "launch_row": _row_json(cmd),
                        "fallback": fallback,
                        "unit": s.systemd.unit if s.mode == "systemd" else None,
                        "preflight": [
                            {"check": r.name, "status": r.status, "message": r.message} for r in results
                        ],
                        "ok": not failed,
                    },
                    indent=2,
                )
            )
        )
        return 1 if failed else 0
    print(f"mode:         {s.mode}")
    if s.mode == "systemd":
        print(f"unit:         {s.systemd.unit} (launched by systemd; the profile below is for reference)")
    elif s.mode == "external":
        print("server:       run by someone else; sentinel only watches it (profile below for reference)")
    print(f"profile:      {cmd.profile_name} ({cmd.profile.kind})")
    if cmd.profile.kind == "sglang":
        print(f"sglang:       {cmd.version_source}; {_resolution(cmd).note}")
    row = cmd.launch_row
    if row is not None:
        prefill, decode, kv = (v or "SGLang's default" for v in cmd.dsa)
        arch = f"SM{cmd.profile.gpu_arch}" if cmd.profile.gpu_arch else "any GPU"
        print(f"launch row:   {row.key} ({row.verdict}, SGLang {row.versions}, {arch})")
        print(f"              prefill {prefill}, decode {decode}, KV {kv}: {row.what}")
        print(f"              source: {row.source}")
    print(f"config hash:  {config_hash_of(s, cmd)}")
    print(f"endpoint:     http://{s.host}:{s.port}")
    print("command line:")
    print(f"  {redact(cmd.display())}")
    if fallback is not None:
        on = "on" if fallback["enabled"] else "off ([server.fallback] enabled = false)"
        print(
            f"fallback:     {on}; {fallback['known_good_configs']} known-good configuration(s) on this host"
        )
        if fallback["active"]:
            print(
                "              a fallback is in force for this configured command "
                f"(`{RESET_CONFIGURED_COMMAND}` ends it)"
            )
        if fallback["fallback"] is None:
            print(f"              would be: none ({fallback['why_none']})")
        else:
            fb = fallback["fallback"]
            print(f"              would be: {fb['config_hash']} ({fb['origin']})")
            for line in fallback["differences"]:
                print(f"                {line}")
    print("preflight:")
    width = max((len(r.name) for r in results), default=0)
    for r in results:
        print(f"  {r.status.upper():<4}  {r.name:<{width}}  {r.message}")
    return 1 if failed else 0
