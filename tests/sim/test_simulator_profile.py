"""The simulator's /start_profile and /stop_profile, per SGLang version (sglang_sentinel_sim.profiler)."""

from __future__ import annotations

import asyncio
import gzip
import io
import json
from pathlib import Path

import httpx
import pytest

from sglang_sentinel_sim import serve

VERSIONS = ["0.5.9", "0.5.23"]
Captured = io.StringIO


def _names(d: Path) -> list[str]:
    return sorted(p.name for p in d.iterdir())


async def _generate(client: httpx.AsyncClient, n: int = 8) -> None:
    r = await client.post(
        "/generate",
        json={"text": "hello", "sampling_params": {"max_new_tokens": n, "ignore_eos": True}},
    )
    assert r.status_code == 200


@pytest.mark.parametrize("version", VERSIONS)
async def test_start_stop_writes_one_placeholder_trace_per_rank(version: str, tmp_path: Path) -> None:
    err = Captured()
    async with (
        serve(speed=200, startup_time=0, sglang_version=version, tp_size=2, err=err) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        # bench_serving 0.5.23's body (async_request_profile), start_step as a string
        body = {
            "activities": ["CPU", "GPU"],
            "num_steps": None,
            "profile_by_stage": False,
            "profile_stages": None,
            "output_dir": str(tmp_path / "out"),
            "profile_prefix": "run1",
        }
        r = await client.post("/start_profile", json=body)
        assert (r.status_code, r.text) == (200, "Start profiling.\n")
        # a second plain start reaches torch's own check
        if version == "0.5.23":
            again = await client.post("/start_profile", json=body)
            assert (again.status_code, again.text) == (500, "Internal Server Error")
            assert "RuntimeError: Profiler is already enabled on this thread." in err.getvalue()
        await _generate(client)
        r = await client.post("/stop_profile")
        assert (r.status_code, r.text) == (200, "Stop profiling. This will take some time.\n")
        files = _names(tmp_path / "out")
        assert len(files) == 2
        assert [f.split("-TP-")[1] for f in files] == ["0.trace.json.gz", "1.trace.json.gz"]
        assert all(f.startswith("run1-") for f in files)
        trace = json.loads(gzip.decompress((tmp_path / "out" / files[0]).read_bytes()))
        assert trace["traceEvents"] == []
        log = err.getvalue()
        assert f"Profiling starts. Traces will be saved to: {tmp_path / 'out'} (with profile id: " in log
        assert " TP1] Stop profiling..." in log
        assert f"Profiling done. Traces are saved to: {tmp_path / 'out'}" in log
        # nothing running now: SGLang's refusal is a RuntimeError in the route, a bare 500
        r = await client.get("/stop_profile")
        assert (r.status_code, r.text) == (500, "Internal Server Error")
        log = err.getvalue()
        assert "RuntimeError: Profiling is not in progress. Call /start_profile first." in log
        assert "] ERROR:    Exception in ASGI application\nTraceback (most recent call last):" in log
        mixin = "tokenizer_communicator_mixin.py" if version == "0.5.9" else "tokenizer_control_mixin.py"
        assert f'/sglang/srt/managers/{mixin}", line' in log


async def test_0_5_9_second_start_kills_the_scheduler(tmp_path: Path) -> None:
    err = Captured()
    async with (
        serve(speed=200, startup_time=0, sglang_version="0.5.9", err=err) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        assert (await client.post("/start_profile", json={"output_dir": str(tmp_path)})).status_code == 200
        with pytest.raises(httpx.HTTPError):
            await client.post("/start_profile", json={"output_dir": str(tmp_path)})
        await asyncio.wait_for(sim.wait_stopped(), 10)
        assert sim.exit_reason == "crash:profiler"
        log = err.getvalue()
        assert "Scheduler hit an exception: Traceback (most recent call last):" in log
        assert "RuntimeError: Profiler is already enabled on this thread." in log


@pytest.mark.parametrize(("version", "stop_at"), [("0.5.9", 3), ("0.5.23", 4)])
async def test_num_steps_stops_by_itself(version: str, stop_at: int, tmp_path: Path) -> None:
    err = Captured()
    async with (
        serve(speed=50, startup_time=0, sglang_version=version, tp_size=1, err=err) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        at = sim.engine.stats.forward_ct
        r = await client.post("/start_profile", json={"output_dir": str(tmp_path), "num_steps": "3"})
        assert r.status_code == 200
        await _generate(client, 16)
        assert sim.observer.profiler.in_progress is False
        assert len(_names(tmp_path)) == 1
        # the stop came at forward ct + num_steps (0.5.9) or + num_steps + 1 (0.5.23)
        assert sim.observer.profiler.target_ct == at + stop_at
        # already stopped: a manual stop is refused
        assert (await client.post("/stop_profile")).status_code == 500


async def test_start_step_arms_and_refuses_a_second_arm(tmp_path: Path) -> None:
    err = Captured()
    async with (
        serve(speed=50, startup_time=0, sglang_version="0.5.23", tp_size=1, err=err) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        start = sim.engine.stats.forward_ct + 2
        body = {"output_dir": str(tmp_path), "start_step": str(start), "num_steps": "2"}
        assert (await client.post("/start_profile", json=body)).status_code == 200
        assert "Profiling starts" not in err.getvalue()  # armed, not started
        await _generate(client, 16)
        assert "Profiling starts" in err.getvalue()
        assert len(_names(tmp_path)) == 1
        # armed again, then a second armed start while in progress is refused
        body["start_step"] = str(sim.engine.stats.forward_ct + 1)
        body.pop("num_steps")
        assert (await client.post("/start_profile", json=body)).status_code == 200
        await _generate(client, 4)
        r = await client.post("/start_profile", json=body)
        assert r.status_code == 500
        assert "Profiling is already in progress. Call /stop_profile first." in err.getvalue()
        assert (await client.post("/stop_profile")).status_code == 200


async def test_by_stage_writes_extend_and_decode_traces(tmp_path: Path) -> None:
    async with (
        serve(speed=50, startup_time=0, sglang_version="0.5.23", tp_size=1, err=Captured()) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        body = {"output_dir": str(tmp_path), "profile_by_stage": True, "num_steps": 2, "profile_prefix": "p"}
        assert (await client.post("/start_profile", json=body)).status_code == 200
        await _generate(client, 16)
        names = _names(tmp_path)
        assert [n.rsplit("-", 1)[1] for n in names] == ["DECODE.trace.json.gz", "EXTEND.trace.json.gz"]
        assert not sim.observer.profiler.in_progress


@pytest.mark.parametrize("version", VERSIONS)
async def test_mem_activity_writes_a_snapshot_and_bad_fields_are_400(
    version: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a start without output_dir uses the server's SGLANG_TORCH_PROFILER_DIR (else /tmp): keep it here
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path / "env"))
    async with (
        serve(speed=200, startup_time=0, sglang_version=version, tp_size=1, err=Captured()) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        body = {"output_dir": str(tmp_path), "activities": ["MEM"], "profile_prefix": "m"}
        assert (await client.post("/start_profile", json=body)).status_code == 200
        assert (await client.post("/stop_profile")).status_code == 200
        (name,) = _names(tmp_path)
        assert name.endswith("-TP-0-memory.pickle")
        assert name.startswith("m-") == (version == "0.5.23")  # 0.5.9 has no prefix on the snapshot
        # an activity SGLang does not know starts nothing: the stop is then refused
        assert (await client.post("/start_profile", json={"activities": ["FOO"]})).status_code == 200
        assert (await client.post("/stop_profile")).status_code == 500
        assert sim.observer.profiler.output_dir == tmp_path / "env"
        r = await client.post("/start_profile", json={"start_step": "soon"})
        assert r.status_code == 400
        err = r.json()
        assert (err["object"], err["type"], err["code"]) == ("error", "Bad Request", 400)
        assert "'loc': ('body', 'start_step')" in err["message"]
        assert (await client.post("/start_profile", json={"activities": "CPU"})).status_code == 400
        assert (await client.post("/start_profile", json=[1])).status_code == 400
        assert sim.observer.profiler.in_progress is False
