"""The daemon's wiring, in process: calibration through the scheduler's slot and budget, the GPU
view the breaker reads, the state-directory fallback."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import pytest
from structlog.testing import capture_logs

from sglang_sentinel.config import load_settings
from sglang_sentinel.daemon import Daemon, resolve_state_dir
from support.ports import free_port
from support.waits import until


def test_state_dir_fallbacks(tmp_path: Path) -> None:
    explicit = load_settings(None, environ={"SENTINEL_STATE_DIR": str(tmp_path / "x")})
    assert resolve_state_dir(explicit, {}) == tmp_path / "x"
    default = load_settings(None, environ={})
    assert resolve_state_dir(default, {"STATE_DIRECTORY": "/var/lib/a:/var/lib/b"}) == Path("/var/lib/a")
    chosen = resolve_state_dir(default, {"XDG_STATE_HOME": str(tmp_path)})
    assert chosen in (Path("/var/lib/sentinel"), tmp_path / "sentinel")


async def test_gpu_health_reads_the_collectors_snapshot() -> None:
    from sglang_sentinel.collect import build_collector_set
    from sglang_sentinel.collect.gpu.collector import GpuCollector

    settings = load_settings(None, environ={"SENTINEL_COLLECTORS__GPU__BACKEND": "fake"})
    collectors = build_collector_set(settings)
    gpu = collectors.get("gpu")
    assert isinstance(gpu, GpuCollector)
    before = gpu.health()
    assert before.max_temperature_celsius is None  # nothing read yet: unknown, not 0
    assert before.throttled is None
    await collectors.start()
    try:
        await until(lambda: gpu.health().max_temperature_celsius is not None, what="a first GPU read")
        health = gpu.health()
        temp = health.max_temperature_celsius
        assert temp is not None
        assert 20 < temp < 100
        assert health.throttled in (True, False)
    finally:
        await collectors.stop()


@pytest.mark.slow
async def test_calibration_runs_in_the_slot_and_sets_capacity(tmp_path: Path) -> None:
    env = {
        "SENTINEL_STATE_DIR": str(tmp_path / "state"),
        "SENTINEL_SERVER__PORT": str(free_port()),
        "SENTINEL_SERVER__PROFILE": "fastsim",
        "SENTINEL_SERVER__PROFILES": '{"fastsim": {"kind": "sim", "sim_speed": 100}}',
        "SENTINEL_SERVER__STARTUP_POLL_INTERVAL": "0.2",
        "SENTINEL_EXPORTER__PORT": "0",
        "SENTINEL_SCHEDULE__WARMUP_SECONDS": "0",
        "SENTINEL_SCHEDULE__REFERENCE_EXCLUSION_SECONDS": "0",
        "SENTINEL_SCHEDULE__PROFILES": '{"reference": {"interval_seconds": 3600, "run_on_ready": false}}',
        "SENTINEL_CALIBRATION__MAX_CONCURRENCY": "8",
        "SENTINEL_CALIBRATION__STEP_MIN_REQUESTS": "4",
        "SENTINEL_CALIBRATION__INPUT_LEN": "32",
        "SENTINEL_CALIBRATION__OUTPUT_LEN": "32",
        "SENTINEL_CALIBRATION__MAX_REQUESTS": "200",
    }
    settings = load_settings(None, environ=env)
    daemon = Daemon(settings, environ=env)
    await daemon._start()
    try:
        assert daemon.supervisor is not None
        from sglang_sentinel.supervise import ServerState

        await daemon.supervisor.wait_for_state(ServerState.READY, timeout_s=30)
        with capture_logs() as logs:
            assert await asyncio.wait_for(daemon.calibrate(), 90) == "completed"
        events = [e for e in logs if e["event"].startswith("calibration_")]
        # Said when the sweep starts (not only at its end): no stored result yet, so a full one.
        assert events[0]["event"] == "calibration_started"
        assert events[0]["mode"] == "full"
        assert 0 < events[0]["budget_tokens"] <= 200 * 64
        assert events[-1]["event"] == "calibration_done"
        status = daemon.status()
        assert status["schedule"]["recent"][-1]["kind"] == "calibration"
        assert 0 < status["schedule"]["budget"]["spent"] <= 200 * 64
        url = daemon.exporter.url
        async with httpx.AsyncClient(base_url=url, timeout=10) as client:
            latest = (await client.get("/calibration/latest.json")).json()
            metrics = (await client.get("/metrics")).text
        if latest["stop_reason"] in ("saturated", "slo", "max-concurrency"):
            assert latest["saturation_output_throughput"]["value"] > 0
            assert status["capacity"]["output_throughput"] == latest["saturation_output_throughput"]["value"]
            assert 'sentinel_calibration_runs_total{outcome="completed"} 1.0' in metrics
            assert "sentinel_capacity_knee_concurrency" in metrics
        else:
            # A sweep that says nothing about capacity (client-bound on a busy machine) sets no gauge.
            assert 'sentinel_calibration_runs_total{outcome="inconclusive"} 1.0' in metrics
            assert "sentinel_capacity_knee_concurrency" not in metrics
    finally:
        await daemon._shutdown()
    # Capacity survives a daemon restart (reloaded from the calibration store).
    again = Daemon(settings, environ=env)
    again.calibration.restore()
    assert again.calibration.capacity == daemon.calibration.capacity
