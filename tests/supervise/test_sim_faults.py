"""Acceptance: the supervisor runs ``sentinel sim`` as its child and survives every sim fault.

Each fault is detected, classified with the right reason and recovered from (or ends in the
failed state for a crash loop) within a bounded time; the assertions are on the exported series.
Faults meant to be recovered from are injected at run time through the sim's control API, so the
relaunched simulator is healthy; faults that must repeat on every launch are given on its
command line.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import Callable
from typing import Any

import httpx
import pytest
from prometheus_client import CollectorRegistry

from sglang_sentinel.supervise import ServerState, Supervisor
from sglang_sentinel.supervise.settings import ServerSettings
from support.loopback import HTTP
from support.ports import free_port
from support.waits import until

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_leaked_children")]

Fast = Callable[..., ServerSettings]
SPEED = 100.0


class SimRig:
    """A supervisor whose child is the simulator, plus the sim's control API."""

    def __init__(self, fast: Fast, *faults: str, **overrides: Any) -> None:
        self.port = free_port()
        self.control_port = free_port()
        profile = {
            "kind": "sim",
            "sim_speed": SPEED,
            "sim_faults": list(faults),
            # --lifetime: a safety net so no simulator outlives a broken test run.
            "extra_args": ["--control-port", str(self.control_port), "--lifetime", "300"],
        }
        self.settings = fast(self.port, profile="simtest", profiles={"simtest": profile}, **overrides)
        self.sup = Supervisor(self.settings)

    async def fault(self, spec: str) -> None:
        async with httpx.AsyncClient() as client:
            resp = await client.post(
                f"http://127.0.0.1:{self.control_port}/faults", json={"spec": spec}, timeout=5.0
            )
            assert resp.status_code == 201, resp.text

    def running(self) -> int:
        """The requests in the simulator's running batch now."""
        state = HTTP.get(f"http://127.0.0.1:{self.control_port}/state", timeout=5).json()
        return int(state["engine"]["running"])

    def value(self, name: str, **labels: str) -> float | None:
        reg = CollectorRegistry()
        reg.register(self.sup.collector())
        return reg.get_sample_value(name, labels)

    async def __aenter__(self) -> SimRig:
        await self.sup.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.sup.stop()


async def ready(rig: SimRig, timeout_s: float = 20.0) -> None:
    await rig.sup.wait_for_state(ServerState.READY, timeout_s=timeout_s)


async def restarted_and_ready(rig: SimRig) -> None:
    await rig.sup.wait_for_state(ServerState.RESTARTING, timeout_s=20)
    await ready(rig)


async def test_crashes_are_classified_and_recovered_and_nothing_is_left(fast: Fast) -> None:
    async with SimRig(fast) as rig:
        await ready(rig)
        pid = rig.sup._runner.pid if rig.sup._runner else None
        assert pid is not None
        # Killed from outside: SIGKILL with no crash signature in the log.
        os.kill(pid, signal.SIGKILL)
        await restarted_and_ready(rig)
        assert rig.value("sentinel_server_restarts_total", reason="killed") == 1
        assert rig.value("sentinel_server_up") == 1
        # SGLang's own death by NaN in the sampler: also SIGKILL, the log tail tells.
        await rig.fault("crash")
        await restarted_and_ready(rig)
        assert rig.value("sentinel_server_restarts_total", reason="nan_in_sampler") == 1
        # usage=0: the next forward step (a canary's) dies of CUDA OOM.
        await rig.fault("oom:usage=0")
        await restarted_and_ready(rig)
        assert rig.value("sentinel_server_restarts_total", reason="cuda_oom") == 1
        assert rig.value("sentinel_server_crashes_total", reason="cuda_oom") == 1
        assert rig.value("sentinel_server_restarts_total", reason="unknown") == 0
        new_pid = rig.sup._runner.pid if rig.sup._runner else None
    assert new_pid is not None
    assert new_pid != pid
    with pytest.raises(ProcessLookupError):
        os.kill(new_pid, 0)
    # (the no_leaked_children fixture also checks that no zombie or child is left)


async def test_startup_crash_loop_ends_in_failed(fast: Fast) -> None:
    async with SimRig(fast, "crash:phase=startup", restart={"max_restarts": 2}) as rig:
        await rig.sup.wait_for_state(ServerState.FAILED, timeout_s=40)
        assert rig.value("sentinel_server_state", state="failed") == 1
        assert rig.value("sentinel_server_restarts_total", reason="unsupported_arch") == 2
        assert rig.value("sentinel_server_crashes_total", reason="unsupported_arch") == 3
        # Never became ready: the series are absent, not 0.
        assert rig.value("sentinel_server_ready_timestamp_seconds") is None
        assert rig.value("sentinel_server_start_duration_seconds") is None
        assert rig.value("sentinel_server_up") == 0


async def test_hang_fails_health_and_restarts(fast: Fast) -> None:
    # A hang also stalls the health probes' own batches and the canaries' requests: with the stall
    # check (0.5 s) and the canaries free to act, which check restarts first depends on the box's
    # load. Only the health checks may act here, so the restart reason is theirs.
    alert_only = {"action": "alert"}
    async with SimRig(fast, checks={"stall": alert_only, "canary": alert_only}) as rig:
        await ready(rig)
        await rig.fault("hang:watchdog=0")
        await restarted_and_ready(rig)
        health = (rig.value("sentinel_server_restarts_total", reason="health") or 0) + (
            rig.value("sentinel_server_restarts_total", reason="health_generate") or 0
        )
        assert health == 1
        assert (rig.value("sentinel_probe_failures_total", probe="health", reason="http_503") or 0) + (
            rig.value("sentinel_probe_failures_total", probe="health_generate", reason="http_503") or 0
        ) >= 2


async def test_hang_left_alone_is_killed_by_the_watchdog(fast: Fast) -> None:
    alert_only = {"action": "alert"}
    checks = {"health": alert_only, "health_generate": alert_only, "stall": alert_only, "canary": alert_only}
    async with SimRig(fast, checks=checks) as rig:
        await ready(rig)
        await rig.fault("hang:watchdog=100")  # 1 s real at speed 100
        await restarted_and_ready(rig)
        assert rig.value("sentinel_server_restarts_total", reason="watchdog_timeout") == 1


async def test_stall_with_requests_in_flight_is_detected(fast: Fast) -> None:
    # Only the stall check may act, so the restart reason is unambiguous.
    alert_only = {"action": "alert"}
    checks = {"health": alert_only, "health_generate": alert_only, "canary": alert_only}
    async with SimRig(fast, checks=checks) as rig:
        await ready(rig)
        async with httpx.AsyncClient(base_url=f"http://127.0.0.1:{rig.port}") as client:
            # Long enough (24 s real) to be decoding still when the stall comes, however late.
            body = {
                "text": "Tell me a long story.",
                "sampling_params": {"max_new_tokens": 30000, "ignore_eos": True},
            }
            load = [asyncio.create_task(client.post("/generate", json=body, timeout=30)) for _ in range(3)]
            # In the running batch (a canary may be one of the three): a stall of an engine with
            # nothing running is no stall to see.
            await until(lambda: rig.running() >= 3, what="the load running")
            await rig.fault("stall:duration=3000")  # 30 s real: far longer than stall_after
            await restarted_and_ready(rig)
            for t in load:
                t.cancel()
            await asyncio.gather(*load, return_exceptions=True)
        assert rig.value("sentinel_server_restarts_total", reason="stall") == 1
        assert (rig.value("sentinel_probe_failures_total", probe="stall", reason="stalled") or 0) >= 1


async def test_garbage_and_503_storm_fail_canaries_and_restart(fast: Fast) -> None:
    # The other garbage styles (nan, random) are checked against the sim's exact strings in
    # test_probes.py.
    interval = 0.3
    # Two garbage rounds in a row confirm it: at least one canary interval lies between the last
    # pass (the start of the doubt) and the confirmation, whatever the box's load.
    rig = SimRig(fast, checks={"canary": {"interval": interval, "failures": 2}})
    doubts: list[tuple[float, str, float]] = []
    rig.sup.on_canary_garbage(lambda since, reason: doubts.append((since, reason, time.time())))
    started = time.time()
    async with rig:
        await ready(rig)
        await rig.fault("garbage:style=bang")
        await restarted_and_ready(rig)
        assert rig.value("sentinel_server_restarts_total", reason="canary") == 1
        # The scheduler is told once, with the last pass (wall clock) as the start of the doubt,
        # not the moment the garbage was confirmed.
        assert len(doubts) == 1
        since, _, confirmed_at = doubts[0]
        assert started <= since <= confirmed_at - interval
        assert doubts[0][1].startswith("canary_")
        garbage = sum(
            rig.value("sentinel_probe_failures_total", probe=p, reason="garbage_repeated") or 0
            for p in ("canary_arithmetic", "canary_is_prime")
        )
        assert garbage >= 1
        # /health never noticed: that is why the canaries exist.
        assert (rig.value("sentinel_probe_failures_total", probe="health", reason="http_503") or 0) == 0
        await rig.fault("http_503")
        await restarted_and_ready(rig)
        assert rig.value("sentinel_server_restarts_total", reason="canary") == 2
        storm = sum(
            rig.value("sentinel_probe_failures_total", probe=p, reason="http_503") or 0
            for p in ("canary_arithmetic", "canary_is_prime")
        )
        assert storm >= 1


async def test_slow_start_goes_through_starting_and_warming(fast: Fast) -> None:
    rig = SimRig(fast, "slow_start:refuse=100,warmup=100")  # 1 s + 1 s real
    seen: list[str] = []
    rig.sup.subscribe_state(lambda c: seen.append(c.new.value))
    async with rig:
        await ready(rig)
        assert seen.index("starting") < seen.index("warming") < seen.index("ready")
        duration = rig.value("sentinel_server_start_duration_seconds")
        assert duration is not None
        assert duration >= 2.0
        assert rig.value("sentinel_server_restarts_total", reason="startup_timeout") == 0


async def test_slow_start_beyond_start_timeout_is_startup_timeout(fast: Fast) -> None:
    rig = SimRig(fast, "slow_start:refuse=1000,warmup=0", start_timeout=1.0, restart={"max_restarts": 1})
    async with rig:
        await rig.sup.wait_for_state(ServerState.FAILED, timeout_s=30)
        assert rig.value("sentinel_server_crashes_total", reason="startup_timeout") == 2
        assert rig.value("sentinel_server_restarts_total", reason="startup_timeout") == 1


async def test_port_taken_is_diagnosed_and_retried_never_a_crash_loop(fast: Fast) -> None:
    # max_restarts 1: counted as crashes, three held-port attempts would end in `failed`.
    rig = SimRig(fast, restart={"max_restarts": 1})
    blocker = socket.socket()
    blocker.bind(("127.0.0.1", rig.port))
    blocker.listen()
    try:
        async with rig:
            await rig.sup.wait_for_state(ServerState.RESTARTING, timeout_s=10)
            # Who holds it: this test process (portowner reads /proc/net/tcp and /proc/*/fd).
            assert f"pid {os.getpid()}:" in rig.sup.snapshot().port_holders
            while (rig.value("sentinel_server_restarts_total", reason="port_in_use") or 0) < 3:
                assert rig.sup.state is not ServerState.FAILED
                await asyncio.sleep(0.1)
            assert rig.value("sentinel_server_crashes_total", reason="port_in_use") in (None, 0.0)
            blocker.close()
            await ready(rig)
    finally:
        blocker.close()
