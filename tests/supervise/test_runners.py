"""Runner edge cases without real services: systemd unit states, a binary that does not exist."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sglang_sentinel.supervise import LaunchCommand, ServerState, Supervisor
from sglang_sentinel.supervise.launch import BUILTIN_PROFILES
from sglang_sentinel.supervise.logbus import LogBus
from sglang_sentinel.supervise.runners import ExitInfo, SystemdRunner, _run
from sglang_sentinel.supervise.settings import ServerSettings, SystemdSettings


def runner_with(states: list[dict[str, str]]) -> SystemdRunner:
    r = SystemdRunner(
        SystemdSettings(poll_interval=0.001, settle=0.0),
        LogBus(None, max_bytes=4096, backups=0, tail_lines=5),
    )
    it = iter(states)

    async def show() -> dict[str, str]:
        return next(it)

    r.show = show  # type: ignore[method-assign]
    return r


RUNNING = {"ActiveState": "active", "SubState": "running", "MainPID": "100"}


async def test_unit_failed_with_a_signal() -> None:
    failed = {
        "ActiveState": "failed",
        "SubState": "failed",
        "ExecMainCode": "2",
        "ExecMainStatus": "9",
        "Result": "signal",
    }
    exit_info = await runner_with([RUNNING, RUNNING, failed]).wait()
    assert exit_info == ExitInfo(None, 9, "unit failed/failed: killed by signal 9 (SIGKILL)")


async def test_unit_exited_with_a_status() -> None:
    dead = {"ActiveState": "failed", "SubState": "failed", "ExecMainCode": "1", "ExecMainStatus": "1"}
    assert (await runner_with([RUNNING, dead]).wait()).returncode == 1


async def test_systemd_own_restart_counts_as_an_exit() -> None:
    auto = {
        "ActiveState": "activating",
        "SubState": "auto-restart",
        "ExecMainCode": "2",
        "ExecMainStatus": "6",
    }
    assert (await runner_with([RUNNING, auto]).wait()).signal == 6
    # Restarted between two polls: only the MainPID tells.
    again = {**RUNNING, "MainPID": "200"}
    assert "new MainPID 200" in (await runner_with([RUNNING, again]).wait()).description


async def test_a_stop_or_restart_by_someone_else_is_external_not_a_signal() -> None:
    # `systemctl restart sglang` seen mid-way: the old process is still being stopped.
    stopping = {"ActiveState": "deactivating", "SubState": "stop-sigterm", "ExecMainCode": "0"}
    stopped = {
        "ActiveState": "inactive",
        "SubState": "dead",
        "ExecMainCode": "2",
        "ExecMainStatus": "15",
        "Result": "success",
    }
    # The stop job is waited out (a start queued behind it would see the same stop again).
    exit_info = await runner_with([RUNNING, {**stopping, "ExecMainStatus": "0"}, stopping, stopped]).wait()
    assert exit_info.external
    assert exit_info.signal is None
    assert "signal 0" not in exit_info.description
    # ... or seen after the stop: systemd files its own SIGTERM as Result=success.
    exit_info = await runner_with([RUNNING, stopped]).wait()
    assert exit_info.external
    # A SIGTERM the unit did not survive on its own (Result=signal) is still a crash.
    assert not (await runner_with([RUNNING, {**stopped, "Result": "signal"}]).wait()).external


async def test_a_queued_start_is_not_an_exit() -> None:
    queued = {"ActiveState": "inactive", "SubState": "dead", "MainPID": "0"}
    dead = {"ActiveState": "inactive", "SubState": "dead", "ExecMainCode": "1", "ExecMainStatus": "0"}
    exit_info = await runner_with([queued, queued, RUNNING, dead]).wait()
    assert exit_info.returncode == 0


async def test_a_cancelled_command_is_killed_and_reaped(tmp_path: Path, no_leaked_children: None) -> None:
    # A `systemctl show` poll cancelled by stop(): left alone it would outlive the event loop,
    # and its transport would fail in __del__ ("Event loop is closed") during a later test.
    pid_file = tmp_path / "pid"
    code = "import os, sys, time; open(sys.argv[1], 'w').write(str(os.getpid())); time.sleep(60)"
    task = asyncio.create_task(_run([sys.executable, "-c", code, str(pid_file)], 120))
    for _ in range(500):
        if pid_file.exists() and pid_file.read_text():
            break
        await asyncio.sleep(0.02)
    pid = int(pid_file.read_text())
    task.cancel()
    async with asyncio.timeout(10):
        with pytest.raises(asyncio.CancelledError):
            await task
    # Killed and reaped by the time the cancellation is through: not running, not a zombie.
    assert not Path(f"/proc/{pid}").exists()  # noqa: ASYNC240 (a /proc lookup does not block)


async def test_missing_binary_is_a_failed_start_not_a_crash_of_sentinel(
    fast: Callable[..., ServerSettings], port: int, tmp_path: Path
) -> None:
    settings = fast(port, restart={"max_restarts": 0})
    cmd = LaunchCommand("x", BUILTIN_PROFILES["sim"], (str(tmp_path / "no-such-binary"),), {})
    sup = Supervisor(settings, command=cmd)
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.FAILED, timeout_s=10)
        assert sup.last_crash is not None
        assert sup.last_crash.reason == "preflight"
        assert "cannot start" in sup.last_crash.detail
    finally:
        await sup.stop()


async def test_systemctl_missing_is_a_failed_start(fast: Callable[..., ServerSettings], port: int) -> None:
    settings = fast(
        port, mode="systemd", restart={"max_restarts": 0}, systemd={"systemctl": ["/no/systemctl"]}
    )
    sup = Supervisor(settings)
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.FAILED, timeout_s=10)
        assert sup.last_crash is not None
        assert "cannot run /no/systemctl" in sup.last_crash.detail
    finally:
        await sup.stop()


async def test_restart_in_external_mode_is_refused(fast: Callable[..., ServerSettings], port: int) -> None:
    sup = Supervisor(fast(port, mode="external"))
    sup.restart()  # logged and ignored, never queued for a later life
    assert sup._pending_restart is None
