"""The simulator's /get_load (0.5.9 only) and its prefill/decode disaggregation roles."""

from __future__ import annotations

import asyncio
import io
import subprocess
import sys
import time

import httpx
import pytest

from sglang_sentinel_sim import serve
from sglang_sentinel_sim.disagg import NO_ROOM_MESSAGE
from support.ports import free_port
from support.waits import DEADLINE_S

ROOM = {"bootstrap_host": "127.0.0.1", "bootstrap_port": 8998, "bootstrap_room": 12345}


async def test_get_load_is_0_5_9s_deprecated_route_in_its_shape() -> None:
    err = io.StringIO()
    async with (
        serve(speed=200, sglang_version="0.5.9", err=err) as sim,
        httpx.AsyncClient(base_url=sim.base_url) as c,
    ):
        reply = (await c.get("/get_load")).json()
    # GetLoadReqOutput per DP rank, BaseReq's fields first (dataclasses.asdict order).
    assert list(reply[0]) == [
        "rid",
        "http_worker_ipc",
        "dp_rank",
        "num_reqs",
        "num_waiting_reqs",
        "num_tokens",
        "ts_tic",
    ]
    assert reply[0]["num_reqs"] == reply[0]["num_waiting_reqs"] == reply[0]["num_tokens"] == 0
    assert "Endpoint '/get_load' is deprecated" in err.getvalue()


async def test_get_load_counts_running_and_waiting_requests() -> None:
    async with (
        serve(speed=20, sglang_version="0.5.9", max_running_requests=2) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as c,
    ):
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 4000, "ignore_eos": True}}
        tasks = [asyncio.create_task(c.post("/generate", json=body)) for _ in range(3)]
        deadline = time.monotonic() + DEADLINE_S  # (an HTTP read per try: not a plain condition)
        while True:
            load = (await c.get("/get_load")).json()[0]
            if (load["num_reqs"], load["num_waiting_reqs"]) == (3, 1) or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.02)
        assert (load["num_reqs"], load["num_waiting_reqs"]) == (3, 1)
        assert load["num_tokens"] > 0
        await c.post("/abort_request", json={"abort_all": True})
        await asyncio.gather(*tasks, return_exceptions=True)


async def test_get_load_is_gone_in_0_5_23() -> None:
    async with (
        serve(speed=200, sglang_version="0.5.23") as sim,
        httpx.AsyncClient(base_url=sim.base_url) as c,
    ):
        reply = await c.get("/get_load")
    assert reply.status_code == 404
    assert reply.json() == {"detail": "Not Found"}


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
async def test_prefill_role_serves_a_bootstrap_server_and_stops_after_the_first_token(version: str) -> None:
    bport = free_port()
    async with (
        serve(
            speed=200,
            sglang_version=version,
            disaggregation_mode="prefill",
            disaggregation_bootstrap_port=bport,
            enable_metrics=True,
        ) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as c,
    ):
        # The warm-up made one token too (as every request of a prefill server does).
        metrics = (await c.get("/metrics")).text
        gen = [ln for ln in metrics.splitlines() if ln.startswith("sglang:generation_tokens_total")]
        assert gen
        assert all(ln.endswith(" 1.0") for ln in gen), gen
        info = (await c.get("/server_info")).json()
        assert (info["disaggregation_mode"], info["disaggregation_bootstrap_port"]) == ("prefill", bport)
        assert info["disaggregation_transfer_backend"] == "mooncake"
        boot = f"http://127.0.0.1:{bport}"
        assert (await c.get(boot + "/health")).text == "OK"
        missing = await c.get(boot + "/route")
        assert (missing.status_code, missing.text) == (400, "Missing inputs for bootstrap server.")
        q = {"prefill_dp_rank": "-1", "prefill_cp_rank": "-1", "target_tp_rank": "-1", "target_pp_rank": "-1"}
        server_info = (await c.get(boot + "/route", params=q)).json()
        assert server_info["prefill_http_port"] == sim.port
        assert server_info["page_size"] == sim.profile.page_size
        rank = (await c.get(boot + "/route", params=dict.fromkeys(q, "0"))).json()
        assert set(rank) == {"rank_ip", "rank_port"}
        assert (
            await c.post(boot + "/register_dp_rank", json={"bootstrap_room": 7, "dp_rank": 0})
        ).text == "OK"
        assert (await c.post(boot + "/query_dp_ranks", json={"bootstrap_rooms": [7, 8]})).json() == {"7": 0}

        # No bootstrap room: refused, in the route's error format.
        native = await c.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 50}})
        assert native.status_code == 400
        assert NO_ROOM_MESSAGE in native.text
        chat = {"model": "glm-5", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 50}
        oai = await c.post("/v1/chat/completions", json=chat)
        assert oai.status_code == 400
        assert NO_ROOM_MESSAGE in oai.json()["message"]

        # With one: the prompt, then one token, finished as FINISH_LENGTH(length=0).
        body = {"text": "hello there", "sampling_params": {"max_new_tokens": 50}, **ROOM}
        out = (await c.post("/generate", json=body)).json()
        assert out["meta_info"]["completion_tokens"] == 1
        assert out["meta_info"]["finish_reason"] == {"type": "length", "length": 0}
        done = (await c.post("/v1/chat/completions", json={**chat, **ROOM})).json()
        assert done["usage"]["completion_tokens"] == 1
    async with httpx.AsyncClient(timeout=2) as after:
        with pytest.raises(httpx.ConnectError):  # the bootstrap server stops with the server
            await after.get(f"http://127.0.0.1:{bport}/health")


async def test_decode_role_generates_from_a_transferred_prompt() -> None:
    async with (
        serve(speed=200, disaggregation_mode="decode") as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as c,
    ):
        refused = await c.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 5}})
        assert refused.status_code == 400
        prompt = " ".join(["word"] * 200)
        body = {"text": prompt, "sampling_params": {"max_new_tokens": 40, "ignore_eos": True}, **ROOM}
        meta = (await c.post("/generate", json=body)).json()["meta_info"]
        assert meta["completion_tokens"] == 40
        assert meta["finish_reason"] == {"type": "length", "length": 40}
        # The prompt's KV arrived from the prefill server: all but its last token are not recomputed.
        assert meta["cached_tokens"] == meta["prompt_tokens"] - 1
        assert (await c.get("/server_info")).json()["disaggregation_mode"] == "decode"


async def test_the_fake_transfer_backend_needs_no_room() -> None:
    async with (
        serve(speed=200, disaggregation_mode="decode", disaggregation_transfer_backend="fake") as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as c,
    ):
        ok = await c.post("/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 3}})
    assert ok.status_code == 200


def test_disaggregation_flags_are_checked() -> None:
    def check(*args: str) -> subprocess.CompletedProcess[str]:
        cmd = [sys.executable, "-m", "sglang_sentinel_sim", "--check-args", *args]
        return subprocess.run(cmd, capture_output=True, text=True, timeout=60)

    assert (
        check("--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "9100").returncode == 0
    )
    bad = check("--disaggregation-mode", "both")
    assert bad.returncode == 2
    assert "--disaggregation-mode" in bad.stderr
    same = check(
        "--port", "9100", "--disaggregation-mode", "prefill", "--disaggregation-bootstrap-port", "9100"
    )
    assert same.returncode == 2
    assert "--disaggregation-bootstrap-port 9100" in same.stderr
