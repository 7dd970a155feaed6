"""A simulated SGLang node of rank ≥ 1 (``--nnodes N --node-rank K``, K ≥ 1).

What real SGLang does there (srt/entrypoints/engine.py, node_rank >= 1; srt/utils/common.py
``launch_dummy_health_check_server``): no tokenizer, no API. The schedulers join rank 0's
torch.distributed rendezvous, load their shard, and once they are ready the main process starts
a *dummy* health server on ``--host:--port``: ``GET /ping``, ``/health`` and ``/health_generate``
answer 200 with an empty body, unconditionally (they check nothing), ``/metrics`` with
``--enable-metrics``; everything else is FastAPI's 404 (405 for another method); uvicorn at log
level warning (no access lines). It logs ``Dummy health check server started in background
thread at HOST:PORT``. From 0.5.21 (``versions.BEHAVIOURS`` multinode.sigterm_waits) SGLang ignores
SIGTERM there (it logs that it waits for rank 0's ShutdownReq broadcast); before, it has no handler,
so SIGTERM ends it at once.

The rendezvous is the simulator's own (:mod:`sglang_sentinel_sim.rendezvous`); losing rank 0 ends this
node after the NCCL timeout, as a collective with a dead peer would.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, TextIO

from aiohttp import web

from sglang_sentinel_sim.rendezvous import DEFAULT_TIMEOUT_S, join, nccl_timeout_line, parse_dist_init_addr
from sglang_sentinel_sim.sglang_log import SGLangLog
from sglang_sentinel_sim.versions import has

if TYPE_CHECKING:
    from sglang_sentinel_sim.config import SimConfig

__all__ = ["DUMMY_STARTED", "build_dummy_app", "run_follower"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
DUMMY_STARTED = "Dummy health check server started in background thread at"


def build_dummy_app(enable_metrics: bool) -> web.Application:
    """The dummy health server's routes, exactly: 200 and nothing else to say."""

    async def ok(request: web.Request) -> web.StreamResponse:
        return web.Response(status=200, headers={"Server": "uvicorn"})

    async def metrics(request: web.Request) -> web.StreamResponse:
        # This node's schedulers are not TP0: without --enable-metrics-for-all-schedulers nothing
        # of theirs is in the multiprocess registry.
        return web.Response(text="", content_type="text/plain", headers={"Server": "uvicorn"})

    @web.middleware
    async def fastapi_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPMethodNotAllowed:
            return web.json_response({"detail": "Method Not Allowed"}, status=405)
        except web.HTTPNotFound:
            return web.json_response({"detail": "Not Found"}, status=404)

    app = web.Application(middlewares=[fastapi_errors])
    for path in ("/ping", "/health", "/health_generate"):
        app.router.add_get(path, ok, allow_head=False)
    if enable_metrics:
        app.router.add_get("/metrics", metrics, allow_head=False)
    return app


async def run_follower(
    config: SimConfig,
    on_fatal: Callable[[], None] | None = None,
    *,
    err: TextIO | None = None,
    stop: asyncio.Event | None = None,
) -> int:
    """Run rank ``config.node_rank`` until rank 0 goes away, ``stop`` is set (in-process tests) or
    SIGINT (the command, where ``stop`` is None); the exit status."""
    assert config.dist_init_addr is not None
    host, port = parse_dist_init_addr(config.dist_init_addr)
    rank, speed = config.node_rank, config.speed
    timeout = config.dist_timeout if config.dist_timeout is not None else DEFAULT_TIMEOUT_S
    p = config.resolved_profile()
    log = SGLangLog(err, tp_size=p.tp_size, log_ms=config.log_ms, access_log=False)
    # Ranks of this node: tp_size spread over nnodes; the prefix shows the global TP rank.
    per_node = max(1, p.tp_size // config.nnodes)
    ranks = range(rank * per_node, (rank + 1) * per_node)
    loop = asyncio.get_running_loop()
    signals = stop is None
    stop = stop or asyncio.Event()
    if signals and has("multinode.sigterm_waits", config.sglang_version):

        def on_sigterm() -> None:
            log.main(
                f"SIGTERM received on node_rank {rank}; waiting for the rank-0 ShutdownReq broadcast "
                "to stop the schedulers."
            )

        loop.add_signal_handler(signal.SIGTERM, on_sigterm)
    if signals:
        loop.add_signal_handler(signal.SIGINT, stop.set)
    log.main(
        f"server_args=ServerArgs(model_path={p.model_path!r}, tp_size={p.tp_size}, nnodes={config.nnodes}, "
        f"node_rank={rank}, dist_init_addr={config.dist_init_addr!r}, port={config.port})"
    )
    for r in ranks:
        log.rank(r, "Init torch distributed begin.")
    joined = await join(host, port, rank, config.nnodes, timeout / speed)
    if joined is None:
        for r in ranks:
            log.rank(
                r,
                "torch.distributed.DistNetworkError: The client socket has timed out after "
                f"{int(timeout * 1000)}ms while trying to connect to ({host}, {port}).",
            )
        log.main("Received sigquit from a child process. It usually means the child failed.")
        if on_fatal is not None:
            on_fatal()
        return 1
    reader, writer = joined
    avail = p.gpu_mem_gb - 0.6
    for r in ranks:
        log.rank(r, f"Init torch distributed ends. elapsed={0.2:.2f} s, mem usage=0.55 GB")
        log.rank(r, f"Load weight begin. avail mem={avail:.2f} GB")
    lost = asyncio.create_task(reader.read())
    phases = (p.load_weights_s + p.kv_alloc_s) / speed
    done, _ = await asyncio.wait([lost], timeout=phases)
    runner: web.AppRunner | None = None
    if not done:
        for r in ranks:
            log.rank(r, f"Load weight end. elapsed={p.load_weights_s:.2f} s, type={p.architecture}")
            log.rank(
                r, f"KV Cache is allocated. #tokens: {p.max_total_num_tokens}, KV size: {p.kv_mem_gb:.2f} GB"
            )
        runner = web.AppRunner(build_dummy_app(config.enable_metrics), access_log=None, handle_signals=False)
        await runner.setup()
        try:
            await web.TCPSite(runner, config.host, config.port, reuse_address=True).start()
        except OSError as exc:
            log.main(f"Dummy health check server failed to start: {exc}")
        else:
            log.main(f"{DUMMY_STARTED} {config.host}:{config.port}")
        stopping = asyncio.create_task(stop.wait())
        await asyncio.wait([lost, stopping], return_when=asyncio.FIRST_COMPLETED)
        stopping.cancel()
    code = 0
    if lost.done():
        # Rank 0 is gone: the next collective times out, the scheduler dies, the tree goes down.
        await asyncio.sleep(timeout / speed)
        log.rank(ranks[0], nccl_timeout_line(ranks[0], timeout))
        log.main("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        code = 1
    lost.cancel()
    writer.close()
    if runner is not None:
        with contextlib.suppress(Exception):
            await runner.cleanup()
    if code and on_fatal is not None:
        on_fatal()  # SGLang's kill_process_tree: the parent sees signal 9
    return code
