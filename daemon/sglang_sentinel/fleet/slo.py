"""The optional SLO round of a fleet target: a few requests at fixed concurrency, their latencies.

The load engine (:mod:`sglang_sentinel.load`) does the work, through the OpenAI chat route (what a
router serves; the model is the first of ``/v1/models``). Small on purpose: a fleet measures
whether each target still meets its latency, not its capacity (that is the node's own
``sentinel run`` calibration).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from sglang_sentinel.fleet.settings import FleetSloSettings, FleetTarget
from sglang_sentinel.load import LoadSpec, run_load
from sglang_sentinel.load.spec import ArrivalProcess, Backend, RandomDataset

__all__ = ["SloResult", "run_slo", "slo_families"]


@dataclass(frozen=True, slots=True)
class SloResult:
    started: float  # wall clock
    completed: int
    failed: int
    ttft_p50: float | None  # seconds; None when nothing completed
    ttft_p99: float | None
    e2e_p99: float | None
    output_throughput: float  # tokens per second over the run


async def run_slo(target: FleetTarget, s: FleetSloSettings) -> SloResult:
    spec = LoadSpec(
        base_url=target.url,
        backend=Backend.OPENAI_CHAT,
        dataset=RandomDataset(input_len=s.input_len, output_len=s.output_len, range_ratio=1.0),
        arrival=ArrivalProcess.CLOSED,
        max_concurrency=s.max_concurrency,
        num_requests=s.num_requests,
        warmup_requests=0,
        api_key=target.api_key or None,
        request_timeout_s=s.timeout,
        drain_timeout_s=s.timeout,
    )
    started = time.time()
    cancel = asyncio.Event()
    try:
        async with asyncio.timeout(s.timeout):
            result = await run_load(spec, cancel=cancel)
    except TimeoutError:
        return SloResult(started, 0, s.num_requests, None, None, None, 0.0)
    m = result.metrics
    done = m.completed > 0
    return SloResult(
        started,
        m.completed,
        m.failed + m.cancelled,
        m.ttft.median if done else None,
        m.ttft.p99 if done else None,
        m.e2e.p99 if done else None,
        m.output_throughput,
    )


def slo_families(r: SloResult) -> list[Metric]:
    reqs = GaugeMetricFamily(
        "sentinel_fleet_slo_requests", "Requests of the latest SLO round, by outcome.", labels=["outcome"]
    )
    reqs.add_metric(["completed"], float(r.completed))
    reqs.add_metric(["failed"], float(r.failed))
    ttft = GaugeMetricFamily(
        "sentinel_fleet_slo_ttft_seconds", "Time to first token in the latest SLO round.", labels=["quantile"]
    )
    e2e = GaugeMetricFamily(
        "sentinel_fleet_slo_e2e_seconds", "End-to-end latency in the latest SLO round.", labels=["quantile"]
    )
    if r.ttft_p50 is not None and r.ttft_p99 is not None:
        ttft.add_metric(["0.5"], r.ttft_p50)
        ttft.add_metric(["0.99"], r.ttft_p99)
    if r.e2e_p99 is not None:
        e2e.add_metric(["0.99"], r.e2e_p99)
    tput = GaugeMetricFamily(
        "sentinel_fleet_slo_output_throughput_tokens_per_second",
        "Output tokens per second of the latest SLO round.",
    )
    tput.add_metric([], r.output_throughput)
    ts = GaugeMetricFamily("sentinel_fleet_slo_timestamp_seconds", "When the latest SLO round started.")
    ts.add_metric([], r.started)
    return [reqs, ttft, e2e, tput, ts]
