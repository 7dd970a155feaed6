"""``sentinel bench``'s calls beside the load: ``/flush_cache`` before it, ``/server_info`` after.

Both best effort, as in bench_serving: a refusal or an error is logged (flush) or leaves the
result without server info, never fails the run.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any

from sglang_sentinel.redact import redact_obj

if TYPE_CHECKING:
    from sglang_sentinel.load.result import RunResult
    from sglang_sentinel.load.spec import LoadSpec

__all__ = ["flush_cache", "record_server_info"]


async def flush_cache(session: Any, spec: LoadSpec, timeout_s: float) -> None:
    from sglang_sentinel.load.session import auth_headers
    from sglang_sentinel.log import get_logger

    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(spec.base_url + "/flush_cache", headers=auth_headers(spec)) as resp:
                if resp.status != 200:
                    get_logger(__name__).warning("bench_flush_cache_refused", status=resp.status)
    except Exception as exc:  # best effort, as in bench_serving
        get_logger(__name__).warning("bench_flush_cache_failed", error=str(exc))


_SERVER_INFO_MAX_BYTES = 4 << 20  # SGLang's is ~10 KB (server_args and internal states)


async def record_server_info(session: Any, spec: LoadSpec, result: RunResult) -> None:
    """bench_serving records /get_server_info and its spec-decoding accept length."""
    from sglang_sentinel.load.session import auth_headers, read_capped

    for path in ("/server_info", "/get_server_info"):
        try:
            async with asyncio.timeout(5.0):
                async with session.get(spec.base_url + path, headers=auth_headers(spec)) as resp:
                    if resp.status != 200:
                        continue
                    # Bounded: the timeout covers the whole exchange, read_capped the bytes.
                    body = await read_capped(resp, _SERVER_INFO_MAX_BYTES)
            info = (
                await asyncio.to_thread(json.loads, bytes(body)) if len(body) > 1 << 16 else json.loads(body)
            )
        except Exception:
            continue
        if isinstance(info, dict):
            if isinstance(info.get("decode"), list) and info["decode"]:
                info = info["decode"][0]
            result.server_info = redact_obj(info)  # SGLang lists its api_key among server_args
            states = info.get("internal_states")
            if isinstance(states, list) and states and isinstance(states[0], dict):
                accept = states[0].get("avg_spec_accept_length")
                if isinstance(accept, int | float) and accept > 0:
                    result.accept_length = float(accept)
            return
