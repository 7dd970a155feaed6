"""Prefill/decode disaggregation roles: ``--disaggregation-mode prefill|decode``.

What SGLang does (0.5.9 ``srt/server_args.py``, 0.5.23 ``srt/disaggregation/``), and what the
simulator keeps of it:

- ``--disaggregation-mode null|prefill|decode`` (default null), ``--disaggregation-bootstrap-port``
  (default 8998), ``--disaggregation-transfer-backend`` (default mooncake; ``fake`` is SGLang's
  test backend). All three appear in ``/server_info`` as server args.
- A prefill server runs a *bootstrap server* on the bootstrap port (aiohttp,
  ``disaggregation/common/conn.py`` ``CommonKVBootstrapServer``): ``GET /health`` "OK";
  ``/route`` PUT registers a prefill rank, GET answers a decode server's lookup (400 "Missing
  inputs for bootstrap server." without its four query parameters, 503 until every rank
  registered); POST ``/register_dp_rank`` and ``/query_dp_ranks`` (room -> DP rank). The simulator
  has its one rank registered from the start and answers those routes in the same shapes;
  nothing is ever transferred.
- Both roles refuse a generation request without ``bootstrap_room`` (unless the transfer
  backend is ``fake``): 400, "Invalid request: Disaggregated request received without bootstrap
  room id." (``managers/scheduler.py``). A router in PD mode adds ``bootstrap_host``,
  ``bootstrap_port`` and ``bootstrap_room`` to the request it sends to *both* servers.
- The prefill server runs the prompt with ``max_new_tokens = 1`` (``PrefillBootstrapQueue
  ._process_req``) and, once the KV cache is sent, finishes it as ``FINISH_LENGTH(length=0)``.
  The simulator finishes it right after its prefill (no transfer to wait for).
- The decode server receives the prompt's KV instead of computing it: the simulator admits the
  prompt as if its KV were cached (all but the last token, which SGLang always recomputes), then
  decodes as usual.

Not simulated: the KV transfer itself (mooncake/nixl queues, their timings and failures), the
PD-specific scheduler log fields and queue gauges, a decode server's lookup of the prefill's
bootstrap server.
"""

from __future__ import annotations

import argparse
from typing import Any

from aiohttp import web

__all__ = [
    "MODES",
    "NO_ROOM_MESSAGE",
    "BootstrapServer",
    "add_arguments",
    "config_options",
    "missing_room",
]

MODES = ("null", "prefill", "decode")
NO_ROOM_MESSAGE = "Invalid request: Disaggregated request received without bootstrap room id."


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--disaggregation-mode", choices=MODES, default="null", help="PD role (default null)")
    group.add_argument(
        "--disaggregation-bootstrap-port",
        type=int,
        default=8998,
        help="prefill role: the bootstrap server's port (default 8998)",
    )
    group.add_argument(
        "--disaggregation-transfer-backend", default="mooncake", help="mooncake, nixl, fake, ..."
    )


def config_options(args: argparse.Namespace) -> dict[str, Any]:
    """The SimConfig fields of these flags."""
    return {
        "disaggregation_mode": args.disaggregation_mode,
        "disaggregation_bootstrap_port": args.disaggregation_bootstrap_port,
        "disaggregation_transfer_backend": args.disaggregation_transfer_backend,
    }


def missing_room(body: object, mode: str, backend: str) -> bool:
    """A disaggregated server's refusal of a request that carries no bootstrap room."""
    if mode == "null" or backend == "fake" or not isinstance(body, dict):
        return False
    room = body.get("bootstrap_room")
    if isinstance(room, list):
        return not room or any(r is None for r in room)
    return room is None


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
