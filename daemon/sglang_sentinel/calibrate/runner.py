"""The production step runner: one closed-loop ``sglang_sentinel.load`` run per step, /metrics sampled.

A step is a closed loop (``c`` requests always in flight) of ``plan.num_requests`` requests with
the calibration workload, no warm-up (the search's first, lowest step warms the server up at
little cost), the same seed every step so that every step draws the same prompt and output
lengths and steps differ only in concurrency.
"""

from __future__ import annotations

import dataclasses
from datetime import UTC, datetime

import httpx

from sglang_sentinel.calibrate.model import Latency, ServerSignals, StepEnergy, StepMeasurement, StepPlan
from sglang_sentinel.calibrate.settings import CalibrationSettings, SloSettings
from sglang_sentinel.calibrate.signals import ServerSampler
from sglang_sentinel.collect.gpu.energy import EnergySample, LoadMeter
from sglang_sentinel.httpread import tls_context
from sglang_sentinel.load import ArrivalProcess, LoadCounters, LoadSpec, RequestRecord, RunResult, Summary

__all__ = ["LoadStepRunner", "measurement_from_run"]


def _latency(s: Summary) -> Latency | None:
    if s.count == 0:
        return None
    return Latency(mean=s.mean, p50=s.median, p90=s.p90, p95=s.p95, p99=s.p99)


def _meets_slo(r: RequestRecord, slo: SloSettings) -> bool:
    """Goodput's per-request test (vLLM/DistServe): every configured limit met by this request."""
    if slo.ttft_seconds is not None and (r.ttft is None or r.ttft > slo.ttft_seconds):
        return False
    if slo.e2e_seconds is not None and (r.latency is None or r.latency > slo.e2e_seconds):
        return False
    return not (
        slo.tpot_seconds is not None
        and r.output_len > 1
        and r.latency is not None
        and r.ttft is not None
        and (r.latency - r.ttft) / (r.output_len - 1) > slo.tpot_seconds
    )


def measurement_from_run(
    result: RunResult, concurrency: int, slo: SloSettings, server: ServerSignals | None = None
) -> StepMeasurement:
    m = result.metrics
    measured = result.measured
    sent = sum(1 for r in measured if r.dispatched)
    ok = [r for r in measured if r.success]
    # A window too short to hold a token reads as 0 tok/s: that is "no steady state", not a figure.
    steady_out = m.steady_state.output_throughput if m.steady_state else None
    if steady_out is not None and steady_out <= 0:
        steady_out = None
    steady_total = None
    if steady_out is not None and m.output_throughput > 0:
        # Input tokens are not streamed, so they have no arrival times to window; the run's own
        # input:output mix is applied to the steady-state output rate instead.
        steady_total = steady_out * m.total_throughput / m.output_throughput
    return StepMeasurement(
        concurrency=concurrency,
        started_at=datetime.fromtimestamp(result.started_at, UTC),
        duration=m.duration,
        sent=sent,
        completed=m.completed,
        failed=m.failed + m.cancelled,
        failure_reasons={**m.failures, **({"cancelled": m.cancelled} if m.cancelled else {})},
        output_throughput=m.output_throughput,
        total_throughput=m.total_throughput,
        request_throughput=m.request_throughput,
        steady_output_throughput=steady_out,
        steady_total_throughput=steady_total,
        mean_concurrency=m.concurrency,
        ttft=_latency(m.ttft),
        tpot=_latency(m.tpot),
        e2e=_latency(m.e2e),
        slo_met=sum(1 for r in ok if _meets_slo(r, slo)),
        client_bound=m.client_bound,
        client_notes=tuple(m.client_bound_reasons),
        schedule_lag_p99=m.schedule_lag.p99 if m.schedule_lag.count else None,
        loop_lag_p99=m.loop_lag.p99 if m.loop_lag.count else None,
        server=server,
    )


class LoadStepRunner:
    """Runs each step with ``sglang_sentinel.load.run_load`` while sampling the server's /metrics."""

    def __init__(
        self,
        base: LoadSpec,
        settings: CalibrationSettings,
        *,
        metrics_url: str | None = None,
        metrics_headers: dict[str, str] | None = None,
        energy: LoadMeter | None = None,
        idle_seconds: float = 0.0,
    ) -> None:
        self.base = base
        # The server's GPUs' energy per step (None: not metered).
        self.energy = energy
        # sentinel sweep: the GPUs' idle draw measured over this long before the first step (the
        # daemon's baseline comes from the gaps between its loads instead).
        self.idle_seconds = idle_seconds
        self._idle_done = False
        self.settings = settings
        self.metrics_url = metrics_url if metrics_url is not None else base.base_url + "/metrics"
        self.metrics_headers = metrics_headers or {}
        # Live counters of the step in progress (the progress bar reads them); None between steps.
        self.counters: LoadCounters | None = None
        self.metrics_note: str | None = None

    def spec_for(self, plan: StepPlan) -> LoadSpec:
        return dataclasses.replace(
            self.base,
            arrival=ArrivalProcess.CLOSED,
            max_concurrency=plan.concurrency,
            num_requests=plan.num_requests,
            duration_s=None,
            warmup_requests=0,
            steady_state_fraction=self.settings.steady_fraction,
        )

    async def run_step(self, plan: StepPlan) -> StepMeasurement:
        from sglang_sentinel.load import run_load

        spec = self.spec_for(plan)
        counters = LoadCounters()
        self.counters = counters
        try:
            async with httpx.AsyncClient(
                timeout=httpx.Timeout(5.0),
                headers=self.metrics_headers,
                trust_env=False,
                verify=tls_context(trust_env=False),
            ) as client:
                sampler = ServerSampler(client, self.metrics_url, self.settings.metrics_interval)
                meter = self.energy
                if meter is not None and self.idle_seconds > 0 and not self._idle_done:
                    self._idle_done = True
                    await meter.measure_idle(self.idle_seconds)
                # A step has no warm-up: the window is the measured phase, from its clock's start
                # to its last response (the engine's hooks), none of the ready check before it.
                edges: list[EnergySample] = []

                async def opened() -> None:
                    if meter is not None:
                        edges.append(await meter.load_started())

                async def closed() -> None:
                    if meter is not None and edges:
                        edges.append(await meter.sample())

                async with sampler:
                    result = await run_load(
                        spec, counters=counters, before_measured=opened, after_measured=closed
                    )
                energy = None
                if meter is not None:
                    start = edges[0] if edges else None
                    end = edges[1] if len(edges) > 1 else None
                    figures = await meter.load_ended(start, result.metrics.total_output_tokens, end)
                    energy = StepEnergy.of(figures)
                if sampler.disabled_reason is not None:
                    self.metrics_note = sampler.disabled_reason
                steady = result.metrics.steady_state
                window = (
                    (result.started_at + steady.start, result.started_at + steady.end) if steady else None
                )
                server = sampler.summary(window)
        finally:
            self.counters = None
        measurement = measurement_from_run(result, plan.concurrency, self.settings.slo, server)
        return measurement.model_copy(update={"energy": energy}) if energy is not None else measurement
