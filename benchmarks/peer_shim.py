"""Run ``python -m sglang.bench_serving ARGS`` unchanged, and record the CPU time it spends.

Runs inside the peer venv (see ``peer_setup.sh``). Nothing bench_serving sends, parses or prints
changes; three stdlib entry points it looks up at call time are wrapped to take ``getrusage``
snapshots (0.5.9 calls each of them only where noted):

- ``asyncio.run`` — once, around ``benchmark(...)``: warm-up, the run, ``/get_server_info``, metric
  calculation (incl. retokenising every output) and the JSONL dump → ``benchmark_*``;
- ``time.sleep`` — once, the 1 s pause right before the run starts (bench_serving.py L2421);
- ``asyncio.gather`` — twice, awaiting the warm-up and the run's request tasks (L2402, L2513).
  From the end of that sleep to the completion of the last gather is the run itself → ``run_*``:
  the streaming client's cost without imports, dataset building or metric post-processing.

The figures go to the JSON file named by ``SENTINEL_PEER_CPU_FILE`` (if set).
Usage: ``.peer/venv/bin/python peer_shim.py --backend sglang --base-url ... [bench_serving args]``
"""

from __future__ import annotations

import asyncio
import json
import os
import resource
import runpy
import sys
import time
from collections.abc import Coroutine
from typing import Any, SupportsIndex

_run = asyncio.run
_gather = asyncio.gather
_sleep = time.sleep
_marks: dict[str, tuple[float, float, float]] = {}


def _mark(name: str) -> None:
    r = resource.getrusage(resource.RUSAGE_SELF)
    _marks[name] = (r.ru_utime, r.ru_stime, time.perf_counter())


def _span(start: str, end: str, prefix: str) -> dict[str, float]:
    if start not in _marks or end not in _marks:
        return {}
    (u0, s0, w0), (u1, s1, w1) = _marks[start], _marks[end]
    return {f"{prefix}_cpu_user_s": u1 - u0, f"{prefix}_cpu_system_s": s1 - s0, f"{prefix}_wall_s": w1 - w0}


def _timed_sleep(seconds: float | SupportsIndex) -> None:
    _sleep(seconds)
    _mark("run_start")


def _timed_gather(*aws: Any, **kwargs: Any) -> Any:
    future = _gather(*aws, **kwargs)
    future.add_done_callback(lambda _f: _mark("gather_end"))
    return future


def _timed_run(main: Coroutine[Any, Any, Any], **kwargs: Any) -> Any:
    _mark("benchmark_start")
    try:
        return _run(main, **kwargs)
    finally:
        _mark("benchmark_end")
        out = os.environ.get("SENTINEL_PEER_CPU_FILE")
        if out:
            figures = _span("benchmark_start", "benchmark_end", "benchmark")
            figures.update(_span("run_start", "gather_end", "run"))
            with open(out, "w") as f:
                json.dump(figures, f)


asyncio.run = _timed_run
asyncio.gather = _timed_gather
time.sleep = _timed_sleep
sys.argv = ["sglang.bench_serving", *sys.argv[1:]]
runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)
