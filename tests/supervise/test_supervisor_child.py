"""The supervisor in child mode against the fake server: lifecycle, checks, crashes, stop."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sentinel.supervise import ServerState, StateChange, Supervisor
from sentinel.supervise.profiles import LaunchCommand
from sentinel.supervise.settings import ServerSettings

pytestmark = [pytest.mark.usefixtures("no_leaked_children")]

Fast = Callable[..., ServerSettings]
FakeCmd = Callable[..., LaunchCommand]

OOM_LINES = [
    "--crash-line=[2026-01-01 00:00:02 TP0] Scheduler hit an exception: Traceback (most recent call last):",
    "--crash-line=torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB.",
    "--crash-line=[2026-01-01 00:00:02] Received sigquit from a child process. It usually means the child failed.",
]


def series(sup: Supervisor) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=True)
    reg.register(sup.collector())
    return reg


def value(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


async def test_starts_warms_becomes_ready_and_stops(fast: Fast, fake_cmd: FakeCmd, port: int, tmp_path: Path) -> None:
    settings = fast(port, log_file=tmp_path / "server.log")
    sup = Supervisor(settings, command=fake_cmd(port, "--refuse", "0.3", "--warm", "0.3"))
    changes: list[StateChange] = []
    sup.subscribe_state(changes.append)
    lines = sup.subscribe_lines()
    hook_calls: list[str] = []

    async def hook() -> None:
        hook_calls.append("stop load")

    sup.add_before_stop_hook(hook)
    await sup.start()
    await sup.wait_for_state(ServerState.READY, timeout_s=15)
    pid = sup._runner.pid if sup._runner else None
    assert pid is not None
    reg = series(sup)
    assert value(reg, "sentinel_server_up") == 1
    assert value(reg, "sentinel_server_state", state="ready") == 1
    assert value(reg, "sentinel_server_state", state="starting") == 0
    duration = value(reg, "sentinel_server_start_duration_seconds")
    assert duration is not None and 0.5 <= duration < 10  # refuse 0.3 s + warm 0.3 s
    assert value(reg, "sentinel_server_ready_timestamp_seconds") == sup.epoch
    # Canaries run right after ready; health and stall soon after.
    await asyncio.sleep(0.6)
    reg = series(sup)
    for probe in ("health", "health_generate", "stall", "canary_arithmetic", "canary_is_prime"):
        assert value(reg, "sentinel_probe_success", probe=probe) == 1, probe
        assert value(reg, "sentinel_probe_duration_seconds", probe=probe) is not None
    await sup.stop()
    assert hook_calls == ["stop load"]
    assert sup.state is ServerState.STOPPED
    seen = [(c.old.value, c.new.value) for c in changes]
    assert ("starting", "warming") in seen and ("warming", "ready") in seen
    assert seen[-1] == ("ready", "stopped")
    assert value(series(sup), "sentinel_server_state_transitions_total", from_state="warming", to_state="ready") == 1
    # The log went to the file and to the subscriber.
    text = (tmp_path / "server.log").read_text()
    assert "The server is fired up and ready to roll!" in text
    got = [line.text async for line in lines]
    assert any("fired up" in t for t in got)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


async def test_sigkill_from_outside_is_classified_killed_and_restarted(fast: Fast, fake_cmd: FakeCmd, port: int) -> None:
    sup = Supervisor(fast(port), command=fake_cmd(port))
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
        first_epoch = sup.epoch
        pid = sup._runner.pid if sup._runner else None
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        await sup.wait_for_state(ServerState.RESTARTING, timeout_s=5)
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
        reg = series(sup)
        assert value(reg, "sentinel_server_restarts_total", reason="killed") == 1
        assert value(reg, "sentinel_server_crashes_total", reason="killed") == 1
        assert sup.epoch is not None and first_epoch is not None and sup.epoch > first_epoch
        assert sup.last_crash is not None and "signal 9" in sup.last_crash.detail
    finally:
        await sup.stop()


async def test_oom_crash_classified_from_log_tail_and_recovers(
    fast: Fast, fake_cmd: FakeCmd, port: int, tmp_path: Path
) -> None:
    cmd = fake_cmd(port, "--crash-after", "0.2", *OOM_LINES, "--once", str(tmp_path / "once"))
    sup = Supervisor(fast(port), command=cmd)
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.RESTARTING, timeout_s=15)
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
        reg = series(sup)
        assert value(reg, "sentinel_server_restarts_total", reason="cuda_oom") == 1
        assert value(reg, "sentinel_server_restarts_total", reason="killed") == 0
    finally:
        await sup.stop()


async def test_crash_loop_ends_in_failed_and_reset_restarts(fast: Fast, fake_cmd: FakeCmd, port: int) -> None:
    settings = fast(port, restart={"max_restarts": 2, "window": 60})
    cmd = fake_cmd(port, "--crash-after", "0.05", "--exit-code", "1")
    sup = Supervisor(settings, command=cmd)
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.FAILED, timeout_s=20)
        reg = series(sup)
        assert value(reg, "sentinel_server_state", state="failed") == 1
        assert value(reg, "sentinel_server_restarts_total", reason="unknown") == 2
        assert value(reg, "sentinel_server_crashes_total", reason="unknown") == 3
        assert value(reg, "sentinel_server_up") == 0
        # Stays failed: no tight loop.
        await asyncio.sleep(0.5)
        assert sup.state is ServerState.FAILED
        assert value(series(sup), "sentinel_server_crashes_total", reason="unknown") == 3
        sup.reset()
        await sup.wait_for_state(ServerState.STARTING, ServerState.WARMING, ServerState.READY, timeout_s=5)
    finally:
        await sup.stop()


async def test_garbage_answers_fail_canary_and_restart(fast: Fast, fake_cmd: FakeCmd, port: int, tmp_path: Path) -> None:
    cmd = fake_cmd(port, "--garbage", "--once", str(tmp_path / "once"))
    sup = Supervisor(fast(port), command=cmd)
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.RESTARTING, timeout_s=15)
        reg = series(sup)
        assert value(reg, "sentinel_probe_success", probe="canary_arithmetic") == 0
        assert value(reg, "sentinel_probe_failures_total", probe="canary_arithmetic", reason="garbage_repeated") == 1
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
        await asyncio.sleep(0.3)
        reg = series(sup)
        assert value(reg, "sentinel_server_restarts_total", reason="canary") == 1
        assert value(reg, "sentinel_probe_success", probe="canary_arithmetic") == 1
    finally:
        await sup.stop()


async def test_alert_only_policy_never_restarts(fast: Fast, fake_cmd: FakeCmd, port: int) -> None:
    settings = fast(port, checks={"canary": {"action": "alert"}})
    sup = Supervisor(settings, command=fake_cmd(port, "--garbage"))
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.UNHEALTHY, timeout_s=15)
        await asyncio.sleep(1.0)
        assert sup.state is ServerState.UNHEALTHY
        reg = series(sup)
        assert value(reg, "sentinel_server_restarts_total", reason="canary") == 0
        assert value(reg, "sentinel_server_up") == 1
        failures = value(reg, "sentinel_probe_failures_total", probe="canary_is_prime", reason="garbage_repeated")
        assert failures is not None and failures >= 2
    finally:
        await sup.stop()


async def test_stall_detected_and_restarted(fast: Fast, fake_cmd: FakeCmd, port: int, tmp_path: Path) -> None:
    sup = Supervisor(fast(port), command=fake_cmd(port, "--stall", "--once", str(tmp_path / "once")))
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.RESTARTING, timeout_s=15)
        assert value(series(sup), "sentinel_probe_failures_total", probe="stall", reason="stalled") == 1
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
        assert value(series(sup), "sentinel_server_restarts_total", reason="stall") == 1
    finally:
        await sup.stop()


async def test_health_503_storm_unhealthy_then_restart(fast: Fast, fake_cmd: FakeCmd, port: int, tmp_path: Path) -> None:
    cmd = fake_cmd(port, "--health-503-after", "0.2", "--once", str(tmp_path / "once"))
    sup = Supervisor(fast(port), command=cmd)
    changes: list[StateChange] = []
    sup.subscribe_state(changes.append)
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.RESTARTING, timeout_s=15)
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
        reg = series(sup)
        assert (value(reg, "sentinel_server_restarts_total", reason="health") or 0) + (
            value(reg, "sentinel_server_restarts_total", reason="health_generate") or 0
        ) == 1
        assert (value(reg, "sentinel_probe_failures_total", probe="health", reason="http_503") or 0) >= 1
        assert ("ready", "unhealthy") in [(c.old.value, c.new.value) for c in changes]
    finally:
        await sup.stop()


async def test_startup_timeout_kills_and_classifies(fast: Fast, fake_cmd: FakeCmd, port: int) -> None:
    settings = fast(port, start_timeout=0.5, restart={"max_restarts": 0})
    sup = Supervisor(settings, command=fake_cmd(port, "--warm", "30"))
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.FAILED, timeout_s=15)
        reg = series(sup)
        assert value(reg, "sentinel_server_crashes_total", reason="startup_timeout") == 1
        assert sup.last_crash is not None and "not ready after 0.5 s" in sup.last_crash.detail
    finally:
        await sup.stop()


async def test_port_taken_fails_preflight_with_port_in_use(fast: Fast, fake_cmd: FakeCmd, port: int) -> None:
    import socket

    blocker = socket.socket()
    blocker.bind(("127.0.0.1", port))
    blocker.listen()
    settings = fast(port, restart={"max_restarts": 1})
    sup = Supervisor(settings, command=fake_cmd(port))
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.FAILED, timeout_s=10)
        reg = series(sup)
        assert value(reg, "sentinel_server_crashes_total", reason="port_in_use") == 2
        assert value(reg, "sentinel_server_restarts_total", reason="port_in_use") == 1
        assert value(reg, "sentinel_server_preflight_success", check="port") == 0
        blocker.close()
        sup.reset()
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
    finally:
        blocker.close()
        await sup.stop()


async def test_stop_kills_process_group_even_when_sigterm_is_ignored(
    fast: Fast, fake_cmd: FakeCmd, port: int, tmp_path: Path, alive: Callable[[int], bool]
) -> None:
    pidfile = tmp_path / "worker.pid"
    settings = fast(port, stop_timeout=0.5)
    sup = Supervisor(settings, command=fake_cmd(port, "--ignore-sigterm", "--spawn-child", str(pidfile)))
    await sup.start()
    await sup.wait_for_state(ServerState.READY, timeout_s=15)
    main_pid = sup._runner.pid if sup._runner else None
    worker = int(pidfile.read_text())
    assert main_pid is not None and alive(worker)
    await sup.stop()
    assert not alive(main_pid)
    # The worker was reparented away from us; it must still be gone (killpg reached it).
    for _ in range(50):
        if not alive(worker):
            break
        await asyncio.sleep(0.05)
    assert not alive(worker)


async def test_manual_restart_runs_hooks_and_skips_backoff(fast: Fast, fake_cmd: FakeCmd, port: int) -> None:
    settings = fast(port, restart={"backoff_initial": 30, "backoff_max": 30})
    sup = Supervisor(settings, command=fake_cmd(port))
    calls = 0

    async def hook() -> None:
        nonlocal calls
        calls += 1

    sup.add_before_stop_hook(hook)
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
        sup.restart()
        await sup.wait_for_state(ServerState.RESTARTING, timeout_s=5)
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
        assert calls == 1
        assert value(series(sup), "sentinel_server_restarts_total", reason="manual") == 1
    finally:
        await sup.stop()
    assert calls == 2


async def test_hanging_hook_does_not_block_stop(fast: Fast, fake_cmd: FakeCmd, port: int) -> None:
    settings = fast(port, before_stop_timeout=0.2)
    sup = Supervisor(settings, command=fake_cmd(port))

    async def stuck() -> None:
        await asyncio.sleep(60)

    sup.add_before_stop_hook(stuck)
    await sup.start()
    await sup.wait_for_state(ServerState.READY, timeout_s=15)
    await asyncio.wait_for(sup.stop(), 10)
    assert sup.state is ServerState.STOPPED
