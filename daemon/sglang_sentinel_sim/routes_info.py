"""SGLang's health and information routes: /health, /health_generate, /ping, /model_info,
/server_info, /v1/models, /v1/loads, /get_load (through 0.5.20), /metrics, /flush_cache, /abort_request."""

from __future__ import annotations

import asyncio
import time
from typing import Any

from aiohttp import web

from sglang_sentinel_sim.engine import Request, RequestState
from sglang_sentinel_sim.generation import ApiBase, json_response, openai_error
from sglang_sentinel_sim.text import make_script
from sglang_sentinel_sim.versions import loads_body

__all__ = ["InfoRoutes"]


class InfoRoutes(ApiBase):
    async def health(self, request: web.Request) -> web.Response:
        srv = self.srv
        if srv.draining:
            srv.log.main("Health check request received during shutdown. Returning 503.")
            return web.Response(status=503)
        if srv.status in ("starting", "warming"):
            return web.Response(status=503)
        if not srv.config.health_generation and request.path == "/health":
            return web.Response(status=200)  # SGLANG_ENABLE_HEALTH_ENDPOINT_GENERATION=false
        tic_unix = time.time()
        tic = time.monotonic()
        probe = Request(
            f"HEALTH_CHECK_{tic_unix}",
            1,
            1,
            make_script("", thinking=False, thinking_tokens=0, prompt_ids=[0]),
            log_metrics=False,
        )
        self.engine.submit(probe)
        timeout = srv.server_seconds(srv.config.health_timeout)
        step = srv.server_seconds(1.0)
        try:
            while time.monotonic() < tic + timeout:
                await asyncio.sleep(step)
                if self.engine.last_output_at > tic:
                    if srv.status == "unhealthy":
                        srv.status = "up"
                    return web.Response(status=200)
        finally:
            self.engine.abort(probe, "health check done")
        last = srv.truth.unix(self.engine.last_output_at)
        srv.log.main(
            "Health check failed. Server couldn't get a response from detokenizer for last "
            f"{srv.config.health_timeout:g} seconds. "
            f"tic start time: {time.strftime('%H:%M:%S', time.localtime(tic_unix))}. "
            f"last_heartbeat time: {time.strftime('%H:%M:%S', time.localtime(last))}"
        )
        if srv.status == "up":
            srv.status = "unhealthy"
        return web.Response(status=503)

    async def ping(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    def _model_info(self) -> dict[str, Any]:
        p = self.profile
        return {
            "model_path": p.model_path,
            "tokenizer_path": p.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": p.model_type,
            "architectures": [p.architecture],
        }

    async def get_model_info(self, request: web.Request) -> web.Response:
        self.srv.log.main(
            "Endpoint '/get_model_info' is deprecated and will be removed in a future version. "
            "Please use '/model_info' instead."
        )
        return json_response(self._model_info())

    async def model_info(self, request: web.Request) -> web.Response:
        return json_response(self._model_info())

    def _server_info(self) -> dict[str, Any]:
        srv = self.srv
        p = self.profile
        args = srv.server_args()
        state: dict[str, Any] = {
            **args,
            "last_gen_throughput": float(getattr(srv.engine.hooks, "last_gen_throughput", 0.0)),
            "memory_usage": {
                "weight": p.weight_mem_gb,
                "kvcache": p.kv_mem_gb,
                "token_capacity": p.max_total_num_tokens,
                "graph": 0.0 if not p.cuda_graph else 1.5,
            },
            "effective_max_running_requests_per_dp": p.max_running_requests,
        }
        if p.mtp_accept_length > 1.0:
            state["avg_spec_accept_length"] = srv.last_accept_length or p.mtp_accept_length
        return {
            **args,
            "status": "ready" if srv.status in ("up", "unhealthy") else "starting",
            "max_total_num_tokens": p.max_total_num_tokens,
            "max_req_input_len": p.context_length - 1,
            "internal_states": [state],
            "version": self.srv.version,
        }

    async def get_server_info(self, request: web.Request) -> web.Response:
        self.srv.log.main(
            "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead."
        )
        return json_response(self._server_info())

    async def server_info(self, request: web.Request) -> web.Response:
        return json_response(self._server_info())

    def _model_card(self) -> dict[str, Any]:
        p = self.profile
        return {
            "id": p.served_model_name,
            "object": "model",
            "created": int(self.srv.launched_at),
            "owned_by": "sglang",
            "root": p.served_model_name,
            "parent": None,
            "max_model_len": p.context_length,
        }

    async def models(self, request: web.Request) -> web.Response:
        return json_response({"object": "list", "data": [self._model_card()]})

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != self.profile.served_model_name:
            return openai_error(f"The model `{name}` does not exist.", 404, "NotFoundError")
        return json_response(self._model_card())

    async def loads(self, request: web.Request) -> web.Response:
        e = self.engine
        gen = float(getattr(e.hooks, "last_gen_throughput", 0.0))
        p = self.profile
        return json_response(
            loads_body(
                self.srv.version,
                running=len(e.running),
                waiting=len(e.waiting),
                kv_used=e.kv_used,
                capacity=e.capacity,
                token_usage=e.token_usage,
                gen_throughput=gen,
                max_running=p.max_running_requests,
                accelerator=p.gpu_name,
                num_accelerators=p.tp_size,
            )
        )

    async def get_load(self, request: web.Request) -> web.Response:
        """The deprecated ``/get_load`` (gone from 0.5.21): one ``GetLoadReqOutput`` per DP rank.

        srt/managers/scheduler_metrics_mixin.py ``get_load``: num_reqs = running + waiting,
        num_tokens = the KV tokens in use plus the waiting requests' prompt lengths; ts_tic is
        the scheduler's perf_counter. ``rid``/``http_worker_ipc`` come from its BaseReq.
        """
        self.srv.log.main(
            "Endpoint '/get_load' is deprecated and will be removed in a future version. "
            "Please use '/v1/loads' instead."
        )
        e = self.engine
        waiting_tokens = sum(r.prompt_tokens + r.generated for r in e.waiting)
        return json_response(
            [
                {
                    "rid": None,
                    "http_worker_ipc": None,
                    "dp_rank": 0,
                    "num_reqs": len(e.running) + len(e.waiting),
                    "num_waiting_reqs": len(e.waiting),
                    "num_tokens": e.kv_used + waiting_tokens,
                    "ts_tic": time.perf_counter(),
                }
            ]
        )

    async def metrics_route(self, request: web.Request) -> web.Response:
        m = self.metrics
        if m is None or self.srv.faults.active("metrics_disabled", time.monotonic()) is not None:
            return json_response({"detail": "Not Found"}, 404)
        return web.Response(
            body=m.render(), headers={"Content-Type": "text/plain; version=0.0.4; charset=utf-8"}
        )

    async def flush_cache(self, request: web.Request) -> web.Response:
        if self.engine.flush_cache():
            return web.Response(
                text="Cache flushed.\nPlease check backend logs for more details. "
                "(When there are running or waiting requests, the operation will not be performed.)\n"
            )
        return web.Response(
            status=400,
            text="Cache flush failed. There are running or waiting requests.\n",
        )

    async def abort_request(self, request: web.Request) -> web.Response:
        body = await self._body(request)
        if isinstance(body, dict) and body.get("abort_all"):
            self.engine.abort_all()
        elif isinstance(body, dict) and isinstance(body.get("rid"), str):
            rid = body["rid"]
            for req in [*self.engine.running, *self.engine.waiting]:
                if req.rid == rid:
                    self.engine.abort(
                        req, "Abort in waiting queue" if req.state == RequestState.WAITING else "Abort"
                    )
        return web.Response(status=200)
