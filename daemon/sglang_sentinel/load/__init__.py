"""The load engine: calibrated concurrent load and the figures it measured.

Used by `sentinel bench`, the calibration sweep and the daemon's scheduled loads::

    from sglang_sentinel.load import LoadSpec, RandomDataset, ArrivalProcess, LoadCounters, run_load

    spec = LoadSpec(
        base_url="http://127.0.0.1:30000",
        dataset=RandomDataset(input_len=256, output_len=256, range_ratio=1.0),
        arrival=ArrivalProcess.POISSON, request_rate=4.0, max_concurrency=64,
        num_requests=200, seed=1,
    )
    counters = LoadCounters()            # read counters.in_flight at any time
    result = await run_load(spec, counters=counters, cancel=stop_event)
    result.metrics.output_throughput     # tok/s, bench_serving's definition
    result.to_dict(details=False)        # bench_serving --output-file keys + ours
    format_result_block(result)          # bench_serving's printed block (same labels)

Metric definitions live in `sglang_sentinel.load.figures` (module docstring). A server's misbehaviour
never raises: each request ends as success or a counted failure reason
(`RunMetrics.failures`, `FailureReason`). Setting `cancel` returns the partial result.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_sentinel.lazy import lazy_exports

if TYPE_CHECKING:
    from sglang_sentinel.load.engine import RecordCallback, run_load
    from sglang_sentinel.load.figures import RunMetrics, SteadyState, compute_metrics
    from sglang_sentinel.load.records import FailureReason, LoadCounters, RequestRecord
    from sglang_sentinel.load.report import format_result_block
    from sglang_sentinel.load.result import RunResult
    from sglang_sentinel.load.session import make_session, resolve_model
    from sglang_sentinel.load.spec import (
        ArrivalProcess,
        Backend,
        DatasetSpec,
        JsonlDataset,
        LoadSpec,
        RandomDataset,
        SharedPrefixDataset,
        ShareGPTDataset,
        SpecError,
    )
    from sglang_sentinel.load.stats import Summary

__all__ = [
    "ArrivalProcess",
    "Backend",
    "DatasetSpec",
    "FailureReason",
    "JsonlDataset",
    "LoadCounters",
    "LoadSpec",
    "RandomDataset",
    "RecordCallback",
    "RequestRecord",
    "RunMetrics",
    "RunResult",
    "ShareGPTDataset",
    "SharedPrefixDataset",
    "SpecError",
    "SteadyState",
    "Summary",
    "compute_metrics",
    "format_result_block",
    "make_session",
    "resolve_model",
    "run_load",
]

# Imported on first use: the engine drags in aiohttp, httptools and the transport, and a
# package that only needs `LoadSpec` or `LoadCounters` (the scheduler's settings, the
# calibration model) should not pay for them.
__getattr__ = lazy_exports(
    __name__,
    {
        "RecordCallback": "sglang_sentinel.load.engine",
        "make_session": "sglang_sentinel.load.session",
        "resolve_model": "sglang_sentinel.load.session",
        "run_load": "sglang_sentinel.load.engine",
        "RunMetrics": "sglang_sentinel.load.figures",
        "SteadyState": "sglang_sentinel.load.figures",
        "compute_metrics": "sglang_sentinel.load.figures",
        "FailureReason": "sglang_sentinel.load.records",
        "LoadCounters": "sglang_sentinel.load.records",
        "RequestRecord": "sglang_sentinel.load.records",
        "format_result_block": "sglang_sentinel.load.report",
        "RunResult": "sglang_sentinel.load.result",
        "ArrivalProcess": "sglang_sentinel.load.spec",
        "Backend": "sglang_sentinel.load.spec",
        "DatasetSpec": "sglang_sentinel.load.spec",
        "JsonlDataset": "sglang_sentinel.load.spec",
        "LoadSpec": "sglang_sentinel.load.spec",
        "RandomDataset": "sglang_sentinel.load.spec",
        "ShareGPTDataset": "sglang_sentinel.load.spec",
        "SharedPrefixDataset": "sglang_sentinel.load.spec",
        "SpecError": "sglang_sentinel.load.spec",
        "Summary": "sglang_sentinel.load.stats",
    },
)
