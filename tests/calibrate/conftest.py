"""A synthetic server for the search's unit tests: closed-form throughput, queue and latency.

Throughput rises linearly with concurrency (one stream = ``per_stream`` tok/s) and bends softly
into ``ceiling`` tok/s; past ``max_running`` requests the server queues the rest, which is what
SGLang's ``num_queue_reqs`` shows. Deterministic noise keeps the search honest about variance.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import UTC, datetime

import pytest

from sglang_sentinel.calibrate.model import Latency, ServerSignals, StepMeasurement, StepPlan


def _lat(x: float) -> Latency:
    return Latency(mean=x, p50=x, p90=1.3 * x, p95=1.4 * x, p99=1.6 * x)


@dataclass
class SyntheticServer:
    ceiling: float = 200.0
    per_stream: float = 12.5
    max_running: int | None = 24
    metrics: bool = True
    noise: float = 0.01
    error_from: int | None = None  # concurrency from which half the requests fail
    client_bound_from: int | None = None
    seed: int = 7
    # A step at one of these concurrencies reads this fraction of the true throughput (a noisy
    # window: the client lagged, a neighbour took the CPU), once: the next probe there reads true.
    dips: dict[int, float] = field(default_factory=dict)
    plans: list[StepPlan] = field(default_factory=list)

    def throughput(self, c: int) -> float:
        running = min(c, self.max_running) if self.max_running else c
        linear = running * self.per_stream
        k = 6.0
        return float(linear / (1 + (linear / self.ceiling) ** k) ** (1 / k))

    async def run_step(self, plan: StepPlan) -> StepMeasurement:
        self.plans.append(plan)
        rng = random.Random(self.seed * 1000 + len(self.plans))
        c = plan.concurrency
        thr = self.throughput(c) * (1 + rng.uniform(-self.noise, self.noise)) * self.dips.pop(c, 1.0)
        running = min(c, self.max_running) if self.max_running else c
        queue = c - running
        per_req = thr / running
        tpot = 1 / per_req
        ttft = 0.2 + 0.01 * running + queue * 128 / thr
        failed = plan.num_requests // 2 if self.error_from and c >= self.error_from else 0
        server = (
            ServerSignals(
                samples=10,
                queue_mean=float(queue),
                queue_max=float(queue),
                queue_nonzero_ratio=1.0 if queue > 0 else 0.0,
                running_mean=float(running),
                running_max=float(running),
                token_usage_mean=0.1,
                token_usage_max=0.1,
                retractions=0.0,
            )
            if self.metrics
            else None
        )
        duration = plan.num_requests * 128 / thr
        completed = plan.num_requests - failed
        return StepMeasurement(
            concurrency=c,
            started_at=datetime.now(UTC),
            duration=duration,
            sent=plan.num_requests,
            completed=completed,
            failed=failed,
            output_throughput=thr * 0.9,
            total_throughput=thr * 1.9,
            request_throughput=completed / duration,
            steady_output_throughput=thr,
            steady_total_throughput=thr * 2,
            mean_concurrency=c * 0.9,
            ttft=_lat(ttft),
            tpot=_lat(tpot),
            e2e=_lat(ttft + 128 * tpot),
            slo_met=completed,
            client_bound=bool(self.client_bound_from and c >= self.client_bound_from),
            client_notes=("p99 schedule lag 30 ms > 10 ms",) if self.client_bound_from else (),
            server=server,
        )

    @property
    def spent(self) -> int:
        return sum(p.num_requests for p in self.plans)


@pytest.fixture
def synthetic() -> type[SyntheticServer]:
    return SyntheticServer
