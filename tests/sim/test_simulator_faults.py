"""Every fault, at launch (flags) and at run time (control API)."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import time

import httpx
import pytest

from sglang_sentinel.sglang.logparse import CrashKind, classify_crash
from sglang_sentinel_sim import serve
from support.loopback import HTTP
from support.sim_sse import sse
from support.waits import until, until_sync

LONG = {"text": "x", "sampling_params": {"max_new_tokens": 100000, "ignore_eos": True}}


def test_crash_at_runtime_kills_with_sigkill_after_a_traceback(sim_factory) -> None:  # type: ignore[no-untyped-def]
    sim = sim_factory()
    fault = sim.control("/faults", "POST", {"name": "crash"})
    assert fault["name"] == "crash"
    assert sim.wait_exit(20) == -signal.SIGKILL
    log = sim.stderr_text()
    assert "Scheduler hit an exception: Traceback (most recent call last):" in log
    assert "SIGQUIT received" in log
    assert classify_crash(log.splitlines()) == CrashKind.NAN_IN_SAMPLER
    with pytest.raises(httpx.ConnectError):
        HTTP.get(sim.base_url + "/health", timeout=2)


def test_crash_during_startup_never_listens(sim_factory) -> None:  # type: ignore[no-untyped-def]
    sim = sim_factory("--fault", "crash:phase=startup", "--speed", "20", wait_ready=False)
    with pytest.raises(httpx.ConnectError):
        HTTP.get(sim.base_url + "/health", timeout=2)
    assert sim.wait_exit(20) == -signal.SIGKILL
    log = sim.stderr_text()
    assert "Received sigquit from a child process" in log
    assert "fired up" not in log
    assert classify_crash(log.splitlines()) == CrashKind.UNSUPPORTED_ARCH


def test_hang_turns_health_503_then_watchdog_kills(sim_factory) -> None:  # type: ignore[no-untyped-def]
    # server seconds at speed 100: health timeout 20 s -> 0.2 s, watchdog 150 s -> 1.5 s
    sim = sim_factory("--fault", "hang:watchdog=150", wait_ready=False)
    until_sync(lambda: sim.control("/state")["status"] == "up", what="the port listening")
    assert HTTP.get(sim.base_url + "/health", timeout=10).status_code == 503
    assert sim.control("/state")["engine"]["frozen"] is True
    assert sim.wait_exit(20) == -signal.SIGKILL
    log = sim.stderr_text()
    assert "Health check failed" in log
    assert classify_crash(log.splitlines()) == CrashKind.WATCHDOG_TIMEOUT


def test_oom_when_kv_usage_high() -> None:
    async def run() -> str:
        err = io.StringIO()
        async with (
            serve(
                speed=400,
                profile="tiny-llama-1x-h200",
                max_total_tokens=4000,
                faults=("oom:usage=0.5",),
                err=err,
            ) as sim,
            httpx.AsyncClient(base_url=sim.base_url) as c,
        ):
            body = {
                "input_ids": list(range(500)),
                "sampling_params": {"max_new_tokens": 1000, "ignore_eos": True},
            }
            results = await asyncio.gather(
                *(c.post("/generate", json=body) for _ in range(4)), return_exceptions=True
            )
            assert any(isinstance(r, httpx.HTTPError) or r.status_code != 200 for r in results)  # type: ignore[union-attr]
            await until(lambda: sim.stopped, what="the crash's stop")
            assert sim.exit_reason == "crash:oom"
        return err.getvalue()

    log = asyncio.run(run())
    assert "torch.OutOfMemoryError: CUDA out of memory" in log
    assert classify_crash(log.splitlines()) == CrashKind.CUDA_OOM


async def test_stall_pauses_then_resumes() -> None:
    async with (
        serve(speed=100, startup_time=0) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as c,
    ):
        async with httpx.AsyncClient(base_url=sim.control_url) as ctl:
            r = await ctl.post("/faults", json={"spec": "stall:duration=30,after=1"})
            assert r.status_code == 201
        t0 = time.monotonic()
        r = await c.post(
            "/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}}
        )
        elapsed = time.monotonic() - t0
        assert r.json()["meta_info"]["completion_tokens"] == 40
        # 40 steps of ~0.08 s plus a 30 s stall, at speed 100
        assert elapsed >= 0.3
        assert sim.faults.get("stall") is None  # a stall clears itself


async def test_garbage_keeps_health_green_and_counts_right() -> None:
    async with serve(speed=200, faults=("garbage",)) as sim, httpx.AsyncClient(base_url=sim.base_url) as c:
        r = (
            await c.post(
                "/generate", json={"text": "What is 2+2?", "sampling_params": {"max_new_tokens": 10}}
            )
        ).json()
        assert set(r["text"]) == {"!"}
        assert r["meta_info"]["completion_tokens"] == 7
        assert (await c.get("/health")).status_code == 200
        async with httpx.AsyncClient(base_url=sim.control_url) as ctl:
            await ctl.post("/faults", json={"name": "garbage", "params": {"style": "nan"}})
            r = (await c.post("/generate", json={"text": "What is 2+2?"})).json()
            assert "NaN" in r["text"]
            await ctl.delete("/faults")
        r = (await c.post("/generate", json={"text": "What is 2+2?"})).json()
        assert r["text"] == "2 + 2 = 4."


async def test_slow_start_refuses_then_503_then_ready() -> None:
    # refuse 100 + warmup 100 server seconds at speed 200 = 0.5 s each
    async with serve(speed=200, faults=("slow_start:refuse=100,warmup=100",), wait_ready=False) as sim:
        async with httpx.AsyncClient(base_url=sim.control_url) as ctl:
            assert (await ctl.get("/state")).json()["status"] == "starting"
        seen: list[object] = []
        deadline = time.monotonic() + 10
        async with httpx.AsyncClient(base_url=sim.base_url, timeout=5) as c:
            while time.monotonic() < deadline:
                try:
                    status: object = (await c.get("/health")).status_code
                except httpx.ConnectError:
                    status = "refused"
                if not seen or seen[-1] != status:
                    seen.append(status)
                if status == 200:
                    break
                await asyncio.sleep(0.02)
            assert (await c.get("/model_info")).status_code == 200
    assert seen == ["refused", 503, 200]


async def test_error_chunk_and_malformed_sse() -> None:
    async with (
        serve(speed=200, faults=("error_chunk:tokens=3",)) as sim,
        httpx.AsyncClient(base_url=sim.base_url) as c,
    ):
        status, events = await sse(c, "/generate", {**LONG, "stream": True})
        assert status == 200
        assert events[-1] == "[DONE]"
        err = json.loads(events[-2])
        assert err == {"error": {"message": "CUDA error: an illegal memory access was encountered"}}
        assert json.loads(events[-3])["meta_info"]["completion_tokens"] == 3
        status, events = await sse(
            c, "/v1/chat/completions", {"messages": [{"role": "user", "content": "x"}], "stream": True}
        )
        assert json.loads(events[-2])["error"]["object"] == "error"
        assert sim.truth.records()[-1].status == "error"
        async with httpx.AsyncClient(base_url=sim.control_url) as ctl:
            await ctl.delete("/faults/error_chunk")
            await ctl.post("/faults", json={"name": "malformed_sse"})
        status, events = await sse(
            c,
            "/generate",
            {"text": "x", "sampling_params": {"max_new_tokens": 6, "ignore_eos": True}, "stream": True},
        )
        bad = [e for e in events[:-1] if not e.endswith("}")]
        assert len(bad) == 1
        assert events[-1] == "[DONE]"
        assert json.loads(events[-2])["meta_info"]["completion_tokens"] == 6


async def test_503_storm_rate() -> None:
    async with (
        serve(speed=200, faults=("503_storm:rate=0.5",)) as sim,
        httpx.AsyncClient(base_url=sim.base_url) as c,
    ):
        codes = [
            (
                await c.post("/generate", json={"text": "x", "sampling_params": {"max_new_tokens": 1}})
            ).status_code
            for _ in range(10)
        ]
        assert codes.count(503) == 5
        assert codes.count(200) == 5
        assert (await c.get("/health")).status_code == 200


async def test_control_api_validation() -> None:
    async with serve(speed=200) as sim, httpx.AsyncClient(base_url=sim.control_url) as ctl:
        assert (await ctl.post("/faults", json={"name": "meteor"})).status_code == 400
        r = await ctl.post("/faults", json={"name": "stall", "params": {"duration": "long"}})
        assert r.status_code == 400
        assert "not a number" in r.json()["error"]
        assert (await ctl.post("/faults", json={"name": "stall", "params": {"bogus": 1}})).status_code == 400
        assert (await ctl.post("/faults", json={"spec": "slow_start"})).status_code == 400
        assert (await ctl.post("/faults", content=b"nope")).status_code == 400
        assert (await ctl.delete("/faults/hang")).status_code == 404
        assert (await ctl.get("/requests?since=yesterday")).status_code == 400
        catalogue = (await ctl.get("/faults")).json()["catalogue"]
        assert set(catalogue) == {
            "crash", "hang", "stall", "garbage", "slow_start", "oom", "error_chunk", "malformed_sse",
            "http_503", "metrics_disabled", "nan_sanitized",
        }  # fmt: skip
        r = await ctl.post("/faults", json={"name": "hang", "params": {"after": 1000, "watchdog": 0}})
        assert r.status_code == 201
        assert r.json()["active"] is False
        assert (await ctl.get("/state")).json()["faults"][0]["name"] == "hang"
