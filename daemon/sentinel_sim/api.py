"""SGLang's HTTP API, as v0.5.9 serves it (routes, bodies, SSE framing, auth, status codes).

The streaming loops are the simulator's hot path: each wakes once per engine step that gave its
request new tokens (or once per ``stream_interval`` tokens), extends the cumulative text by the
new pieces, serializes one chunk, and writes it. Nothing else happens per token.
"""

from __future__ import annotations

import asyncio
import hmac
import json
import time
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any, Final

from aiohttp import web

from sentinel_sim.engine import Request, RequestState
from sentinel_sim.requests import (
    BadRequest,
    GenParams,
    parse_chat,
    parse_completion,
    parse_generate,
    stop_position,
)
from sentinel_sim.rxtime import receive_time
from sentinel_sim.text import EOS_TOKEN_ID, THINK_END, make_script, token_id

if TYPE_CHECKING:
    from sentinel_sim.server import SimServer

__all__ = ["build_api_app"]

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]

# Starlette appends the charset to text/* media types.
_SSE_HEADERS: Final = {"Content-Type": "text/event-stream; charset=utf-8"}
_DONE: Final = b"data: [DONE]\n\n"
_ACTIVE_KEY: Final = web.RequestKey("sim_active", bool)
# Engine-clock time the handler chain was entered, before the body is read and parsed: the start of
# the SGLang-style figures (TokenizerManager stamps created_time on entry too).
_ARRIVAL_KEY: Final = web.RequestKey("sim_arrival", float)
# Kernel receive time of the request's bytes (engine clock), where the socket could tell: the
# ground truth's arrival, so that the simulator's own HTTP queueing (one loop serving hundreds of
# requests that arrive together) counts as the server's time, not as "client-added TTFT".
_RECEIVED_KEY: Final = web.RequestKey("sim_received", float)
# Non-stream requests get intermediate scheduler outputs every 50 tokens (TTFT metric quirk).
_FORCE_STREAM_INTERVAL: Final = 50
_GARBAGE: Final = {"bang": "!", "nan": " NaN", "random": "\ufffd"}


def _dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


def _json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=_dumps(obj), status=status, content_type="application/json")


def _native_error(message: str, status: int = 400) -> web.Response:
    return _json_response({"error": {"message": message}}, status)


def _openai_error(message: str, status: int = 400, err_type: str = "BadRequestError") -> web.Response:
    return _json_response(
        {"object": "error", "message": message, "type": err_type, "param": None, "code": status}, status
    )


class _ChunkClock:
    """Tokenizer-side TTFT/ITL observation per output chunk (SGLang's collect_metrics)."""

    __slots__ = ("created", "last_n", "last_t", "started")

    def __init__(self, created: float) -> None:
        self.created = created
        self.started = False
        self.last_t = created
        self.last_n = 0


class SglangApi:
    def __init__(self, srv: SimServer) -> None:
        self.srv = srv
        self.engine = srv.engine
        self.profile = srv.profile
        self.metrics = srv.metrics
        self.api_key = srv.config.api_key
        self.speed = srv.speed

    # ---- middleware --------------------------------------------------------------------------
    @web.middleware
    async def middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        request[_ARRIVAL_KEY] = self.engine.clock()
        transport = request.transport
        if transport is not None:
            # The engine clock is time.monotonic (SimServer builds it so), as receive_time's is.
            received = receive_time(transport.get_extra_info("socket"))
            if received is not None:
                request[_RECEIVED_KEY] = received
        path = request.path
        method = request.method
        if (
            self.api_key is not None
            and method != "OPTIONS"
            and not path.startswith("/health")
            and not path.startswith("/metrics")
            and not self._authorized(request)
        ):
            resp: web.StreamResponse = _json_response({"error": "Unauthorized"}, 401)
            self._count(request, path, method, resp.status, counted_active=False)
            return resp
        m = self.metrics
        if m is not None:
            m.http_requests.labels(path, method).inc()
            m.http_active.labels(path, method).inc()
            request[_ACTIVE_KEY] = True
        try:
            resp = await handler(request)
        except web.HTTPMethodNotAllowed:
            resp = _json_response({"detail": "Method Not Allowed"}, 405)
        except web.HTTPNotFound:
            resp = _json_response({"detail": "Not Found"}, 404)
        except web.HTTPException as exc:
            resp = _json_response({"detail": exc.reason}, exc.status)
        finally:
            if m is not None and request.get(_ACTIVE_KEY):
                m.http_active.labels(path, method).dec()
                request[_ACTIVE_KEY] = False
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

    def _headers_sent(self, request: web.Request) -> None:
        """Streaming responses leave http_requests_active once headers are out (as SGLang's
        Starlette middleware does)."""
        m = self.metrics
        if m is not None and request.get(_ACTIVE_KEY):
            m.http_active.labels(request.path, request.method).dec()
            request[_ACTIVE_KEY] = False

    # ---- health and info ---------------------------------------------------------------------
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
        return _json_response(self._model_info())

    async def model_info(self, request: web.Request) -> web.Response:
        return _json_response(self._model_info())

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
            "version": "0.5.9",
        }

    async def get_server_info(self, request: web.Request) -> web.Response:
        self.srv.log.main(
            "Endpoint '/get_server_info' is deprecated and will be removed in a future version. "
            "Please use '/server_info' instead."
        )
        return _json_response(self._server_info())

    async def server_info(self, request: web.Request) -> web.Response:
        return _json_response(self._server_info())

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
        return _json_response({"object": "list", "data": [self._model_card()]})

    async def model(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        if name != self.profile.served_model_name:
            return _openai_error(f"The model `{name}` does not exist.", 404, "NotFoundError")
        return _json_response(self._model_card())

    async def loads(self, request: web.Request) -> web.Response:
        e = self.engine
        hooks = e.hooks
        gen = float(getattr(hooks, "last_gen_throughput", 0.0))
        running = len(e.running)
        waiting = len(e.waiting)
        load = {
            "dp_rank": 0,
            "num_running_reqs": running,
            "num_waiting_reqs": waiting,
            "num_used_tokens": e.kv_used,
            "max_total_num_tokens": e.capacity,
            "token_usage": round(e.token_usage, 4),
            "gen_throughput": round(gen, 2),
            "cache_hit_rate": 0.0,
            "utilization": round(e.token_usage, 4),
            "max_running_requests": self.profile.max_running_requests,
            "num_total_reqs": running + waiting,
        }
        return _json_response(
            {
                "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime()) + "Z",
                "version": "0.5.9",
                "dp_rank_count": 1,
                "loads": [load],
                "aggregate": {
                    "total_running_reqs": running,
                    "total_waiting_reqs": waiting,
                    "total_reqs": running + waiting,
                    "avg_token_usage": load["token_usage"],
                    "avg_throughput": load["gen_throughput"],
                    "avg_utilization": load["utilization"],
                },
            }
        )

    async def metrics_route(self, request: web.Request) -> web.Response:
        m = self.metrics
        if m is None or self.srv.faults.active("metrics_disabled", time.monotonic()) is not None:
            return _json_response({"detail": "Not Found"}, 404)
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

    # ---- generation --------------------------------------------------------------------------
    async def _body(self, request: web.Request) -> object:
        try:
            raw = await request.read()
            return json.loads(raw) if raw else {}
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"invalid JSON body: {exc}") from None

    def _storm(self) -> web.Response | None:
        fault = self.srv.faults.active("http_503", time.monotonic())
        if fault is not None and fault.pick():
            return _json_response({"error": {"message": "Service Unavailable"}}, 503)
        return None

    def _make_request(self, gp: GenParams, script_key: str, thinking: bool) -> Request:
        p = self.profile
        script = make_script(
            script_key, thinking=thinking, thinking_tokens=p.thinking_tokens, prompt_ids=gp.prompt_ids
        )
        stop = None
        if gp.stop:
            limit = gp.max_new_tokens if gp.ignore_eos else min(gp.max_new_tokens, script.natural_len)
            stop = stop_position(script.pieces(limit), gp.stop, limit)
        return Request(
            gp.rid,
            gp.prompt_tokens,
            gp.max_new_tokens,
            script,
            prompt_key=gp.prompt or ",".join(map(str, gp.prompt_ids)),
            ignore_eos=gp.ignore_eos,
            min_new_tokens=gp.min_new_tokens,
            stop_at=stop[0] if stop else None,
            stop_text=stop[1] if stop else None,
            log_metrics=gp.log_metrics,
        )

    def _pieces_text(self, req: Request, start: int, end: int) -> str:
        if req.finish_matched == EOS_TOKEN_ID:
            end = min(end, req.script.natural_len)  # the EOS token itself has no text
        if start >= end:
            return ""
        fault = self.srv.faults.active("garbage", time.monotonic())
        if fault is not None:
            return _GARBAGE[fault.text("style")] * (end - start)
        return "".join(req.script.slice(start, end))

    @staticmethod
    def _ids(req: Request, start: int, end: int) -> list[int]:
        ids = [token_id(piece) for piece in req.script.slice(start, end)]
        if req.finish_matched == EOS_TOKEN_ID and end > req.script.natural_len >= start:
            ids[req.script.natural_len - start] = EOS_TOKEN_ID
        return ids

    def _chunk_written(self, clock: _ChunkClock, req: Request, n: int) -> None:
        """A stream chunk holding ``n`` tokens was handed to the transport."""
        now = time.monotonic()
        if not req.first_written_at and n > 0:
            # Ground truth of the response leg: engine's first token -> the simulator wrote it.
            req.first_written_at = now
        self._observe_chunk(clock, n, now, req.log_metrics)

    def _observe_chunk(self, clock: _ChunkClock, n: int, now: float, log_metrics: bool) -> None:
        m = self.metrics
        if m is None or not log_metrics:
            return
        if not clock.started:
            clock.started = True
            m.ttft.observe(now - clock.created)
        elif n > clock.last_n:
            m.observe_itl(now - clock.last_t, n - clock.last_n)
        clock.last_t = now
        clock.last_n = n

    def _fault_plan(self, stream: bool) -> tuple[str | None, int]:
        if not stream:
            return None, 0
        now = time.monotonic()
        for name in ("error_chunk", "malformed_sse"):
            fault = self.srv.faults.active(name, now)
            if fault is not None and fault.pick():
                return name, max(1, int(fault.num("tokens")))
        return None, 0

    def _submit(self, req: Request, request: web.Request) -> None:
        self.engine.submit(req, request.get(_ARRIVAL_KEY), request.get(_RECEIVED_KEY))

    def _record(self, req: Request, route: str, stream: bool, status: str | None, fault: str | None) -> None:
        if req.log_metrics:
            self.srv.truth.record(req, route=route, stream=stream, status=status, fault=fault)

    async def generate(self, request: web.Request) -> web.StreamResponse:
        storm = self._storm()
        if storm is not None:
            return storm
        try:
            body = await self._body(request)
            items = parse_generate(
                body,
                context_len=self.profile.context_length,
                default_stream_interval=self.srv.config.stream_interval,
            )
        except BadRequest as exc:
            self.srv.log.main(f"[http_server] Error: {exc}")
            return _native_error(str(exc))
        if len(items) > 1:
            if items[0].stream:
                return _native_error("Streaming a batch of prompts is not supported by the simulator.")
            reqs = [self._make_request(gp, gp.prompt, False) for gp in items]
            for req in reqs:
                self._submit(req, request)
            try:
                outs = [await self._await_nonstream(req, None) for req in reqs]
            except asyncio.CancelledError:
                for req in reqs:
                    self.engine.abort(req)
                raise
            for req in reqs:
                self._record(req, "/generate", False, None, None)
            return _json_response(
                [self._native_body(req, text, ids) for req, (text, ids) in zip(reqs, outs, strict=True)]
            )
        gp = items[0]
        req = self._make_request(gp, gp.prompt, False)
        if gp.stream:
            return await self._stream_native(request, gp, req)
        self._submit(req, request)
        clock = _ChunkClock(req.arrival)
        try:
            text, ids = await self._await_nonstream(req, clock)
        except asyncio.CancelledError:
            self.engine.abort(req)
            self._record(req, "/generate", False, "aborted", None)
            raise
        self._record(req, "/generate", False, None, None)
        if req.state == RequestState.ABORTED:
            return _native_error(req.finish_message, 500 if "shutting" in req.finish_message else 400)
        return _json_response(self._native_body(req, text, ids))

    async def _await_nonstream(self, req: Request, clock: _ChunkClock | None) -> tuple[str, list[int]]:
        step = _FORCE_STREAM_INTERVAL
        seen = 0
        while not req.done:
            await req.wait_progress(seen, step)
            if clock is not None and req.generated > seen:
                self._observe_chunk(clock, req.generated, time.monotonic(), req.log_metrics)
            seen = req.generated
        n = req.generated
        text = self._pieces_text(req, 0, n)
        if req.stop_text:
            cut = text.find(req.stop_text)
            if cut >= 0:
                text = text[:cut]
        return text, self._ids(req, 0, n)

    def _meta(self, req: Request, n: int, final: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": req.finish_reason() if final else None,
            "prompt_tokens": req.prompt_tokens,
            "weight_version": "default",
            "total_retractions": req.retractions,
            "completion_tokens": n,
            "cached_tokens": req.cached_tokens,
            # Always null in 0.5.9 without HiCache (the scheduler sends a list of None).
            "cached_tokens_details": None,
        }
        if final and self.metrics is not None:
            # --enable-metrics adds the scheduler's timings and the tokenizer's timestamps.
            unix = self.srv.truth.unix
            meta["queue_time"] = max(0.0, req.scheduled_at - req.arrival) if req.scheduled_at else 0.0
            meta["prefill_launch_delay"] = 0.0
            meta["prefill_finished_ts"] = unix(req.first_token_at) if req.first_token_at else None
            meta["request_received_ts"] = unix(req.arrival)
            meta["request_sent_to_scheduler_ts"] = unix(req.submitted)
            meta["response_sent_to_client_ts"] = time.time()
            meta["decode_finished_ts"] = unix(req.finished_at)
            meta["inference_time"] = max(0.0, req.finished_at - (req.scheduled_at or req.arrival))
            decode_time = req.finished_at - req.first_token_at
            if decode_time > 0:
                meta["decode_throughput"] = n / decode_time
        if final:
            meta["e2e_latency"] = max(0.0, req.finished_at - req.arrival)
            if self.profile.mtp_accept_length > 1.0:
                steps = max(1, req.spec_steps)
                meta["spec_verify_ct"] = steps
                meta["spec_accept_length"] = n / steps
        return meta

    def _native_body(self, req: Request, text: str, ids: list[int]) -> dict[str, Any]:
        return {"text": text, "output_ids": ids, "meta_info": self._meta(req, req.generated, True)}

    async def _start_stream(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers=_SSE_HEADERS)
        await resp.prepare(request)
        self._headers_sent(request)
        return resp

    async def _stream_native(self, request: web.Request, gp: GenParams, req: Request) -> web.StreamResponse:
        self._submit(req, request)
        clock = _ChunkClock(req.arrival)
        resp = await self._start_stream(request)
        fault_name, fault_at = self._fault_plan(True)
        status: str | None = None
        # Cumulative text and ids are kept JSON-encoded and only extended per chunk, so a chunk
        # costs O(new tokens) encoding plus one bytes join, not a re-encoding of the whole text.
        text = ""
        text_json = ""
        ids_json = ""
        seen = 0
        interval = gp.stream_interval
        rid_json = json.dumps(req.rid)
        head_tail = f',"prompt_tokens":{req.prompt_tokens},"weight_version":"default","total_retractions":'
        try:
            while True:
                # SGLang streams the first token at once, then every `interval` tokens.
                await req.wait_progress(seen, 1 if seen == 0 else interval)
                n = req.generated
                done = req.done
                if req.state == RequestState.ABORTED:
                    await resp.write(b"data: " + _dumps({"error": {"message": req.finish_message}}) + b"\n\n")
                    status = "aborted"
                    break
                if not done and seen > 0 and n - seen < interval:
                    continue
                if n > seen:
                    piece = self._pieces_text(req, seen, n)
                    text += piece
                    text_json += json.dumps(piece, ensure_ascii=False)[1:-1]
                    new_ids = ",".join(map(str, self._ids(req, seen, n)))
                    ids_json = new_ids if not ids_json else ids_json + "," + new_ids
                if n > seen or done:
                    if done:
                        final_text = text
                        if req.stop_text:
                            cut = final_text.find(req.stop_text)
                            if cut >= 0:
                                final_text = final_text[:cut]
                        chunk = _dumps(
                            {
                                "text": final_text,
                                "output_ids": json.loads(f"[{ids_json}]"),
                                "meta_info": self._meta(req, n, True),
                            }
                        )
                    else:
                        chunk = (
                            f'{{"text":"{text_json}","output_ids":[{ids_json}],"meta_info":{{"id":{rid_json},'
                            f'"finish_reason":null{head_tail}{req.retractions},"completion_tokens":{n},'
                            f'"cached_tokens":{req.cached_tokens},"cached_tokens_details":null}}}}'
                        ).encode()
                    await resp.write(b"data: " + chunk + b"\n\n")
                    self._chunk_written(clock, req, n)
                seen = n
                if fault_name is not None and n >= fault_at and not done:
                    if await self._inject(resp, req, fault_name):
                        status = "error"
                        break
                    fault_name = None
                if done:
                    break
            await resp.write(_DONE)
        except (ConnectionError, asyncio.CancelledError):
            self.engine.abort(req)
            self._record(req, "/generate", True, "aborted", fault_name)
            raise
        self._record(req, "/generate", True, status, fault_name if status == "error" else None)
        return resp

    async def _inject(self, resp: web.StreamResponse, req: Request, fault_name: str) -> bool:
        """Write the fault's bytes; True when the stream must end (in-band error)."""
        if fault_name == "error_chunk":
            self.engine.abort(req, "injected error")
            msg = "CUDA error: an illegal memory access was encountered"
            await resp.write(b"data: " + _dumps({"error": {"message": msg}}) + b"\n\n")
            return True
        # malformed SSE: a truncated JSON event, then the stream goes on.
        await resp.write(b'data: {"text": "' + b"\n\n")
        return False

    # ---- OpenAI-compatible -------------------------------------------------------------------
    async def chat_completions(self, request: web.Request) -> web.StreamResponse:
        storm = self._storm()
        if storm is not None:
            return storm
        if request.content_type != "application/json":
            return _openai_error("Unsupported Media Type: Only 'application/json' is allowed", 415)
        try:
            body = await self._body(request)
            gp, key = parse_chat(
                body,
                context_len=self.profile.context_length,
                reasoning=self.profile.thinking_tokens > 0,
                default_stream_interval=self.srv.config.stream_interval,
            )
        except BadRequest as exc:
            return _openai_error(str(exc))
        req = self._make_request(gp, key, gp.thinking)
        separate = gp.separate_reasoning and self.profile.reasoning_parser is not None
        if gp.stream:
            return await self._stream_chat(request, gp, req, separate)
        self._submit(req, request)
        clock = _ChunkClock(req.arrival)
        try:
            text, _ = await self._await_nonstream(req, clock)
        except asyncio.CancelledError:
            self.engine.abort(req)
            self._record(req, "/v1/chat/completions", False, "aborted", None)
            raise
        self._record(req, "/v1/chat/completions", False, None, None)
        if req.state == RequestState.ABORTED:
            return _openai_error(req.finish_message, 500, "InternalServerError")
        reasoning: str | None = None
        if gp.thinking and separate:
            split = text.find(THINK_END)
            if split >= 0:
                reasoning, text = text[:split], text[split + len(THINK_END) :]
            else:
                reasoning, text = text, ""
        reason = req.finish_reason() or {}
        return _json_response(
            {
                "id": req.rid,
                "object": "chat.completion",
                "created": int(time.time()),
                "model": gp.model,
                "choices": [
                    {
                        "index": 0,
                        "message": {
                            "role": "assistant",
                            "content": text or None,
                            "reasoning_content": reasoning or None,
                            "tool_calls": None,
                        },
                        "logprobs": None,
                        "finish_reason": reason.get("type"),
                        "matched_stop": reason.get("matched"),
                    }
                ],
                "usage": self._usage(req),
                "metadata": {"weight_version": "default"},
            }
        )

    def _usage(self, req: Request) -> dict[str, Any]:
        details = (
            {"cached_tokens": req.cached_tokens}
            if self.srv.config.enable_cache_report and req.cached_tokens > 0
            else None
        )
        return {
            "prompt_tokens": req.prompt_tokens,
            "total_tokens": req.prompt_tokens + req.generated,
            "completion_tokens": req.generated,
            "prompt_tokens_details": details,
            "reasoning_tokens": 0,
        }

    async def _stream_chat(
        self, request: web.Request, gp: GenParams, req: Request, separate: bool
    ) -> web.StreamResponse:
        self._submit(req, request)
        clock = _ChunkClock(req.arrival)
        resp = await self._start_stream(request)
        fault_name, fault_at = self._fault_plan(True)
        status: str | None = None
        created = int(time.time())
        rid = req.rid
        model = gp.model
        # The thinking part ends at the </think> token, which itself produces no text.
        think_end = req.script.answer_start - 1 if gp.thinking and separate else -1
        first = True
        seen = 0
        sent_text = ""
        interval = gp.stream_interval

        def chunk(delta: dict[str, Any], finish: str | None = None, matched: Any = None) -> bytes:
            obj = {
                "id": rid,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "choices": [
                    {
                        "index": 0,
                        "delta": {
                            "role": delta.get("role"),
                            "content": delta.get("content"),
                            "reasoning_content": delta.get("reasoning_content"),
                            "tool_calls": None,
                        },
                        "logprobs": None,
                        "finish_reason": finish,
                        "matched_stop": matched,
                    }
                ],
                "usage": self._usage(req) if gp.continuous_usage and delta else None,
            }
            return b"data: " + _dumps(obj) + b"\n\n"

        try:
            while True:
                await req.wait_progress(seen, 1 if seen == 0 else interval)
                n = req.generated
                done = req.done
                if req.state == RequestState.ABORTED:
                    await resp.write(
                        b"data: " + _dumps({"error": self._openai_error_body(req.finish_message)}) + b"\n\n"
                    )
                    status = "aborted"
                    break
                if not done and seen > 0 and n - seen < interval:
                    continue
                if n > seen or done:
                    if first:
                        first = False
                        await resp.write(chunk({"role": "assistant", "content": ""}))
                    out = bytearray()
                    if think_end >= 0 and seen < think_end:
                        reasoning = self._pieces_text(req, seen, min(n, think_end))
                        if reasoning:
                            out += chunk({"reasoning_content": reasoning})
                    start = max(seen, think_end + 1) if think_end >= 0 else seen
                    if n > start:
                        content = self._pieces_text(req, start, n)
                        if done and req.stop_text:
                            full = sent_text + content
                            cut = full.find(req.stop_text)
                            if cut >= 0:
                                content = full[:cut][len(sent_text) :]
                        if content:
                            sent_text += content
                            out += chunk({"content": content})
                    if out:
                        await resp.write(bytes(out))
                    self._chunk_written(clock, req, n)
                seen = n
                if fault_name is not None and n >= fault_at and not done:
                    if await self._inject_openai(resp, req, fault_name):
                        status = "error"
                        break
                    fault_name = None
                if done:
                    reason = req.finish_reason() or {}
                    await resp.write(chunk({}, reason.get("type"), reason.get("matched")))
                    if gp.include_usage:
                        usage = {
                            "id": rid,
                            "object": "chat.completion.chunk",
                            "created": created,
                            "model": model,
                            "choices": [],
                            "usage": self._usage(req),
                        }
                        await resp.write(b"data: " + _dumps(usage) + b"\n\n")
                    break
            await resp.write(_DONE)
        except (ConnectionError, asyncio.CancelledError):
            self.engine.abort(req)
            self._record(req, "/v1/chat/completions", True, "aborted", fault_name)
            raise
        self._record(req, "/v1/chat/completions", True, status, fault_name if status == "error" else None)
        return resp

    @staticmethod
    def _openai_error_body(message: str, status: int = 400) -> dict[str, Any]:
        return {
            "object": "error",
            "message": message,
            "type": "BadRequestError",
            "param": None,
            "code": status,
        }

    async def _inject_openai(self, resp: web.StreamResponse, req: Request, fault_name: str) -> bool:
        if fault_name == "error_chunk":
            self.engine.abort(req, "injected error")
            msg = "CUDA error: an illegal memory access was encountered"
            # serving_base.create_streaming_error_response uses json.dumps (with spaces).
            await resp.write(
                b"data: " + json.dumps({"error": self._openai_error_body(msg)}).encode() + b"\n\n"
            )
            return True
        await resp.write(b'data: {"id": "' + b"\n\n")
        return False

    async def completions(self, request: web.Request) -> web.StreamResponse:
        storm = self._storm()
        if storm is not None:
            return storm
        if request.content_type != "application/json":
            return _openai_error("Unsupported Media Type: Only 'application/json' is allowed", 415)
        try:
            body = await self._body(request)
            gp = parse_completion(
                body,
                context_len=self.profile.context_length,
                default_stream_interval=self.srv.config.stream_interval,
            )
        except BadRequest as exc:
            return _openai_error(str(exc))
        req = self._make_request(gp, gp.prompt, False)
        route = "/v1/completions"
        if gp.stream:
            return await self._stream_completion(request, gp, req)
        self._submit(req, request)
        clock = _ChunkClock(req.arrival)
        try:
            text, _ = await self._await_nonstream(req, clock)
        except asyncio.CancelledError:
            self.engine.abort(req)
            self._record(req, route, False, "aborted", None)
            raise
        self._record(req, route, False, None, None)
        if req.state == RequestState.ABORTED:
            return _openai_error(req.finish_message, 500, "InternalServerError")
        if gp.echo:
            text = gp.prompt + text
        reason = req.finish_reason() or {}
        return _json_response(
            {
                "id": req.rid,
                "object": "text_completion",
                "created": int(time.time()),
                "model": gp.model,
                "choices": [
                    {
                        "index": 0,
                        "text": text,
                        "logprobs": None,
                        "finish_reason": reason.get("type"),
                        "matched_stop": reason.get("matched"),
                    }
                ],
                "usage": self._usage(req),
                "metadata": {"weight_version": "default"},
            }
        )

    async def _stream_completion(
        self, request: web.Request, gp: GenParams, req: Request
    ) -> web.StreamResponse:
        self._submit(req, request)
        clock = _ChunkClock(req.arrival)
        resp = await self._start_stream(request)
        fault_name, fault_at = self._fault_plan(True)
        status: str | None = None
        created = int(time.time())
        seen = 0
        sent = ""
        interval = gp.stream_interval
        echo_pending = gp.echo
        try:
            while True:
                await req.wait_progress(seen, 1 if seen == 0 else interval)
                n = req.generated
                done = req.done
                if req.state == RequestState.ABORTED:
                    await resp.write(
                        b"data: " + _dumps({"error": self._openai_error_body(req.finish_message)}) + b"\n\n"
                    )
                    status = "aborted"
                    break
                if not done and seen > 0 and n - seen < interval:
                    continue
                if n > seen or done:
                    delta = self._pieces_text(req, seen, n)
                    if done and req.stop_text:
                        full = sent + delta
                        cut = full.find(req.stop_text)
                        if cut >= 0:
                            delta = full[:cut][len(sent) :]
                    sent += delta
                    if echo_pending:
                        delta = gp.prompt + delta
                        echo_pending = False
                    reason = req.finish_reason() if done else None
                    obj = {
                        "id": req.rid,
                        "object": "text_completion",
                        "created": created,
                        "model": gp.model,
                        "choices": [
                            {
                                "index": 0,
                                "text": delta,
                                "logprobs": None,
                                "finish_reason": reason.get("type") if reason else None,
                                "matched_stop": reason.get("matched") if reason else None,
                            }
                        ],
                        "usage": self._usage(req) if gp.continuous_usage else None,
                    }
                    await resp.write(b"data: " + _dumps(obj) + b"\n\n")
                    self._chunk_written(clock, req, n)
                seen = n
                if fault_name is not None and n >= fault_at and not done:
                    if await self._inject_openai(resp, req, fault_name):
                        status = "error"
                        break
                    fault_name = None
                if done:
                    if gp.include_usage:
                        usage = {
                            "id": req.rid,
                            "object": "text_completion",
                            "created": created,
                            "model": gp.model,
                            "choices": [],
                            # 0.5.9 serialises this chunk with exclude_none=True: no null keys.
                            "usage": {k: v for k, v in self._usage(req).items() if v is not None},
                        }
                        await resp.write(b"data: " + _dumps(usage) + b"\n\n")
                    break
            await resp.write(_DONE)
        except (ConnectionError, asyncio.CancelledError):
            self.engine.abort(req)
            self._record(req, "/v1/completions", True, "aborted", fault_name)
            raise
        self._record(req, "/v1/completions", True, status, fault_name if status == "error" else None)
        return resp


async def _uvicorn_server_header(request: web.Request, response: web.StreamResponse) -> None:
    # SGLang answers through uvicorn; clients and proxies see "server: uvicorn".
    response.headers["Server"] = "uvicorn"


def build_api_app(srv: SimServer) -> web.Application:
    api = SglangApi(srv)
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
    r.add_get("/metrics", api.metrics_route)
    r.add_post("/generate", api.generate)
    r.add_put("/generate", api.generate)
    r.add_post("/v1/chat/completions", api.chat_completions)
    r.add_post("/v1/completions", api.completions)
    r.add_get("/flush_cache", api.flush_cache)
    r.add_post("/flush_cache", api.flush_cache)
    r.add_post("/abort_request", api.abort_request)
    return app
