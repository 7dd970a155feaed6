"""Runner edge cases without real services: systemd unit states, a binary that does not exist."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sentinel.supervise import LaunchCommand, ServerState, Supervisor
from sentinel.supervise.logbus import LogBus
from sentinel.supervise.profiles import BUILTIN_PROFILES
from sentinel.supervise.runners import ExitInfo, SystemdRunner
from sentinel.supervise.settings import ServerSettings, SystemdSettings


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


async def test_a_queued_start_is_not_an_exit() -> None:
    queued = {"ActiveState": "inactive", "SubState": "dead", "MainPID": "0"}
    dead = {"ActiveState": "inactive", "SubState": "dead", "ExecMainCode": "1", "ExecMainStatus": "0"}
    exit_info = await runner_with([queued, queued, RUNNING, dead]).wait()
    assert exit_info.returncode == 0


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
