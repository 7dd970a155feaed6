"""The supervisor in child mode against the fake server: lifecycle, policies, stop, hooks.

Fault detection and classification against the real simulator is in test_sim_faults.py.
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry

from sglang_sentinel.supervise import LogLine, ServerState, StateChange, Supervisor
from sglang_sentinel.supervise.launch import LaunchCommand
from sglang_sentinel.supervise.settings import ServerSettings
from support.waits import until

pytestmark = [pytest.mark.usefixtures("no_leaked_children")]

Fast = Callable[..., ServerSettings]
FakeCmd = Callable[..., LaunchCommand]


def series(sup: Supervisor) -> CollectorRegistry:
    reg = CollectorRegistry(auto_describe=True)
    reg.register(sup.collector())
    return reg


def value(reg: CollectorRegistry, name: str, **labels: str) -> float | None:
    return reg.get_sample_value(name, labels)


async def test_starts_warms_becomes_ready_and_stops(
    fast: Fast, sim_cmd: FakeCmd, port: int, tmp_path: Path
) -> None:
    # The server requires a key on its API routes: the canaries passing proves the probes send it.
    settings = fast(port, log_file=tmp_path / "server.log", api_key="k3y")
    # At --speed 100: port refused 0.3 s longer, then /health 503 for 1.0 s longer.
    slow = "slow_start:refuse=30,warmup=100"
    sup = Supervisor(settings, command=sim_cmd(port, "--fault", slow, "--api-key", "k3y"))
    changes: list[StateChange] = []
    sup.subscribe_state(changes.append)
    lines: list[LogLine] = []
    sup.add_line_listener(lines.append)
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
    assert duration is not None
    assert 1.3 <= duration < 10  # refuse 0.3 s + warm 1.0 s, plus the sim's own start-up
    assert value(reg, "sentinel_server_ready_timestamp_seconds") == sup.epoch
    # Canaries run right after ready; health and stall soon after: waited for, a busy box is slow.
    probes = ("health", "health_generate", "stall", "canary_arithmetic", "canary_is_prime")
    await until(
        lambda: all(value(series(sup), "sentinel_probe_success", probe=p) == 1 for p in probes),
        30,
        what=f"every probe passing: {probes}",
    )
    reg = series(sup)
    for probe in probes:
        assert value(reg, "sentinel_probe_success", probe=probe) == 1, probe
        assert value(reg, "sentinel_probe_duration_seconds", probe=probe) is not None
    await sup.stop()
    assert hook_calls == ["stop load"]
    assert sup.state is ServerState.STOPPED
    seen = [(c.old.value, c.new.value) for c in changes]
    assert ("starting", "warming") in seen
    assert ("warming", "ready") in seen
    assert seen[-1] == ("ready", "stopped")
    assert (
        value(series(sup), "sentinel_server_state_transitions_total", from_state="warming", to_state="ready")
        == 1
    )
    # The log went to the file and to the listener.
    text = (tmp_path / "server.log").read_text()
    assert "The server is fired up and ready to roll!" in text
    assert any("fired up" in line.text for line in lines)
    with pytest.raises(ProcessLookupError):
        os.kill(pid, 0)


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
        await sup.wait_for_state(ServerState.STARTING, ServerState.WARMING, ServerState.READY, timeout_s=30)
    finally:
        await sup.stop()


async def test_alert_only_policy_never_restarts(fast: Fast, sim_cmd: FakeCmd, port: int) -> None:
    # interval 60 s, retry 0.1 s: the repeated failures below come from the retry interval.
    settings = fast(port, checks={"canary": {"action": "alert", "interval": 60, "retry_interval": 0.1}})
    sup = Supervisor(settings, command=sim_cmd(port, "--fault", "garbage"))
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.UNHEALTHY, timeout_s=15)

        def failures() -> float:
            name = "sentinel_probe_failures_total"
            return value(series(sup), name, probe="canary_is_prime", reason="garbage_repeated") or 0

        # Failures past the confirming one (canary `failures` is 1 in the fast settings), from the
        # retry interval: a policy that restarts would have restarted by now.
        await until(lambda: failures() >= 3, what="repeated canary failures")
        assert sup.state is ServerState.UNHEALTHY
        reg = series(sup)
        assert value(reg, "sentinel_server_restarts_total", reason="canary") == 0
        assert value(reg, "sentinel_server_up") == 1
    finally:
        await sup.stop()


async def test_health_503_storm_unhealthy_then_restart(
    fast: Fast, fake_cmd: FakeCmd, port: int, tmp_path: Path
) -> None:
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
    assert main_pid is not None
    assert alive(worker)
    await sup.stop()
    assert not alive(main_pid)
    # The worker was reparented away from us; it must still be gone (killpg reached it).
    await until(lambda: not alive(worker), what="the worker killed with its group")


async def test_a_killed_leader_is_seen_even_while_a_worker_holds_its_output(
    fast: Fast, fake_cmd: FakeCmd, port: int, tmp_path: Path, alive: Callable[[int], bool]
) -> None:
    # A worker that outlives its SIGKILLed leader keeps the output pipe open; on Python 3.11
    # Process.wait() waits for that pipe too, and the crash went unseen (stuck in unhealthy).
    pidfile = tmp_path / "worker.pid"
    once = tmp_path / "once"
    cmd = fake_cmd(port, "--spawn-child", str(pidfile), "--crash-after", "0.3", "--once", str(once))
    sup = Supervisor(fast(port), command=cmd)
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
        worker = int(pidfile.read_text())
        await sup.wait_for_state(ServerState.RESTARTING, timeout_s=10)
        assert sup.last_crash is not None
        assert "signal 9" in sup.last_crash.detail
        # the leader's exit took its process group (the worker) along
        await until(lambda: not alive(worker), what="the worker killed with its group")
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
    finally:
        await sup.stop()


async def test_manual_restart_runs_hooks_and_skips_backoff(fast: Fast, sim_cmd: FakeCmd, port: int) -> None:
    settings = fast(port, restart={"backoff_initial": 30, "backoff_max": 30})
    sup = Supervisor(settings, command=sim_cmd(port))
    calls = 0

    async def hook() -> None:
        nonlocal calls
        calls += 1

    sup.add_before_stop_hook(hook)
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
        sup.restart()
        await sup.wait_for_state(ServerState.RESTARTING, timeout_s=30)
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
        assert calls == 1
        assert value(series(sup), "sentinel_server_restarts_total", reason="manual") == 1
    finally:
        await sup.stop()
    assert calls == 2


async def test_hanging_hook_does_not_block_stop(fast: Fast, sim_cmd: FakeCmd, port: int) -> None:
    settings = fast(port, before_stop_timeout=0.2)
    sup = Supervisor(settings, command=sim_cmd(port))

    async def stuck() -> None:
        await asyncio.sleep(60)

    sup.add_before_stop_hook(stuck)
    await sup.start()
    await sup.wait_for_state(ServerState.READY, timeout_s=15)
    await asyncio.wait_for(sup.stop(), 10)
    assert sup.state is ServerState.STOPPED


async def test_stop_ends_even_when_a_task_drops_its_cancellation(
    fast: Fast, fake_cmd: FakeCmd, port: int, monkeypatch: pytest.MonkeyPatch, alive: Callable[[int], bool]
) -> None:
    import sglang_sentinel.supervise.tasks as module
    from sglang_sentinel.supervise.runners import ChildRunner

    real_wait = ChildRunner.wait
    dropped = 0

    async def deaf_wait(self: ChildRunner) -> Any:
        # What Python 3.11's asyncio.wait_for does when a cancel races with completion: the
        # cancel is lost and the task goes on waiting for an exit that only stop() would cause.
        nonlocal dropped
        try:
            return await real_wait(self)
        except asyncio.CancelledError:
            dropped += 1
        return await real_wait(self)

    monkeypatch.setattr(ChildRunner, "wait", deaf_wait)
    monkeypatch.setattr(module, "_RECANCEL_AFTER", 0.2)
    sup = Supervisor(fast(port), command=fake_cmd(port))
    lines: list[LogLine] = []
    sup.add_line_listener(lines.append)
    await sup.start()
    await sup.wait_for_state(ServerState.READY, timeout_s=15)
    pid = sup._runner.pid if sup._runner else None
    assert pid is not None
    # Not asyncio.timeout around stop(): a stop() that swallows its own cancellation (it once did)
    # would hide the hang from it.
    stopping = asyncio.create_task(sup.stop())
    try:
        await asyncio.wait([stopping], timeout=10)
        assert stopping.done(), "stop() hung on a task that dropped its cancellation"
        await stopping
    finally:
        stopping.cancel()
        await asyncio.wait([stopping], timeout=10)
    assert dropped == 1
    assert lines
    assert sup.state is ServerState.STOPPED
    assert not alive(pid)


async def test_an_internal_error_does_not_kill_the_supervisor(
    fast: Fast, fake_cmd: FakeCmd, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    import sglang_sentinel.supervise.prelaunch as module
    from sglang_sentinel.supervise.preflight import run_preflight as real

    calls = 0

    async def flaky(*args: Any, **kwargs: Any) -> Any:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("bug in a check")
        return await real(*args, **kwargs)

    monkeypatch.setattr(module, "run_preflight", flaky)
    sup = Supervisor(fast(port), command=fake_cmd(port))
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
        assert value(series(sup), "sentinel_server_crashes_total", reason="unknown") == 1
        assert sup.last_crash is not None
        assert "RuntimeError: bug in a check" in sup.last_crash.detail
    finally:
        await sup.stop()


async def test_waits_for_gpu_memory_release_instead_of_failing(
    fast: Fast, fake_cmd: FakeCmd, port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    from sglang_sentinel.supervise import GpuInfo, LaunchCommand
    from sglang_sentinel.supervise.settings import LaunchProfile

    reads = 0

    def gpus() -> list[GpuInfo]:
        # The dead server's memory is still held for the first two reads.
        nonlocal reads
        reads += 1
        free = (2 << 30) if reads <= 2 else (95 << 30)
        return [GpuInfo(i, "GPU", 96 << 30, free, (9, 0)) for i in range(2)]

    base = fake_cmd(port)
    profile = LaunchProfile(kind="command", needs_gpus=2, mem_fraction_static=0.85)
    cmd = LaunchCommand("fake-gpu", profile, base.argv, {})
    settings = fast(port, gpu_release_wait=20.0)
    import sglang_sentinel.supervise.prelaunch as module

    monkeypatch.setattr(module, "_GPU_RELEASE_POLL", 0.05)
    sup = Supervisor(settings, command=cmd, gpu_reader=gpus)
    try:
        await sup.start()
        await sup.wait_for_state(ServerState.READY, timeout_s=15)
        assert reads == 3
        assert sum(sup.crashes.values()) == 0
        assert value(series(sup), "sentinel_server_preflight_success", check="gpus") == 1
    finally:
        await sup.stop()


async def test_restart_history_survives_a_restart_of_sentinel(
    fast: Fast, fake_cmd: FakeCmd, port: int, tmp_path: Path
) -> None:
    settings = fast(port, restart={"max_restarts": 1, "window": 600})
    crashing = fake_cmd(port, "--crash-after", "0.05", "--exit-code", "1")
    first = Supervisor(settings, command=crashing, state_dir=tmp_path)
    await first.start()
    try:
        await first.wait_for_state(ServerState.FAILED, timeout_s=20)
    finally:
        await first.stop()
    # Sentinel comes back (systemd restarted it): the same config is still crash-looping, so the
    # first crash is enough to stop again instead of two more.
    second = Supervisor(settings, command=crashing, state_dir=tmp_path)
    await second.start()
    try:
        await second.wait_for_state(ServerState.FAILED, timeout_s=20)
        assert sum(second.crashes.values()) == 1
        assert sum(second.restarts.values()) == 0
    finally:
        await second.stop()
    # A different launch config (one more argument) starts with a clean slate: a restart again.
    other = fake_cmd(port, "--crash-after", "0.05", "--exit-code", "1", "--warm", "0")
    third = Supervisor(settings, command=other, state_dir=tmp_path)
    await third.start()
    try:
        await third.wait_for_state(ServerState.FAILED, timeout_s=20)
        assert sum(third.restarts.values()) == 1
        third.reset()  # an operator's reset also clears the saved history (synchronously)
        assert '"restarts": []' in (tmp_path / "supervisor-restarts.json").read_text()
    finally:
        await third.stop()


async def test_unreadable_metrics_are_counted_but_never_a_stall(
    fast: Fast, sim_cmd: FakeCmd, port: int
) -> None:
    # Without --enable-metrics the simulator's /metrics is 404, as SGLang's.
    sup = Supervisor(fast(port), command=sim_cmd(port, metrics=False))
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.READY, timeout_s=15)

        def failures() -> float:
            name = "sentinel_probe_failures_total"
            return value(series(sup), name, probe="stall", reason="metrics_error") or 0

        await until(lambda: failures() >= 2, what="two stall checks that could not read /metrics")
        reg = series(sup)
        assert value(reg, "sentinel_probe_success", probe="stall") is None  # no verdict, no series
        assert sup.state is ServerState.READY
    finally:
        await sup.stop()
