"""Before a launch: what to launch, by which runner, and whether it may be launched now.

The command is rendered once at start (flags for the SGLang installed, when the profile pins no
version) and again before a life when SGLang was upgraded under us; the mode picks the runner;
the preflight checks run before every launch, waiting out the GPU memory a dead server still
holds. Apart from the supervisor's life cycle because none of it depends on that: it works on
the settings and the command, and hands what it finds back through callbacks.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from pathlib import Path

from sglang_sentinel.log import get_logger
from sglang_sentinel.sglang.versions import Version
from sglang_sentinel.supervise.classify import Crash
from sglang_sentinel.supervise.launch import (
    LaunchCommand,
    config_hash_of,
    detect_sglang_version,
    python_of,
    render_command,
    resolve_profile,
)
from sglang_sentinel.supervise.logbus import LogBus
from sglang_sentinel.supervise.preflight import GpuReader, PreflightResult, run_preflight
from sglang_sentinel.supervise.runners import ChildRunner, Runner, SystemdRunner
from sglang_sentinel.supervise.settings import ServerSettings

__all__ = ["preflight_before_launch", "render_launch_command", "runner_for"]

_log = get_logger(__name__)

# A transient GPU failure (memory a dead server still holds) is checked again at this pace,
# until ``gpu_release_wait`` has passed.
_GPU_RELEASE_POLL = 2.0
# The preflight checks that apply outside child mode.
_NOT_CHILD_CHECKS = ("gpus", "known_bad", "sglang_version")


async def render_launch_command(settings: ServerSettings) -> LaunchCommand:
    """The profile's command (child mode), detecting the installed SGLang when no version is pinned."""
    _, profile = resolve_profile(settings)
    version, message = None, ""
    if profile.kind == "sglang" and not profile.sglang_version:
        version, message = await asyncio.to_thread(detect_sglang_version, python_of(profile))
    return render_command(settings, detected_version=version, detect_message=message)


def runner_for(
    settings: ServerSettings, command: LaunchCommand | None, bus: LogBus, state_dir: Path | None
) -> Runner | None:
    """Child mode: a child process of ``command``; systemd mode: the unit; external mode: none."""
    if settings.mode == "child":
        assert command is not None
        return ChildRunner(
            command,
            bus,
            secrets_dir=state_dir,
            state_dir=state_dir,
            launch_hash=config_hash_of(settings, command),
        )
    if settings.mode == "systemd":
        return SystemdRunner(settings.systemd, bus)
    return None


async def preflight_before_launch(
    settings: ServerSettings,
    command: LaunchCommand | None,
    *,
    gpu_reader: GpuReader | None,
    on_results: Callable[[list[PreflightResult]], None],
    on_rerender: Callable[[LaunchCommand], None],
) -> Crash | None:
    """The preflight verdict: None to launch, else the refusal (a ``Crash`` of the failed checks).

    ``on_results`` gets every round of results (published at once), ``on_rerender`` the command
    re-rendered for an SGLang upgraded under us (launched from now on).
    """
    s = settings
    cmd = command
    if cmd is None:
        try:
            cmd = render_command(s)
        except Exception:
            return None  # systemd mode with a profile we cannot render: nothing to check
    child = s.mode == "child"
    detected: tuple[Version | None, str] = (None, "")
    if child and cmd.profile.kind == "sglang":
        detected = await asyncio.to_thread(detect_sglang_version, python_of(cmd.profile))
        if not cmd.profile.sglang_version and detected[0] not in (None, cmd.sglang_version):
            # SGLang was upgraded under us: flags (--nsa-* / --dsa-*) must follow.
            cmd = render_command(s, detected_version=detected[0])
            _log.warning("sglang_version_changed_rerendered", version=detected[0])
            on_rerender(cmd)
    deadline = time.monotonic() + s.gpu_release_wait
    while True:
        results = await run_preflight(cmd, s, gpu_reader=gpu_reader, check_port_free=child, detected=detected)
        on_results(results)
        # The unit owns model path and interpreter in systemd mode; only GPU facts (and an SGLang
        # older than every release read, where one was detected) apply there.
        relevant = [r for r in results if child or r.name in _NOT_CHILD_CHECKS]
        failed = [r for r in relevant if r.status == "fail"]
        if not failed or not all(r.transient for r in failed) or time.monotonic() >= deadline:
            break
        _log.info("waiting_for_gpu_memory", detail=failed[0].message)
        await asyncio.sleep(min(_GPU_RELEASE_POLL, max(0.0, deadline - time.monotonic())))
    for r in relevant:
        if r.status == "warn":
            _log.warning("preflight_warning", check=r.name, message=r.message)
    if not failed:
        return None
    first = failed[0]
    detail = "; ".join(f"{r.name}: {r.message}" for r in failed)
    if all(r.reason == "port_in_use" for r in failed):
        # A held port is retried, not a crash (the supervisor's server_port_held warning says
        # who holds it): no error line on every retry.
        _log.info("preflight_failed", detail=detail, retried=True)
    else:
        _log.error("preflight_failed", detail=detail)
    return Crash(first.reason, None, detail, time.time())
