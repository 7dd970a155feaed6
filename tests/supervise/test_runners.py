"""Runner edge cases without real services: systemd unit states, a binary that does not exist."""

from __future__ import annotations

import asyncio
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

import pytest

from sglang_sentinel.supervise import LaunchCommand, ServerState, Supervisor
from sglang_sentinel.supervise.launch import BUILTIN_PROFILES
from sglang_sentinel.supervise.logbus import LogBus
from sglang_sentinel.supervise.runners import (
    ChildRunner,
    ExitInfo,
    LaunchError,
    SystemdRunner,
    _run,
    timespan_seconds,
)
from sglang_sentinel.supervise.secretargs import SECRETS_FILE
from sglang_sentinel.supervise.settings import ServerSettings, SystemdSettings
from support.waits import until


def runner_with(states: list[dict[str, str]], systemctl_code: str = "") -> SystemdRunner:
    """A runner whose unit shows ``states``; `systemctl` is ``python -c systemctl_code`` if given."""
    systemctl = (sys.executable, "-c", systemctl_code) if systemctl_code else ("systemctl",)
    r = SystemdRunner(
        SystemdSettings(poll_interval=0.001, settle=0.0, systemctl=systemctl),
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
    await until(lambda: pid_file.exists() and pid_file.read_text(), what="the child's pid file")
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


# `systemctl show` of a unit refused under StartLimitBurst=5 (systemd 252, Debian 12): Result= says
# the refusal, ExecMain* still describe the previous life (SGLang's own SIGKILL at its stop).
START_LIMIT_HIT = {
    "ActiveState": "failed",
    "SubState": "failed",
    "Result": "start-limit-hit",
    "ExecMainCode": "2",
    "ExecMainStatus": "9",
    "MainPID": "0",
    "ActiveExitTimestampMonotonic": "5092634512",
    "ExecMainExitTimestampMonotonic": "5097801233",
    "StartLimitIntervalUSec": "1h",
    "StartLimitBurst": "5",
}


def test_start_limit_hit_is_a_refusal_not_a_signal_9() -> None:
    info = SystemdRunner._exit_info(START_LIMIT_HIT)
    assert info.start_limit
    assert info.signal is None
    assert info.returncode is None
    assert not info.external
    assert "start request repeated too quickly" in info.description
    assert "signal" not in info.description


async def test_a_refused_start_that_polkit_lets_us_clear_retries_at_once(tmp_path: Path) -> None:
    calls = tmp_path / "calls"
    record = f"import sys; open({str(calls)!r}, 'a').write(' '.join(sys.argv[1:]))"
    info = await runner_with([START_LIMIT_HIT], record).wait()
    assert info.start_limit
    assert info.retry_after == 0.0
    assert calls.read_text() == "reset-failed sglang.service"


async def test_a_refused_start_polkit_denies_clearing_waits_out_the_interval() -> None:
    # polkit's answer to reset-failed without the rule: "Access denied", exit 1 (as systemctl does).
    denied = "print('Failed to reset failed state of unit sglang.service: Access denied'); exit(1)"
    info = await runner_with([RUNNING, START_LIMIT_HIT], denied).wait()
    assert info.start_limit
    assert info.retry_after == 3600.0


def test_sglang_killing_itself_at_the_end_of_a_stop_job_is_a_clean_stop() -> None:
    # `systemctl stop sglang`: the unit left "active" (stop job, SIGTERM) seconds before SGLang's
    # kill_process_tree SIGKILLed its own main process; SuccessExitStatus=SIGKILL files it as success.
    for result in ("success", "signal"):
        stopped = {
            "ActiveState": "inactive" if result == "success" else "failed",
            "SubState": "dead" if result == "success" else "failed",
            "Result": result,
            "ExecMainCode": "2",
            "ExecMainStatus": "9",
            "ActiveExitTimestampMonotonic": "5092634512",
            "ExecMainExitTimestampMonotonic": "5097801233",
        }
        info = SystemdRunner._exit_info(stopped)
        assert info.external, result
        assert SystemdRunner._exit_info(stopped, ours=True).description.endswith(
            "stopped by sentinel (SIGKILL)"
        )


def test_a_sigkill_while_running_is_still_a_crash() -> None:
    # The main process died first (the OOM killer, kill -9), then the unit left "active"; with
    # SuccessExitStatus=SIGKILL systemd calls it success, sentinel still calls it a kill.
    crashed = {
        "ActiveState": "inactive",
        "SubState": "dead",
        "Result": "success",
        "ExecMainCode": "2",
        "ExecMainStatus": "9",
        "ActiveExitTimestampMonotonic": "5097801240",
        "ExecMainExitTimestampMonotonic": "5097801233",
    }
    info = SystemdRunner._exit_info(crashed)
    assert not info.external
    assert info.signal == 9


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("1h", 3600.0), ("1min 30s", 90.0), ("10s", 10.0), ("500ms", 0.5), ("infinity", None), ("", None)],
)
def test_systemctl_timespans(text: str, seconds: float | None) -> None:
    assert timespan_seconds(text) == seconds


def test_an_exit_with_a_status_after_a_stop_job_is_a_stop_not_a_crash() -> None:
    # A server that ends on SIGTERM with a status (aiohttp's graceful exit 0) after someone's
    # `systemctl restart`: the unit left "active" first, so it was stopped; the same exit while
    # running is still a clean exit nobody asked for.
    stopped = {
        "ActiveState": "inactive",
        "SubState": "dead",
        "Result": "success",
        "ExecMainCode": "1",
        "ExecMainStatus": "0",
        "ActiveExitTimestampMonotonic": "5092634512",
        "ExecMainExitTimestampMonotonic": "5092801233",
    }
    info = SystemdRunner._exit_info(stopped)
    assert info.external
    assert info.returncode == 0
    assert info.description == "unit inactive/dead: stopped outside sentinel (exited with status 0)"
    exited = {**stopped, "ActiveExitTimestampMonotonic": "5092801240"}
    assert not SystemdRunner._exit_info(exited).external


_COPY_CONFIG = """
import shutil, sys
path = sys.argv[sys.argv.index("--config") + 1]
shutil.copy(path, sys.argv[sys.argv.index("--out") + 1])
print(path, flush=True)
"""


async def test_without_a_state_dir_the_key_file_lives_as_long_as_the_server(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No state directory: the key goes into a private temporary directory, which must not outlive
    # the server (a copy of the API key left in /tmp after every start).
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    out = tmp_path / "seen"
    argv = (sys.executable, "-c", _COPY_CONFIG, "--out", str(out), "--api-key", "k-temporary-1234")
    bus = LogBus(None, max_bytes=4096, backups=0, tail_lines=5)
    runner = ChildRunner(LaunchCommand("x", BUILTIN_PROFILES["sim"], argv, {}), bus)
    for _ in range(2):  # each life writes its own file and removes it
        await runner.launch()
        assert (await runner.wait()).returncode == 0
        assert "k-temporary-1234" in out.read_text()
        key_file = Path(bus.tail(1)[0])
        assert (key_file.name, key_file.parent.parent) == (SECRETS_FILE, temp)
        assert not key_file.parent.exists()
    await runner.close()
    # A server that cannot be started leaves nothing behind either.
    missing = (str(tmp_path / "no-such-binary"), "--api-key", "k-temporary-1234")
    with pytest.raises(LaunchError):
        await ChildRunner(LaunchCommand("x", BUILTIN_PROFILES["sim"], missing, {}), bus).launch()
    assert list(temp.iterdir()) == []
