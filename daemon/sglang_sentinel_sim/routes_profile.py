"""SGLang's ``/start_profile`` and ``/stop_profile`` (GET or POST), per version.

Bodies and answers as http_server.py gives them: the body is 0.5.9's ``ProfileReqInput``
dataclass or 0.5.23's ``ProfileReq`` struct, validated by pydantic in lax mode (``"5"`` is a
valid step count: bench_serving sends ``start_step`` and ``num_steps`` as strings); unknown
fields are ignored. A bad field is a 400 in SGLang's ``ErrorResponse`` shape; a refusal of the
scheduler ("already in progress", "not in progress", torch's own) is a RuntimeError in the route,
which uvicorn answers with a bare 500 ``Internal Server Error`` and logs with its traceback.
"""

from __future__ import annotations

import json
from typing import Any

from aiohttp import web

from sglang_sentinel_sim.crash import SITE
from sglang_sentinel_sim.generation import ApiBase, json_response
from sglang_sentinel_sim.profiler import ProfileOutcome, SimProfiler, TorchDoubleStart
from sglang_sentinel_sim.versions import has, wheel

__all__ = ["ProfileRoutes", "parse_profile_body"]

_INT = ("start_step", "num_steps")
_STR = ("output_dir", "profile_prefix")
_LIST = ("activities", "profile_stages")
_BOOL = ("profile_by_stage", "merge_profiles")
_OPT_BOOL = ("with_stack", "record_shapes")
_NEW = {"profile_id": "str", "detailed_annotations": "bool"}  # ProfileReq only (profile.req_struct)
_TRUE = {"1", "on", "t", "true", "y", "yes"}
_FALSE = {"0", "off", "f", "false", "n", "no"}


class _Invalid(ValueError):
    def __init__(self, error: dict[str, Any]) -> None:
        super().__init__(error["msg"])
        self.error = error


def _err(kind: str, field: str | None, msg: str, value: Any) -> _Invalid:
    loc: tuple[Any, ...] = ("body", field) if field else ("body",)
    return _Invalid({"type": kind, "loc": loc, "msg": msg, "input": value})


def _int(field: str, value: Any) -> int:
    if isinstance(value, bool):
        return int(value)
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            pass
        raise _err(
            "int_parsing",
            field,
            "Input should be a valid integer, unable to parse string as an integer",
            value,
        )
    raise _err("int_type", field, "Input should be a valid integer", value)


def _bool(field: str, value: Any) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, int) and value in (0, 1):
        return bool(value)
    if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
        return value.strip().lower() in _TRUE
    raise _err("bool_parsing", field, "Input should be a valid boolean, unable to interpret input", value)


def parse_profile_body(raw: bytes, version: str) -> dict[str, Any]:
    """The start request's fields (None where absent); `_Invalid` names the first bad field."""
    if not raw.strip():
        return {}
    try:
        body = json.loads(raw)
    except (ValueError, UnicodeDecodeError) as exc:
        raise _err("json_invalid", None, "JSON decode error", {}) from exc
    if body is None:
        return {}
    if not isinstance(body, dict):
        name = "ProfileReq" if has("profile.req_struct", version) else "ProfileReqInput"
        raise _err("dict_type", None, f"Input should be a valid dictionary or instance of {name}", body)
    out: dict[str, Any] = {}
    fields = {**{f: "str" for f in _STR}, **{f: "int" for f in _INT}, **{f: "list" for f in _LIST}}
    fields |= {f: "bool" for f in _BOOL} | {f: "opt_bool" for f in _OPT_BOOL}
    if has("profile.req_struct", version):
        fields |= _NEW
    for field, kind in fields.items():
        value = body.get(field)
        if value is None:
            if kind == "bool" and field in body:
                raise _err("bool_type", field, "Input should be a valid boolean", value)
            continue
        if kind == "int":
            out[field] = _int(field, value)
        elif kind in ("bool", "opt_bool"):
            out[field] = _bool(field, value)
        elif kind == "str":
            if not isinstance(value, str):
                raise _err("string_type", field, "Input should be a valid string", value)
            out[field] = value
        else:
            if not isinstance(value, list):
                raise _err("list_type", field, "Input should be a valid list", value)
            for k, item in enumerate(value):
                if not isinstance(item, str):
                    raise _Invalid(
                        {
                            "type": "string_type",
                            "loc": ("body", field, k),
                            "msg": "Input should be a valid string",
                            "input": item,
                        }
                    )
            out[field] = list(value)
    return out


def _validation_error(error: dict[str, Any]) -> web.Response:
    # FastAPI's str(RequestValidationError) then str(exc.errors()), as SGLang's handler joins them.
    message = f"1 validation error:\n  {error!r} {[error]!r}"
    return json_response(
        {"object": "error", "message": message, "type": "Bad Request", "param": None, "code": 400}, 400
    )


# (http_server.py line of the route's await, its call) and the tokenizer mixin, per wheel: a release
# gets the wheel of its side of profile.req_struct (the frames' line numbers are that wheel's).
_ROUTE_LINES = {
    "0.5.9": {"start_profile": (839, "start_profile("), "stop_profile": (861, "stop_profile()")},
    "0.5.23": {
        "start_profile": (1225, "start_profile(obj or ProfileReq())"),
        "stop_profile": (1236, "stop_profile()"),
    },
}
_MIXIN = {
    "0.5.9": ("tokenizer_communicator_mixin.py", {"start_profile": 441, "stop_profile": 446}, 451),
    "0.5.23": ("tokenizer_control_mixin.py", {"start_profile": 417, "stop_profile": 422}, 427),
}


def _traceback(route: str, version: str) -> str:
    """uvicorn's traceback of the route's RuntimeError, from the SGLang frames on (the
    Starlette and uvicorn frames above them are left out)."""
    line, call = _ROUTE_LINES[wheel("profile.req_struct", version)][route]
    mixin, entry, raised = _MIXIN[wheel("profile.req_struct", version)]
    return (
        "Traceback (most recent call last):\n"
        f'  File "{SITE}/sglang/srt/entrypoints/http_server.py", line {line}, in {route}_async\n'
        f"    await _global_state.tokenizer_manager.{call}\n"
        f'  File "{SITE}/sglang/srt/managers/{mixin}", line {entry[route]}, in {route}\n'
        "    return await self._execute_profile(req)\n"
        f'  File "{SITE}/sglang/srt/managers/{mixin}", line {raised}, in _execute_profile\n'
        "    raise RuntimeError(result.message)\n"
    )


class ProfileRoutes(ApiBase):
    # The scheduler's profiler (the engine observer's), set by the app that mixes these routes in.
    profiler: SimProfiler

    def _refused(self, route: str, outcome: ProfileOutcome) -> web.Response:
        # tokenizer_manager._execute_profile raises RuntimeError(message); uvicorn logs it
        # (SGLang's uvicorn format, "ERROR:" level prefix) and answers a bare 500.
        self.srv.log.main("ERROR:    Exception in ASGI application")
        self.srv.log.raw(_traceback(route, self.srv.version) + f"RuntimeError: {outcome.message}\n")
        return web.Response(status=500, text="Internal Server Error")

    async def start_profile(self, request: web.Request) -> web.Response:
        try:
            req = parse_profile_body(await request.read(), self.srv.version)
        except _Invalid as exc:
            return _validation_error(exc.error)
        try:
            outcome = self.profiler.start(req, self.engine.stats.forward_ct)
        except TorchDoubleStart:
            self.srv.crash("profiler")  # before 0.5.14: the scheduler dies; the request gets no answer
            if request.transport is not None:
                request.transport.close()
            return web.Response(status=500, text="Internal Server Error")
        if not outcome.success:
            return self._refused("start_profile", outcome)
        return web.Response(text="Start profiling.\n")

    async def stop_profile(self, request: web.Request) -> web.Response:
        outcome = self.profiler.stop()
        if not outcome.success:
            return self._refused("stop_profile", outcome)
        return web.Response(text="Stop profiling. This will take some time.\n")
