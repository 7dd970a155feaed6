"""Multi-node simulator: rank 0 waits for the other ranks; ranks >= 1 serve SGLang's dummy health
server only; a lost peer ends the survivor with NCCL's watchdog text (docs/sim.md)."""

from __future__ import annotations

import asyncio
import io

import httpx
import pytest

from sglang_sentinel_sim import serve
from sglang_sentinel_sim.config import SimConfig
from sglang_sentinel_sim.follower import DUMMY_STARTED, run_follower
from support.ports import free_port as _free_port
from support.waits import until


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"nnodes": 2}, "--dist-init-addr"),
        ({"nnodes": 2, "node_rank": 2, "dist_init_addr": "127.0.0.1:1"}, "--node-rank"),
        ({"nnodes": 0}, "--nnodes"),
        ({"nnodes": 2, "dist_init_addr": "nohost"}, "--dist-init-addr"),
        ({"nnodes": 2, "dist_init_addr": "h:1", "dist_timeout": 0}, "--dist-timeout"),
    ],
)
def test_bad_multinode_options_name_the_flag(options: dict[str, object], field: str) -> None:
    with pytest.raises(ValueError, match=field):
        SimConfig(**options).validate()  # type: ignore[arg-type]


async def _refused(url: str) -> bool:
    try:
        async with httpx.AsyncClient(timeout=2) as c:
            await c.get(url)
    except httpx.ConnectError:
        return True
    return False


async def test_rank0_ready_only_with_rank1_and_dies_when_rank1_goes() -> None:
    dist = f"127.0.0.1:{_free_port()}"
    dummy_port = _free_port()
    common = {"nnodes": 2, "dist_init_addr": dist, "dist_timeout": 20.0, "speed": 20.0, "startup_time": 2.0}
    log0, log1 = io.StringIO(), io.StringIO()
    async with serve(wait_ready=False, err=log0, **common) as rank0:  # type: ignore[arg-type]
        await asyncio.sleep(0.5)
        # Rank 0 blocks in init_process_group: no API port yet, and never ready alone.
        assert await _refused(rank0.base_url + "/health")
        assert rank0.ready_at is None
        stop = asyncio.Event()
        cfg1 = SimConfig(port=dummy_port, node_rank=1, **common)  # type: ignore[arg-type]
        follower = asyncio.create_task(run_follower(cfg1, err=log1, stop=stop))
        await asyncio.wait_for(rank0.wait_ready(), 20)
        await until(lambda: DUMMY_STARTED in log1.getvalue(), what="the follower's dummy server")
        dummy = f"http://127.0.0.1:{dummy_port}"
        async with httpx.AsyncClient(base_url=dummy, timeout=5) as c:
            for path in ("/health", "/health_generate", "/ping"):
                r = await c.get(path)
                assert (r.status_code, r.content) == (200, b"")
            assert (await c.get("/v1/models")).status_code == 404
            assert (await c.get("/generate")).json() == {"detail": "Not Found"}
            assert (await c.post("/health")).status_code == 405
        # Rank 1 goes away: rank 0 notices only when NCCL's timeout (1 s real here) has passed.
        stop.set()
        assert await asyncio.wait_for(follower, 10) == 0
        await asyncio.wait_for(rank0.wait_stopped(), 10)
        assert "Watchdog caught collective operation timeout" in log0.getvalue()
        assert rank0.exit_reason == "peer_lost:1"


async def test_rank1_gives_up_when_rank0_never_comes() -> None:
    log1 = io.StringIO()
    cfg = SimConfig(
        port=_free_port(),
        nnodes=2,
        node_rank=1,
        dist_init_addr=f"127.0.0.1:{_free_port()}",
        dist_timeout=10.0,
        speed=20.0,
    )
    assert await asyncio.wait_for(run_follower(cfg, err=log1, stop=asyncio.Event()), 10) == 1
    assert "The client socket has timed out after 10000ms while trying to connect to" in log1.getvalue()


async def test_rank1_dies_after_rank0_goes() -> None:
    dist = f"127.0.0.1:{_free_port()}"
    common = {"nnodes": 2, "dist_init_addr": dist, "dist_timeout": 10.0, "speed": 20.0, "startup_time": 1.0}
    log1 = io.StringIO()
    cfg1 = SimConfig(port=_free_port(), node_rank=1, **common)  # type: ignore[arg-type]
    async with serve(wait_ready=False, **common) as rank0:  # type: ignore[arg-type]
        follower = asyncio.create_task(run_follower(cfg1, err=log1, stop=asyncio.Event()))
        await asyncio.wait_for(rank0.wait_ready(), 20)
    assert await asyncio.wait_for(follower, 10) == 1
    assert "Watchdog caught collective operation timeout" in log1.getvalue()
