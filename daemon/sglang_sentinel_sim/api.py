"""SGLang's HTTP API, as v0.5.9 serves it (routes, bodies, SSE framing, auth, status codes).

Laid out as SGLang's own server is: the information routes (routes_info), the native /generate
(routes_native) and the OpenAI-compatible routes (routes_openai), all on one request prelude and
one streaming driver (generation). This module adds what wraps every route: auth, the HTTP
metrics, the access log, and the app itself.
"""

from __future__ import annotations

import hmac
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING

from aiohttp import web

from sglang_sentinel_sim.generation import ACTIVE_KEY, ARRIVAL_KEY, RECEIVED_KEY, json_response
from sglang_sentinel_sim.routes_info import InfoRoutes
from sglang_sentinel_sim.routes_native import NativeRoutes
from sglang_sentinel_sim.routes_openai import OpenAIRoutes
from sglang_sentinel_sim.routes_profile import ProfileRoutes
from sglang_sentinel_sim.rxtime import receive_time
from sglang_sentinel_sim.versions import has

if TYPE_CHECKING:
    from sglang_sentinel_sim.context import SimContext
    from sglang_sentinel_sim.profiler import SimProfiler

__all__ = ["build_api_app"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class SGLangApi(InfoRoutes, NativeRoutes, OpenAIRoutes, ProfileRoutes):
    def __init__(self, srv: SimContext, profiler: SimProfiler) -> None:
        super().__init__(srv)
        self.profiler = profiler

    # ---- middleware --------------------------------------------------------------------------
    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        request[ARRIVAL_KEY] = self.engine.clock()
        transport = request.transport
        if transport is not None:
            # The engine clock is time.monotonic (SimServer builds it so), as receive_time's is.
            received = receive_time(transport.get_extra_info("socket"))
            if received is not None:
                request[RECEIVED_KEY] = received
        path = request.path
        method = request.method
        if (
            self.api_key is not None
            and method != "OPTIONS"
            and not path.startswith("/health")
            and not path.startswith("/metrics")
            and not self._authorized(request)
        ):
            resp: web.StreamResponse = json_response({"error": "Unauthorized"}, 401)
            self._count(request, path, method, resp.status, counted_active=False)
            return resp
        m = self.metrics
        if m is not None:
            m.http_requests.labels(path, method).inc()
            m.http_active.labels(path, method).inc()
            request[ACTIVE_KEY] = True
        try:
            resp = await handler(request)
        except web.HTTPMethodNotAllowed:
            resp = json_response({"detail": "Method Not Allowed"}, 405)
        except web.HTTPNotFound:
            resp = json_response({"detail": "Not Found"}, 404)
        except web.HTTPException as exc:
            resp = json_response({"detail": exc.reason}, exc.status)
        finally:
            if m is not None and request.get(ACTIVE_KEY):
                m.http_active.labels(path, method).dec()
                request[ACTIVE_KEY] = False
        self._count(request, path, method, resp.status, counted_active=True)
        return resp

    def _count(
        self, request: web.Request, path: str, method: str, status: int, *, counted_active: bool
    ) -> None:
        m = self.metrics
        if m is not None:
            if not counted_active:
                m.http_requests.labels(path, method).inc()
            m.http_responses.labels(path, str(status), method).inc()
        peer = request.transport.get_extra_info("peername") if request.transport is not None else None
        peer_s = f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) and len(peer) >= 2 else "-"
        self.srv.log.access(peer_s, method, request.path_qs, status)

    def _authorized(self, request: web.Request) -> bool:
        header = request.headers.get("Authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or self.api_key is None:
            return False
        return hmac.compare_digest(token.strip().encode(), self.api_key.encode())


async def _uvicorn_server_header(request: web.Request, response: web.StreamResponse) -> None:
    # SGLang answers through uvicorn; clients and proxies see "server: uvicorn".
    response.headers["Server"] = "uvicorn"


def build_api_app(srv: SimContext, profiler: SimProfiler) -> web.Application:
    api = SGLangApi(srv, profiler)
    app = web.Application(middlewares=[api.middleware], client_max_size=64 * 1024 * 1024)
    app.on_response_prepare.append(_uvicorn_server_header)
    r = app.router
    r.add_get("/health", api.health)
    r.add_get("/health_generate", api.health)
    r.add_get("/ping", api.ping)
    r.add_get("/get_model_info", api.get_model_info)
    r.add_get("/model_info", api.model_info)
    r.add_get("/get_server_info", api.get_server_info)
    r.add_get("/server_info", api.server_info)
    r.add_get("/v1/models", api.models)
    r.add_get("/v1/models/{model:.+}", api.model)
    r.add_get("/v1/loads", api.loads)
    if not has("http.get_load_removed", srv.version):
        r.add_get("/get_load", api.get_load)  # removed in 0.5.21 (http_server.py): a 404 from there
    r.add_get("/metrics", api.metrics_route)
    r.add_post("/generate", api.generate)
    r.add_put("/generate", api.generate)
    r.add_post("/v1/chat/completions", api.chat_completions)
    r.add_post("/v1/completions", api.completions)
    r.add_get("/flush_cache", api.flush_cache)
    r.add_post("/flush_cache", api.flush_cache)
    r.add_post("/abort_request", api.abort_request)
    for path, handler in (("/start_profile", api.start_profile), ("/stop_profile", api.stop_profile)):
        r.add_get(path, handler)
        r.add_post(path, handler)
    return app
