"""End to end on the simulator: a launch that answers garbage falls back to one that answered right.

The simulator's GLM-5-NVFP4 profile on 8 simulated RTX PRO 6000 (SM120) answers NaN-style
garbage for the known-bad flashmla DSA backends (launch_facts glm5.sm120.flashmla_garbage) and
right for trtllm + bf16 (the deployment's launch for 0.5.9). A good life is recorded known-good;
an edited profile with the bad backends then fails its canaries, and the supervisor relaunches
the recorded configuration within the window, once; a sentinel restarted mid-incident keeps it;
``reset --configured`` goes back; garbage under every configuration ends in ``failed``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.supervise import ServerState, Supervisor
from sglang_sentinel.supervise.fallback import FALLBACK_FILE
from sglang_sentinel.supervise.settings import ServerSettings
from support.daemon_proc import free_port
from support.fallback_reads import records, value
from support.waits import until

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("no_leaked_children")]

Fast = Callable[..., ServerSettings]
GOOD = ("trtllm", "trtllm")
BAD = ("flashmla_sparse", "flashmla_kv")


def settings(fast: Fast, port: int, backends: tuple[str, str], **fallback: Any) -> ServerSettings:
    profile = {
        "kind": "sim",
        "extra_args": [
            "--speed", "100", "--lifetime", "300",
            "--profile", "glm5-nvfp4-8x-rtxpro6000", "--sglang-version", "0.5.9",
            "--nsa-prefill-backend", backends[0], "--nsa-decode-backend", backends[1],
            "--kv-cache-dtype", "bfloat16",
        ],
    }  # fmt: skip
    return fast(
        port,
        profile="glm5sim",
        profiles={"glm5sim": profile},
        restart={"max_restarts": 3, "window": 60.0},
        fallback={"enabled": True, "failures": 2, "window": 60.0, "good_after": 0.5, **fallback},
    )


async def record_good_life(fast: Fast, state: Path, port: int) -> str:
    sup = Supervisor(settings(fast, port, GOOD), state_dir=state)
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.READY, timeout_s=30)
        await until(lambda: bool(records(state)), what="a known-good record")
        rec = records(state)[0]
        assert rec["sglang_version"] == "0.5.9"  # as the server reported it (/server_info)
        assert "trtllm" in rec["argv"]
        assert rec["first_good"] <= rec["last_good"]
        return sup.config_hash
    finally:
        await sup.stop()


async def test_garbage_after_a_good_config_falls_back_once_and_survives_a_sentinel_restart(
    fast: Fast, tmp_path: Path
) -> None:
    state, port = tmp_path / "state", free_port()
    good_hash = await record_good_life(fast, state, port)
    sup = Supervisor(settings(fast, port, BAD), state_dir=state)
    t0 = time.monotonic()
    await sup.start()
    try:
        configured_hash = sup.config_hash
        assert configured_hash != good_hash
        await until(lambda: sup.fallback.active, what="the fallback")
        assert time.monotonic() - t0 < 60  # within the window
        await sup.wait_for_state(ServerState.READY, timeout_s=30)
        assert sup.config_hash == good_hash  # the recorded argv, this port
        # The fallback's canaries pass: several rounds, no further fallback.
        for probe in ("canary_arithmetic", "canary_is_prime"):
            await until(lambda p=probe: value(sup, "sentinel_probe_success", probe=p) == 1.0)  # type: ignore[misc]
        snap = sup.snapshot()
        assert snap.state is ServerState.READY
        assert value(sup, "sentinel_server_fallback_total", reason="garbage") == 1
        assert value(sup, "sentinel_server_fallback_total", reason="nan_in_sampler") == 0
        info = {"source": "fallback", "config_hash": good_hash, "configured_hash": configured_hash}
        assert value(sup, "sentinel_server_config_info", **info) == 1
        fb = snap.fallback
        assert fb is not None
        assert fb.origin == "history"
        assert any("flashmla" in d and "trtllm" in d for d in fb.differences), fb.differences
        assert "garbage" in fb.example or "NaN" in fb.example, fb.example
        assert [life["source"] for life in fb.lives][-1] == "fallback"
        assert (state / FALLBACK_FILE).is_file()
    finally:
        await sup.stop()
    # sentinel restarted mid-incident: the decision holds, the fallback is launched at once.
    again = Supervisor(settings(fast, port, BAD), state_dir=state)
    await again.start()
    try:
        await again.wait_for_state(ServerState.READY, timeout_s=30)
        assert again.config_hash == good_hash
        assert again.fallback.active
        lives = json.loads((state / "server-lives.json").read_text())["lives"]
        assert lives[-1]["argv_hash"] == good_hash
        assert lives[-1]["source"] == "fallback"
        # The operator's way back: the configured (bad) launch again, a new incident later.
        again.reset(configured=True)
        await until(lambda: again.config_hash == configured_hash, what="the configured launch")
        assert again.fallback.view().source == "configured"
        assert not (state / FALLBACK_FILE).is_file() or "flags" not in (state / FALLBACK_FILE).read_text()
        assert value(again, "sentinel_server_config_info", source="configured", config_hash=configured_hash,
                     configured_hash=configured_hash) == 1  # fmt: skip
    finally:
        await again.stop()


@pytest.mark.slow(seconds=22)
async def test_garbage_under_every_configuration_ends_in_failed_not_a_loop(
    fast: Fast, tmp_path: Path
) -> None:
    state, port = tmp_path / "state", free_port()
    # The recorded configuration answers right for 3 s (300 server seconds at --speed 100), long
    # enough to be recorded, then garbage (the simulator's fault, part of its argv): so does its
    # fallback life, and every life after it.
    fade = ("--fault", "garbage:style=bang,after=300")
    good = settings(fast, port, GOOD, good_after=0.3)
    good = good.model_copy(
        update={"profiles": {"glm5sim": good.profiles["glm5sim"].model_copy(
            update={"extra_args": (*good.profiles["glm5sim"].extra_args, *fade)})}}
    )  # fmt: skip
    sup = Supervisor(good, state_dir=state)
    await sup.start()
    try:
        await until(lambda: bool(records(state)), what="a known-good record")
    finally:
        await sup.stop()
    sup = Supervisor(settings(fast, port, BAD), state_dir=state)
    await sup.start()
    try:
        await until(lambda: sup.fallback.active, what="the fallback")
        await sup.wait_for_state(ServerState.FAILED, timeout_s=90)
        assert value(sup, "sentinel_server_fallback_total", reason="garbage") == 1  # never a second
        fb = sup.snapshot().fallback
        assert fb is not None
        assert fb.source == "fallback"
        assert fb.exhausted == "fallback failing too"
        assert all("fault" in " ".join(life["argv"]) for life in fb.lives if life["source"] == "fallback")
    finally:
        await sup.stop()
