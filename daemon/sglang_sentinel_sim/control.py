"""The simulator's private control API (its own port on 127.0.0.1, never SGLang's namespace).

Routes (JSON in and out; documented in docs/sim.md):

- ``GET /state``: lifecycle status, engine occupancy, lag figures, armed faults;
- ``GET /faults``: armed faults and the catalogue; ``POST /faults`` arms one
  (``{"name": ..., "params": {...}}`` or ``{"spec": "hang:after=2"}``); ``DELETE /faults`` clears
  all, ``DELETE /faults/{name}`` one;
- ``GET /requests[?since=UNIX]``: ground-truth records; ``GET /summary[?since=UNIX]``: aggregates;
  ``POST /reset``: forget the records.
"""

from __future__ import annotations

import ipaddress
import json
import time
from typing import TYPE_CHECKING, Any

from aiohttp import web

from sglang_sentinel_sim.faults import FAULTS, FaultError, make_fault, parse_fault_spec

if TYPE_CHECKING:
    from sglang_sentinel_sim.context import SimContext

__all__ = ["build_control_app"]


def _json(obj: Any, status: int = 200) -> web.Response:
    return web.Response(text=json.dumps(obj), status=status, content_type="application/json")


def _since(request: web.Request) -> float | None:
    raw = request.query.get("since")
    if raw is None:
        return None
    try:
        return float(raw)
    except ValueError:
        raise web.HTTPBadRequest(
            text=json.dumps({"error": f"since={raw!r} is not a Unix timestamp"}),
            content_type="application/json",
        ) from None


@web.middleware
async def _loopback_only(request: web.Request, handler: Any) -> web.StreamResponse:
    remote = request.remote or ""
    try:
        loopback = ipaddress.ip_address(remote).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        return _json({"error": "the control API answers loopback clients only"}, 403)
    resp: web.StreamResponse = await handler(request)
    return resp


def build_control_app(srv: SimContext) -> web.Application:
    app = web.Application(middlewares=[_loopback_only])

    async def state(request: web.Request) -> web.Response:
        e = srv.engine
        now = time.monotonic()
        return _json(
            {
                **srv.info(),
                "status": srv.status,
                "draining": srv.draining,
                "launched_at": srv.launched_at,
                "ready_at": srv.ready_at,
                "exit_reason": srv.exit_reason,
                "engine": {
                    "running": len(e.running),
                    "waiting": len(e.waiting),
                    "kv_used_tokens": e.kv_used,
                    "kv_capacity_tokens": e.capacity,
                    "token_usage": e.token_usage,
                    "new_token_ratio": e.new_token_ratio,
                    "frozen": e.frozen_since is not None,
                    "forward_ct": e.stats.forward_ct,
                    "decode_steps": e.stats.decode_steps,
                    "prefill_batches": e.stats.prefill_batches,
                    "generated_tokens": e.stats.generated_tokens,
                    "prefill_tokens": e.stats.prefill_tokens,
                    "retracted_reqs": e.stats.retracted_reqs,
                    "pushed_events": e.stats.pushed_events,
                    "max_running": e.stats.max_running,
                    "max_waiting": e.stats.max_waiting,
                    # When max_lag_s is large the simulator itself was the bottleneck.
                    "max_lag_s": e.stats.max_lag_s,
                    "slipped_s": e.stats.slipped_s,
                },
                # The simulator's own event-loop lag (real seconds): a client's extra latency that
                # is really the server's when these are high.
                "loop_lag": srv.loop_lag.to_json(),
                "faults": [f.to_json(now) for f in srv.faults.all()],
                "log_lines": srv.log.lines_written,
            }
        )

    async def faults(request: web.Request) -> web.Response:
        now = time.monotonic()
        return _json(
            {
                "armed": [f.to_json(now) for f in srv.faults.all()],
                "catalogue": {
                    name: {"description": spec.description, "params": spec.params}
                    for name, spec in FAULTS.items()
                },
            }
        )

    async def add_fault(request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except ValueError:
            return _json({"error": "body must be JSON"}, 400)
        try:
            if isinstance(body, dict) and isinstance(body.get("spec"), str):
                fault = parse_fault_spec(body["spec"])
            elif isinstance(body, dict) and isinstance(body.get("name"), str):
                params = body.get("params") or {}
                if not isinstance(params, dict):
                    raise FaultError("params must be an object")
                fault = make_fault(body["name"], params)
            else:
                raise FaultError('expected {"name": ..., "params": {...}} or {"spec": "NAME:key=value"}')
        except FaultError as exc:
            return _json({"error": str(exc)}, 400)
        if fault.name == "slow_start":
            return _json({"error": "slow_start only applies at launch (--fault slow_start:...)"}, 400)
        srv.arm_fault(fault)
        return _json(fault.to_json(time.monotonic()), 201)

    async def clear_faults(request: web.Request) -> web.Response:
        name = request.match_info.get("name")
        cleared = srv.clear_fault(name)
        if name is not None and not cleared:
            return _json({"error": f"fault {name!r} is not armed"}, 404)
        return _json({"cleared": cleared})

    async def requests(request: web.Request) -> web.Response:
        return _json({"requests": [r.to_json() for r in srv.truth.records(_since(request))]})

    async def summary(request: web.Request) -> web.Response:
        # The conditions the truth was produced under travel with it (real vs server seconds, capacity).
        return _json(
            {
                **srv.truth.summary(_since(request)),
                "speed": srv.speed,
                "capacity_scale": srv.config.capacity_scale,
            }
        )

    async def reset(request: web.Request) -> web.Response:
        srv.loop_lag.reset()
        return _json({"forgotten": srv.truth.reset()})

    r = app.router
    r.add_get("/state", state)
    r.add_get("/faults", faults)
    r.add_post("/faults", add_fault)
    r.add_delete("/faults", clear_faults)
    r.add_delete("/faults/{name}", clear_faults)
    r.add_get("/requests", requests)
    r.add_get("/summary", summary)
    r.add_post("/reset", reset)
    return app
