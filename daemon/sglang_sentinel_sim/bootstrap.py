"""The prefill role's bootstrap server (``--disaggregation-bootstrap-port``): what it serves is
described in :mod:`sglang_sentinel_sim.disagg`.

Its own module so that building ``sentinel sim``'s argument parser (``disagg.add_arguments``)
imports no HTTP server (tests/cli/test_cli_startup.py).
"""

from __future__ import annotations

from aiohttp import web

__all__ = ["BootstrapServer"]


class BootstrapServer:
    """The prefill role's bootstrap server, with the simulator's one rank registered."""

    def __init__(self, host: str, port: int, *, http_port: int, page_size: int, kv_cache_dtype: str) -> None:
        self.host, self.port = host, port
        # The rank's transfer-engine address: nothing listens there (no KV is ever sent).
        self._rank = {"rank_ip": host, "rank_port": port + 1}
        self._layout = {"page_size": page_size, "kv_cache_dtype": kv_cache_dtype}
        self._http_port = http_port
        self._room_to_dp_rank: dict[int, int] = {}
        self._runner: web.AppRunner | None = None

    async def start(self) -> None:
        app = web.Application()
        app.router.add_route("*", "/route", self._route)
        app.router.add_post("/register_dp_rank", self._register_dp_rank)
        app.router.add_post("/query_dp_ranks", self._query_dp_ranks)
        app.router.add_get("/health", self._health)
        runner = web.AppRunner(app, handle_signals=False, access_log=None, shutdown_timeout=0.1)
        await runner.setup()
        await web.TCPSite(runner, self.host, self.port).start()
        self._runner = runner

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _health(self, request: web.Request) -> web.Response:
        return web.Response(text="OK", status=200)

    async def _route(self, request: web.Request) -> web.Response:
        if request.method == "PUT":
            return web.Response(text="OK", status=200)  # another rank registering: accepted
        if request.method != "GET":
            return web.Response(text="Method not allowed", status=405, content_type="application/json")
        q = request.query
        keys = ("prefill_dp_rank", "prefill_cp_rank", "target_tp_rank", "target_pp_rank")
        if not all(q.get(k) for k in keys):
            return web.Response(text="Missing inputs for bootstrap server.", status=400)
        try:
            ranks = [int(q[k]) for k in keys]
        except ValueError:
            return web.Response(text="Missing inputs for bootstrap server.", status=400)
        if ranks == [-1, -1, -1, -1]:
            # PrefillServerInfo of a TP-1 (attention) rank, fields in its order.
            return web.json_response(
                {
                    "attn_tp_size": 1,
                    "attn_cp_size": 1,
                    "dp_size": 1,
                    "pp_size": 1,
                    **self._layout,
                    "follow_bootstrap_room": True,
                    "enable_dsa_cache_layer_split": False,
                    "enable_kv_cache_sharding": False,
                    "prefill_http_port": self._http_port,
                    "decode_allocation_policy": "early",
                }
            )
        if ranks != [0, 0, 0, 0]:
            dp, cp, tp, pp = ranks
            return web.Response(
                text=f"Bootstrap info not found for dp_rank={dp} cp_rank={cp} tp_rank={tp} pp_rank={pp}",
                status=404,
            )
        return web.json_response(self._rank)

    async def _register_dp_rank(self, request: web.Request) -> web.Response:
        try:
            data = await request.json()
            self._room_to_dp_rank[int(data["bootstrap_room"])] = int(data["dp_rank"])
        except (ValueError, KeyError, TypeError):
            return web.Response(text="bad request", status=400)  # SGLang would raise: a 500
        return web.Response(text="OK", status=200)

    async def _query_dp_ranks(self, request: web.Request) -> web.Response:
        try:
            rooms = [int(r) for r in (await request.json())["bootstrap_rooms"]]
        except (ValueError, KeyError, TypeError):
            return web.Response(text="bad request", status=400)
        known = {str(r): self._room_to_dp_rank[r] for r in rooms if r in self._room_to_dp_rank}
        return web.json_response(known)
