"""What every SGLang generation route shares: one request prelude and one streaming driver.

The prelude (:meth:`ApiBase._parse`) applies the ``http_503`` fault, the content-type rule of the
OpenAI routes, reads and parses the body, and answers bad input in the route's own error format.
The driver (:meth:`ApiBase._stream`) runs every streamed response: it waits for the engine's
tokens, honours ``stream_interval``, observes the tokenizer-side metrics, injects the
``error_chunk`` and ``malformed_sse`` faults, handles aborts and client disconnects, and records
the ground truth; a route only says how its chunks look (a :class:`StreamFormat`). So a fault is
written once for every format.

The driver writes the first token, the finish, faults and aborts; the steady state's events (one
per ``stream_interval`` tokens) are written by its :class:`~sglang_sentinel_sim.push.StreamPusher`
straight from the engine's decode step, with the same format, without waking the task.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeVar

from aiohttp import web

from sglang_sentinel_sim.disagg import NO_ROOM_MESSAGE, missing_room
from sglang_sentinel_sim.engine import Request, RequestState
from sglang_sentinel_sim.push import NO_FAULT, StreamPusher
from sglang_sentinel_sim.reqstate import INJECTED_ABORT
from sglang_sentinel_sim.requests import BadRequest, GenParams, stop_position
from sglang_sentinel_sim.sse import SseWriter
from sglang_sentinel_sim.text import EOS_TOKEN_ID, make_script, token_id

if TYPE_CHECKING:
    from sglang_sentinel_sim.context import SimContext

__all__ = [
    "ACTIVE_KEY",
    "ARRIVAL_KEY",
    "DONE",
    "INJECTED_ERROR",
    "RECEIVED_KEY",
    "ApiBase",
    "StreamFormat",
    "dumps",
    "json_response",
    "native_error",
    "openai_error",
    "text_json",
]

T = TypeVar("T")

# Starlette appends the charset to text/* media types.
_SSE_HEADERS: Final = {"Content-Type": "text/event-stream; charset=utf-8"}
DONE: Final = b"data: [DONE]\n\n"
ACTIVE_KEY: Final = web.RequestKey("sim_active", bool)
# Engine-clock time the handler chain was entered, before the body is read and parsed: the start of
# the SGLang-style figures (TokenizerManager stamps created_time on entry too).
ARRIVAL_KEY: Final = web.RequestKey("sim_arrival", float)
# Kernel receive time of the request's bytes (engine clock), where the socket could tell: the
# ground truth's arrival, so that the simulator's own HTTP queueing (one loop serving hundreds of
# requests that arrive together) counts as the server's time, not as "client-added TTFT".
RECEIVED_KEY: Final = web.RequestKey("sim_received", float)
# What the error_chunk fault says (an in-band error, HTTP 200), in every format.
INJECTED_ERROR: Final = "CUDA error: an illegal memory access was encountered"
# Non-stream requests get intermediate scheduler outputs every 50 tokens (TTFT metric quirk).
_FORCE_STREAM_INTERVAL: Final = 50
_GARBAGE: Final = {"bang": "!", "nan": " NaN", "random": "\ufffd"}


def dumps(obj: Any) -> bytes:
    return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()


# The JSON of stream deltas' texts: most are one token's piece from a small vocabulary, so cached.
_TEXT_JSON: dict[str, bytes] = {}


def text_json(text: str) -> bytes:
    """``json.dumps(text, ensure_ascii=False)``, UTF-8 (a JSON string, quotes included)."""
    data = _TEXT_JSON.get(text)
    if data is None:
        data = json.dumps(text, ensure_ascii=False).encode()
        if len(text) < 64 and len(_TEXT_JSON) < 65536:
            _TEXT_JSON[text] = data
    return data


def json_response(obj: Any, status: int = 200) -> web.Response:
    return web.Response(body=dumps(obj), status=status, content_type="application/json")


def native_error(message: str, status: int = 400) -> web.Response:
    return json_response({"error": {"message": message}}, status)


def openai_error(message: str, status: int = 400, err_type: str = "BadRequestError") -> web.Response:
    return json_response(
        {"object": "error", "message": message, "type": err_type, "param": None, "code": status}, status
    )


class _ChunkClock:
    """Tokenizer-side TTFT/ITL observation per output chunk (SGLang's collect_metrics)."""

    __slots__ = ("created", "last_n", "last_t", "priority", "started", "stream")

    def __init__(self, created: float, stream: bool = False, priority: int | None = None) -> None:
        self.created = created
        # 0.5.23 labels TTFT with is_streaming (and priority under priority scheduling).
        self.stream = stream
        self.priority = priority
        self.started = False
        self.last_t = created
        self.last_n = 0


class StreamFormat(Protocol):
    """How one route's stream looks: the bytes of each event, never when they are sent."""

    # A truncated JSON event (the malformed_sse fault); the stream goes on after it.
    malformed: bytes

    def chunks(self, seen: int, n: int, done: bool) -> list[bytes]:
        """Writes for tokens ``seen..n`` (``done``: the request finished); each one write."""
        ...

    def finish(self) -> list[bytes]:
        """Writes after the last token's chunk (finish reason, usage), before ``[DONE]``."""
        ...

    def error(self, message: str, injected: bool) -> bytes:
        """An in-band error event: the request was aborted, or (``injected``) the error_chunk fault."""
        ...


class ApiBase:
    """State and helpers of the API's route mixins (routes_info, routes_native, routes_openai)."""

    def __init__(self, srv: SimContext) -> None:
        self.srv = srv
        self.engine = srv.engine
        self.profile = srv.profile
        self.metrics = srv.metrics
        self.api_key = srv.config.api_key
        self.speed = srv.speed

    def _headers_sent(self, request: web.Request) -> None:
        """Streaming responses leave http_requests_active once headers are out (as SGLang's
        Starlette middleware does)."""
        m = self.metrics
        if m is not None and request.get(ACTIVE_KEY):
            m.http_active.labels(request.path, request.method).dec()
            request[ACTIVE_KEY] = False

    # ---- the request prelude ------------------------------------------------------------------
    async def _body(self, request: web.Request) -> object:
        try:
            raw = await request.read()
            return json.loads(raw) if raw else {}
        except (ValueError, UnicodeDecodeError) as exc:
            raise BadRequest(f"invalid JSON body: {exc}") from None

    def _storm(self) -> web.Response | None:
        fault = self.srv.faults.active("http_503", time.monotonic())
        if fault is not None and fault.pick():
            return json_response({"error": {"message": "Service Unavailable"}}, 503)
        return None

    async def _parse(
        self, request: web.Request, parse: Callable[[object], T], *, openai: bool
    ) -> T | web.Response:
        """The http_503 fault, the OpenAI routes' content type, then the body parsed by ``parse``;
        bad input answered in the route's format (native routes also log it, as SGLang does)."""
        storm = self._storm()
        if storm is not None:
            return storm
        if openai and request.content_type != "application/json":
            return openai_error("Unsupported Media Type: Only 'application/json' is allowed", 415)
        try:
            body = await self._body(request)
            c = self.srv.config
            if missing_room(body, c.disaggregation_mode, c.disaggregation_transfer_backend):
                raise BadRequest(NO_ROOM_MESSAGE)
            return parse(body)
        except BadRequest as exc:
            if openai:
                return openai_error(str(exc))
            self.srv.log.main(f"[http_server] Error: {exc}")
            return native_error(str(exc))

    def _make_request(self, gp: GenParams, script_key: str, thinking: bool) -> Request:
        p = self.profile
        script = make_script(
            script_key, thinking=thinking, thinking_tokens=p.thinking_tokens, prompt_ids=gp.prompt_ids
        )
        # NaN logits never sample EOS: a known-bad launch (launchmodel.py) runs to max_new_tokens.
        ignore_eos = gp.ignore_eos or bool(p.output_garbage)
        stop = None
        if gp.stop:
            limit = gp.max_new_tokens if ignore_eos else min(gp.max_new_tokens, script.natural_len)
            stop = stop_position(script.pieces(limit), gp.stop, limit)
        role = self.srv.config.disaggregation_mode
        req = Request(
            gp.rid,
            gp.prompt_tokens,
            1 if role == "prefill" else gp.max_new_tokens,  # SGLang's prefill role: one token
            script,
            prompt_key=gp.prompt or ",".join(map(str, gp.prompt_ids)),
            ignore_eos=ignore_eos,
            min_new_tokens=gp.min_new_tokens,
            stop_at=stop[0] if stop else None,
            stop_text=stop[1] if stop else None,
            log_metrics=gp.log_metrics,
            stream=gp.stream,
            priority=gp.priority,
        )
        req.pd_role = role
        return req

    def _pieces_text(self, req: Request, start: int, end: int) -> str:
        if req.finish_matched == EOS_TOKEN_ID:
            end = min(end, req.script.natural_len)  # the EOS token itself has no text
        if start >= end:
            return ""
        fault = self.srv.faults.get("garbage")  # (the clock read only when one is set)
        if fault is not None and fault.is_active(time.monotonic()):
            return _GARBAGE[fault.text("style")] * (end - start)
        if self.profile.output_garbage:
            # A known-bad backend combination (launchmodel.py): every token is garbage.
            return _GARBAGE[self.profile.output_garbage] * (end - start)
        if end - start == 1:
            return req.script.piece(start)
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
            m.observe_ttft(now - clock.created, clock.stream, clock.priority)
            if n > 1 and clock.stream:
                # A stream's first write that holds several tokens (the writer fell behind the
                # engine on a busy box): SGLang's tokenizer manager saw them one output batch at a
                # time, so every token after the first is still an ITL observation; written
                # together, they came with no interval between them. (A non-stream reply is one
                # output: its TTFT only, as before.)
                m.observe_itl(0.0, n - 1, clock.priority)
        elif n > clock.last_n:
            m.observe_itl(now - clock.last_t, n - clock.last_n, clock.priority)
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
        self.engine.submit(req, request.get(ARRIVAL_KEY), request.get(RECEIVED_KEY))

    def _record(self, req: Request, route: str, stream: bool, status: str | None, fault: str | None) -> None:
        if req.log_metrics:
            self.srv.truth.record(req, route=route, stream=stream, status=status, fault=fault)

    # ---- non-streamed ------------------------------------------------------------------------
    async def _complete(self, request: web.Request, req: Request, route: str) -> tuple[str, list[int]]:
        """Submit ``req`` and wait for all of it: its text and ids (check ``req.state`` for aborts)."""
        self._submit(req, request)
        clock = _ChunkClock(req.arrival, priority=req.priority)
        try:
            text, ids = await self._await_nonstream(req, clock)
        except asyncio.CancelledError:
            self.engine.abort(req)
            self._record(req, route, False, "aborted", None)
            raise
        self._record(req, route, False, None, None)
        return text, ids

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

    # ---- the streaming driver ----------------------------------------------------------------
    async def _start_stream(self, request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(status=200, headers=_SSE_HEADERS)
        await resp.prepare(request)
        self._headers_sent(request)
        return resp

    async def _stream(
        self, request: web.Request, req: Request, gp: GenParams, fmt: StreamFormat, route: str
    ) -> web.StreamResponse:
        """Stream ``req`` in ``fmt``: the one loop behind every streamed route."""
        fault_name, fault_at = self._fault_plan(True)
        if fault_name == "error_chunk":
            req.fault_at = fault_at  # the engine ends it there (reqstate.Request.fault_at)
        self._submit(req, request)
        clock = _ChunkClock(req.arrival, stream=True, priority=req.priority)
        resp = await self._start_stream(request)
        out = SseWriter(request, resp)
        status: str | None = None
        seen = 0
        interval = gp.stream_interval
        # The steady state's events are written by the engine's decode step (push.py).
        # Once the first token is out, a chunk's observation is only the metrics'.
        observe = self._chunk_written if self.metrics is not None and req.log_metrics else None
        pusher = StreamPusher(
            req,
            fmt.chunks,
            observe,
            clock,
            out,
            interval,
            NO_FAULT if fault_name is None else fault_at,
        )
        try:
            while True:
                pusher.attach()
                # SGLang streams the first token at once, then every `interval` tokens.
                await req.wait_progress(seen, 1 if seen == 0 else interval)
                req.pusher = None
                seen = pusher.seen
                n = req.generated
                # Ended by the engine at the fault's token: its tokens, then the error, as below.
                injected = req.state == RequestState.ABORTED and req.finish_message == INJECTED_ABORT
                done = req.done and not injected
                if req.state == RequestState.ABORTED and not injected:
                    await out.write(fmt.error(req.finish_message, False))
                    status = "aborted"
                    break
                if not done and not injected and seen > 0 and n - seen < interval:
                    continue
                if n > seen or done:
                    writes = fmt.chunks(seen, n, done)
                    if n > seen and writes:
                        req.token_events += 1  # (a token without text, </think>, writes nothing)
                    for data in writes:
                        await out.write(data)
                    self._chunk_written(clock, req, n)
                seen = pusher.seen = n
                if fault_name is not None and n >= fault_at and not done:
                    if fault_name == "error_chunk":  # the engine already ended it (req.fault_at)
                        await out.write(fmt.error(INJECTED_ERROR, True))
                        status = "error"
                        break
                    await out.write(fmt.malformed)
                    fault_name = None
                    pusher.fault_at = NO_FAULT
                if done:
                    for data in fmt.finish():
                        await out.write(data)
                    break
            await out.write(DONE)
        except (ConnectionError, asyncio.CancelledError):
            req.pusher = None
            self.engine.abort(req)
            self._record(req, route, True, "aborted", fault_name)
            raise
        self._record(req, route, True, status, fault_name if status == "error" else None)
        return resp
