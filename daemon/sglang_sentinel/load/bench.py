"""One `sentinel bench` run below the CLI: flush, profile, energy, the load, the server's info, in one place.

:func:`run_bench` has the shape of SGLang's ``BenchmarkRunner.run`` (``sglang/benchmark/`` in the
0.5.23 wheel): ``POST /flush_cache`` before the load when asked, the torch profiler around the
measured requests (:mod:`sglang_sentinel.load.torch_profile`), the run itself
(:func:`sglang_sentinel.load.engine.run_load`), then ``/server_info`` into the result. The CLI
(``sentinel bench``) parses the flags into a spec and prints what this returns.

With a GPU energy meter (``collect.gpu.energy.LoadMeter``, seen here through
:class:`RunEnergyMeter`: ``load`` does not import ``collect``, its sibling layer), the GPUs' idle
draw is measured after the warm-up, then the energy window opens as the measured phase's clock
starts and closes as its last response ends: the energy and the output tokens it is divided by
cover the same requests (docs/energy.md).

The calls beside the load are best effort, as in bench_serving: a refusal or an error is logged
(flush, profiler) or leaves the result without server info, never fails the run. They go through
the run's own session (its transport, headers and key) and read bounded.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Any, Protocol

from sglang_sentinel.load.engine import RecordCallback, run_load
from sglang_sentinel.load.session import auth_headers, make_session, read_capped
from sglang_sentinel.load.torch_profile import ProfilePlan, Profiler
from sglang_sentinel.log import get_logger
from sglang_sentinel.redact import redact_obj

if TYPE_CHECKING:
    from sglang_sentinel.load.records import LoadCounters
    from sglang_sentinel.load.result import RunResult
    from sglang_sentinel.load.spec import LoadSpec

__all__ = ["SERVER_INFO_MAX_BYTES", "RunEnergyMeter", "flush_cache", "record_server_info", "run_bench"]

_log = get_logger(__name__)


class RunEnergyMeter(Protocol):
    """What a run needs of a GPU energy meter: ``collect.gpu.energy.LoadMeter``'s calls.

    Samples are the meter's own (``EnergySample``); a run only hands them back.
    """

    async def measure_idle(self, seconds: float) -> None: ...

    async def sample(self) -> Any: ...

    async def load_ended(self, start: Any, output_tokens: int, end: Any = None) -> dict[str, Any]: ...


async def run_bench(
    spec: LoadSpec,
    *,
    flush_timeout_s: float | None = None,
    profile: ProfilePlan | None = None,
    counters: LoadCounters | None = None,
    on_record: RecordCallback | None = None,
    cancel: asyncio.Event | None = None,
    energy: RunEnergyMeter | None = None,
    idle_seconds: float = 0.0,
) -> RunResult:
    """One benchmark run: flush (``flush_timeout_s`` set), the load with the profiler around its
    measured phase (``profile`` set), then the native server's ``/server_info`` into the result.

    With ``energy``: the GPUs' idle draw over ``idle_seconds`` after the warm-up (0: not measured
    here; a ramp's later steps keep the first step's), the measured phase's energy into
    ``result.energy``.
    """
    session = make_session(spec)
    try:
        if flush_timeout_s is not None:
            await flush_cache(session, spec, flush_timeout_s)
        profiler = Profiler(session, spec, profile) if profile is not None else None
        window: list[Any] = []  # the energy window's two ends, as the meter read them

        async def before_measured() -> None:
            if energy is not None and idle_seconds > 0:
                # After the warm-up, so the server is up and warm; before the profiler, which
                # would record the idle seconds.
                await energy.measure_idle(idle_seconds)
            if profiler is not None:
                await profiler.start()
            if energy is not None:
                window.append(await energy.sample())

        async def after_measured() -> None:
            if energy is not None and window:
                window.append(await energy.sample())

        result = await run_load(
            spec,
            counters=counters,
            on_record=on_record,
            cancel=cancel,
            session=session,
            before_measured=before_measured,
            after_measured=after_measured,
        )
        if energy is not None:
            # No window (a warm-up that failed, a stop before the measured phase): no figure, and why.
            start = window[0] if window else None
            end = window[1] if len(window) > 1 else None
            result.energy = await energy.load_ended(start, result.metrics.total_output_tokens, end)
        if profiler is not None:
            await profiler.stop()
        if spec.backend == "sglang" and not result.warmup_failed:
            await record_server_info(session, spec, result)
        return result
    finally:
        await session.close()


async def flush_cache(session: Any, spec: LoadSpec, timeout_s: float) -> None:
    try:
        async with asyncio.timeout(timeout_s):
            async with session.post(spec.base_url + "/flush_cache", headers=auth_headers(spec)) as resp:
                if resp.status != 200:
                    _log.warning("bench_flush_cache_refused", status=resp.status)
    except Exception as exc:  # best effort, as in bench_serving
        _log.warning("bench_flush_cache_failed", error=str(exc))


SERVER_INFO_MAX_BYTES = 4 << 20  # SGLang's is ~10 KB (server_args and internal states)


async def record_server_info(session: Any, spec: LoadSpec, result: RunResult) -> None:
    """bench_serving records /get_server_info and its spec-decoding accept length."""
    for path in ("/server_info", "/get_server_info"):
        try:
            async with asyncio.timeout(5.0):
                async with session.get(spec.base_url + path, headers=auth_headers(spec)) as resp:
                    if resp.status != 200:
                        continue
                    # Bounded: the timeout covers the whole exchange, read_capped the bytes.
                    body = await read_capped(resp, SERVER_INFO_MAX_BYTES)
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
