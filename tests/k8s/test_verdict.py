"""``/verdict``, the SGLang container's livenessProbe in Kubernetes: ok, unsure, confirmed failure.

End to end as the chart deploys it: the daemon in external mode (the sidecar) watching a
simulator it did not start, the simulator's garbage and stall faults injected through its
control API. The verdict must stay 200 while sentinel is unsure (server not up yet, a first
canary miss, a first stalled reading) and turn 503 only once the check's ``failures`` are reached.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncGenerator, Callable
from typing import Any

import httpx
import pytest

from sglang_sentinel.config import load_settings
from sglang_sentinel.daemon import Daemon
from sglang_sentinel.verdict import verdict
from support.ports import free_port
from support.waits import until

pytestmark = [pytest.mark.slow]


def _env(tmp_path: Any, server_port: int) -> dict[str, str]:
    return {
        "SENTINEL_STATE_DIR": str(tmp_path / "state"),
        "SENTINEL_SERVER__MODE": "external",
        "SENTINEL_SERVER__PORT": str(server_port),
        "SENTINEL_SERVER__STARTUP_POLL_INTERVAL": "0.1",
        "SENTINEL_SERVER__CHECKS__HEALTH__INTERVAL": "0.2",
        "SENTINEL_SERVER__CHECKS__HEALTH_GENERATE__ENABLED": "false",
        # Wide enough that the unconfirmed ("unsure") stretch is seen on a busy machine.
        "SENTINEL_SERVER__CHECKS__CANARY__INTERVAL": "1.0",
        "SENTINEL_SERVER__CHECKS__CANARY__RETRY_INTERVAL": "1.0",
        "SENTINEL_SERVER__CHECKS__CANARY__FAILURES": "3",
        "SENTINEL_SERVER__CHECKS__CANARY__TIMEOUT": "10",
        "SENTINEL_SERVER__CHECKS__STALL__INTERVAL": "1.0",
        "SENTINEL_SERVER__CHECKS__STALL__STALL_AFTER": "0.5",
        "SENTINEL_SERVER__CHECKS__STALL__FAILURES": "3",
        "SENTINEL_COLLECTORS__ENABLED": '["sglang"]',
        "SENTINEL_EXPORTER__PORT": "0",
        "SENTINEL_SCHEDULE__CALIBRATE_WHEN_MISSING": "false",
        "SENTINEL_SCHEDULE__RECALIBRATE_CRON": "",
        "SENTINEL_SCHEDULE__PROFILES": '{"reference": {"interval_seconds": 3600, "run_on_ready": false}}',
    }


class Probe:
    """The kubelet's view: GET /verdict (and ?ready), every answer recorded."""

    def __init__(self, url: str) -> None:
        self.client = httpx.AsyncClient(base_url=url, timeout=5.0)
        self.seen: list[tuple[int, str]] = []

    async def get(self, ready: bool = False) -> tuple[int, str]:
        resp = await self.client.get("/verdict?ready" if ready else "/verdict")
        answer = (resp.status_code, resp.text.strip())
        self.seen.append(answer)
        return answer

    async def until(self, check: Callable[[int, str], bool], within: float = 30.0) -> tuple[int, str]:
        deadline = time.monotonic() + within
        while True:
            code, text = await self.get()
            if check(code, text):
                return code, text
            if time.monotonic() > deadline:
                raise AssertionError(f"verdict never matched; last answers: {self.seen[-5:]}")
            await asyncio.sleep(0.05)


async def _daemon(tmp_path: Any, server_port: int) -> AsyncGenerator[tuple[Daemon, Probe], None]:
    env = _env(tmp_path, server_port)
    daemon = Daemon(load_settings(None, environ=env), environ=env)
    await daemon._start()
    probe = Probe(daemon.exporter.url)
    try:
        yield daemon, probe
    finally:
        await probe.client.aclose()
        await daemon._shutdown()


def _ok(code: int, text: str) -> bool:
    return code == 200 and text == "ok: server ready"


@pytest.mark.slow(seconds=35)
async def test_unsure_until_ready_then_garbage_confirmed(
    tmp_path: Any, sim_factory: Callable[..., Any]
) -> None:
    port = free_port()
    gen = _daemon(tmp_path, port)
    daemon, probe = await gen.__anext__()
    try:
        # Nothing listening yet (the model is loading): unsure, so liveness passes and the
        # startup/readiness form holds the pod back.
        code, text = await probe.get()
        assert code == 200, text
        assert text.startswith("unsure: server "), text
        code, text = await probe.get(ready=True)
        assert code == 503, text
        assert text.startswith("not ready: server "), text

        sim = sim_factory("--port", str(port))
        await probe.until(_ok)
        assert (await probe.get(ready=True))[0] == 200

        sim.control("/faults", "POST", {"spec": "garbage:style=bang"})
        code, text = await probe.until(lambda c, t: c == 503)
        assert text.startswith("failed: canary_"), text
        assert "garbage_repeated (3 in a row)" in text, text
        # Before the third miss in a row, the canary failed but sentinel was still unsure.
        unsure = [t for c, t in probe.seen if c == 200 and "failing, not confirmed: canary_" in t]
        assert unsure, probe.seen
        assert (await probe.get(ready=True))[0] == 503
        # The daemon itself is healthy: /healthz is about sentinel, /verdict about SGLang.
        assert (await probe.client.get("/healthz")).status_code == 200
        status = daemon.status()
        confirmed = [p for p in status["probes"] if p["confirmed"]]
        assert confirmed
        assert all(p["consecutive_failures"] >= 3 for p in confirmed)

        # The answers are good again (in Kubernetes: the restarted container): ok once more.
        sim.control("/faults", "DELETE")
        await probe.until(_ok)

        # The server goes away: not a verdict of ours; the container's exit speaks for itself.
        sim.kill()
        code, text = await probe.until(lambda c, t: t.startswith("unsure: server "))
        assert code == 200
    finally:
        await gen.aclose()


async def test_stall_confirmed_after_failures_in_a_row(
    tmp_path: Any, sim_factory: Callable[..., Any]
) -> None:
    sim = sim_factory("--enable-metrics")
    gen = _daemon(tmp_path, sim.port)
    _, probe = await gen.__anext__()
    # Long enough (24 s real at speed 100) to be decoding still when the stall comes, however late.
    body = {"text": "Tell me a long story.", "sampling_params": {"max_new_tokens": 30000, "ignore_eos": True}}
    async with httpx.AsyncClient(base_url=sim.base_url) as client:
        load = [asyncio.create_task(client.post("/generate", json=body, timeout=60)) for _ in range(3)]
        try:
            await probe.until(_ok)
            # In the running batch (three running: two of them at least are the load, a canary
            # may be the third): a stall of an engine with nothing running is no stall to see.
            await until(lambda: sim.control("/state")["engine"]["running"] >= 3, what="the load running")
            sim.control("/faults", "POST", {"spec": "stall:duration=6000"})  # 60 s real at speed 100
            _, text = await probe.until(lambda c, t: c == 503)
            assert text == "failed: stall stalled (3 in a row)", text
            assert any(c == 200 and "failing, not confirmed:" in t and "stall" in t for c, t in probe.seen), [
                a for a in probe.seen if a[1] != "ok: server ready"
            ]
            sim.control("/faults", "DELETE")  # the engine resumes
            await probe.until(_ok)
        finally:
            for t in load:
                t.cancel()
            await asyncio.gather(*load, return_exceptions=True)
            await gen.aclose()


def test_verdict_reads_only_decisive_confirmed_probes() -> None:
    def status(state: str, *probes: dict[str, Any]) -> dict[str, Any]:
        return {"server": {"state": state}, "probes": list(probes)}

    bad_health = {"name": "health", "success": False, "reason": "timeout", "confirmed": True}
    bad_canary = {
        "name": "canary_x",
        "success": False,
        "reason": "wrong_answer",
        "confirmed": True,
        "consecutive_failures": 3,
    }
    # /health and /health_generate never fail the verdict: the kubelet's own exit handling and
    # the startupProbe own those; a confirmed health failure is "unsure".
    assert verdict(status("unhealthy", bad_health)) == (
        200,
        "unsure: server unhealthy; failing, not confirmed: health",
    )
    assert verdict(status("unhealthy", bad_canary)) == (503, "failed: canary_x wrong_answer (3 in a row)")
    # A confirmation left over from a server that is gone or restarting is not a verdict on this one.
    assert verdict(status("stopped", bad_canary)) == (200, "unsure: server stopped")
    assert verdict(status("warming"), require_ready=True) == (503, "not ready: server warming")
    assert verdict({}) == (200, "unsure: server starting")
