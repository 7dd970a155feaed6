"""Run ``python -m sglang.bench_serving ARGS`` unchanged, and record its benchmark-phase CPU time.

Runs inside the peer venv (see ``peer_setup.sh``). bench_serving calls ``asyncio.run`` exactly once,
for ``benchmark(...)`` (warm-up, the run, ``/get_server_info``, metric calculation); the shim wraps
that call with ``getrusage(RUSAGE_SELF)`` so the CPU spent importing transformers, loading the
tokenizer and building the dataset is kept apart. Nothing bench_serving sends, parses or prints
changes. The figures go to the JSON file named by ``SENTINEL_PEER_CPU_FILE`` (if set).

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
from typing import Any

_original_run = asyncio.run


def _timed_run(main: Coroutine[Any, Any, Any], **kwargs: Any) -> Any:
    before = resource.getrusage(resource.RUSAGE_SELF)
    wall0 = time.perf_counter()
    try:
        return _original_run(main, **kwargs)
    finally:
        after = resource.getrusage(resource.RUSAGE_SELF)
        out = os.environ.get("SENTINEL_PEER_CPU_FILE")
        if out:
            with open(out, "w") as f:
                json.dump(
                    {
                        "benchmark_cpu_user_s": after.ru_utime - before.ru_utime,
                        "benchmark_cpu_system_s": after.ru_stime - before.ru_stime,
                        "benchmark_wall_s": time.perf_counter() - wall0,
                    },
                    f,
                )


asyncio.run = _timed_run  # type: ignore[assignment]
sys.argv = ["sglang.bench_serving", *sys.argv[1:]]
runpy.run_module("sglang.bench_serving", run_name="__main__", alter_sys=True)
