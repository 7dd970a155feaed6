"""The real executor of scheduled runs: a profile's plan through the load engine (``..load``)."""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from sglang_sentinel.collect.gpu.energy import EnergySample, LoadMeter
from sglang_sentinel.load import (
    ArrivalProcess,
    Backend,
    LoadCounters,
    LoadSpec,
    RandomDataset,
    RunResult,
    run_load,
)
from sglang_sentinel.schedule.metrics import RequestTimings, RunFigures
from sglang_sentinel.schedule.plan import WARMUP_REQUESTS, RunPlan, RunReport

__all__ = ["LoadEngineExecutor", "report_from_result", "spec_for"]


def spec_for(plan: RunPlan, base_url: str, api_key: str = "") -> LoadSpec:
    p = plan.settings
    if plan.request_rate is None:
        arrival, rate = ArrivalProcess.BURST, math.inf
    else:
        arrival, rate = ArrivalProcess.POISSON, plan.request_rate
    return LoadSpec(
        base_url=base_url,
        backend=Backend.parse(p.backend),
        dataset=RandomDataset(input_len=p.input_len, output_len=p.output_len, range_ratio=p.range_ratio),
        arrival=arrival,
        request_rate=rate,
        max_concurrency=plan.max_concurrency,
        num_requests=plan.num_prompts,
        warmup_requests=WARMUP_REQUESTS,
        seed=p.seed,
        api_key=api_key or None,
        # The run's own limit is enforced by the scheduler; a request never outlives it.
        request_timeout_s=p.timeout_seconds,
    )


def report_from_result(result: RunResult) -> RunReport:
    """Counters, figures and per-request latencies of one run, from the engine's result."""
    m = result.metrics
    requests: dict[str, int] = {"success": m.completed}
    failures = dict(m.failures)
    if not m.completed and not failures:
        # Every warm-up request failed, so the measured phase never ran: its failures are the cause.
        for r in result.records:
            if r.warmup and not r.success and r.failure:
                failures[str(r.failure)] = failures.get(str(r.failure), 0) + 1
    for reason, count in failures.items():
        requests[reason] = requests.get(reason, 0) + count
    if m.cancelled:
        requests["cancelled"] = m.cancelled
    timings = []
    for r in result.measured:
        if not r.success:
            continue
        tpot = None
        if r.latency is not None and r.ttft is not None and r.output_len > 1:
            tpot = (r.latency - r.ttft) / (r.output_len - 1)
        timings.append(RequestTimings(r.ttft, tpot, r.latency, r.itl))
    warmup_tokens = sum(
        (r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len) + r.output_len
        for r in result.records
        if r.warmup
    )
    summary: dict[str, Any] = {
        "duration": m.duration,
        "completed": m.completed,
        "failed": m.failed,
        "output_throughput": m.output_throughput,
        "total_throughput": m.total_throughput,
        "request_throughput": m.request_throughput,
        "concurrency_mean": m.concurrency,
        "concurrency_peak": m.peak_in_flight,
        "client_bound": m.client_bound,
        "client_bound_reasons": list(m.client_bound_reasons),
    }
    for name in ("ttft", "tpot", "itl", "e2e"):
        s = getattr(m, name)
        if s.count:
            summary[f"{name}_p50"] = s.median
            summary[f"{name}_p99"] = s.p99
    figures = None
    if m.completed:
        figures = RunFigures(
            output_throughput=m.output_throughput,
            total_throughput=m.total_throughput,
            concurrency_mean=m.concurrency,
            concurrency_peak=m.peak_in_flight,
            client_bound=m.client_bound,
            finished_at=time.time(),
        )
    return RunReport(
        requests=requests,
        input_tokens=m.total_input_tokens,
        output_tokens=m.total_output_tokens,
        figures=figures,
        timings=timings,
        summary=summary,
        cancelled=result.cancelled,
        warmup_tokens=warmup_tokens,
        spent_tokens=sum(r.spent_tokens() for r in result.records),
        failures=dict(sorted(failures.items())),
        notes=list(result.notes),
    )


class LoadEngineExecutor:
    """Runs a plan against the server at ``base_url``; with ``energy``, meters its GPUs too."""

    def __init__(self, base_url: str, api_key: str = "", energy: LoadMeter | None = None) -> None:
        self.base_url = base_url
        self.api_key = api_key
        self.energy = energy

    async def __call__(self, plan: RunPlan, counters: LoadCounters, cancel: asyncio.Event) -> RunReport:
        spec = spec_for(plan, self.base_url, self.api_key)
        meter = self.energy
        if meter is None:
            return report_from_result(await run_load(spec, counters=counters, cancel=cancel))
        # The warm-up is load too: the idle gap ends before it, the measured window opens after it,
        # so that the energy and the output tokens it is divided by cover the same requests.
        await meter.load_started()
        window: list[EnergySample] = []

        async def open_window() -> None:
            window.append(await meter.sample())

        async def close_window() -> None:
            # At the last response: the figures computed after it are not in the window.
            if window:
                window.append(await meter.sample())

        # A run that raises leaves the baseline without an open gap (load_started closed it), so
        # no later baseline spans it.
        result = await run_load(
            spec, counters=counters, cancel=cancel, before_measured=open_window, after_measured=close_window
        )
        report = report_from_result(result)
        start = window[0] if window else None
        end = window[1] if len(window) > 1 else None
        report.energy = await meter.load_ended(start, result.metrics.total_output_tokens, end)
        return report
