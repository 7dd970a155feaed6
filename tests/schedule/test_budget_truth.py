"""The budget charges what the server spent, failed, partial and cancelled requests included.

Against the simulator's ground truth (its control API's /requests: what it really did for every
request). Each scenario is one scheduled run through the real load engine: a clean run, a 503
storm, in-band errors, a run cancelled mid-way, and a server SIGKILLed mid-run (its truth is read
until it dies; requests in flight then count at the most the server could have spent on them).
Every run is charged at least its truth. Then 60 random histories in virtual time replay these
runs through the real TokenBudget: the worst sliding hour of the server's real spending never
exceeds the budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import random
import signal
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from sglang_sentinel.schedule.budget import WINDOW_SECONDS, TokenBudget
from sglang_sentinel.schedule.executor import LoadEngineExecutor
from sglang_sentinel.schedule.metrics import ScheduleMetrics
from sglang_sentinel.schedule.plan import RunPlan, RunReport
from sglang_sentinel.schedule.polite import ServerLoadReader
from sglang_sentinel.schedule.scheduler import LoadScheduler
from sglang_sentinel.schedule.settings import ScheduleSettings
from sglang_sentinel.statedir import StateDir
from support.loopback import HTTP
from support.waits import until

pytestmark = pytest.mark.slow

PROFILE = {"num_prompts": 24, "request_rate": 48, "input_len": 48, "output_len": 48, "run_on_ready": False}


class ReadyServer:
    def __init__(self) -> None:
        self.epoch = 0.0

    def ready_epoch(self) -> float | None:
        return self.epoch

    def launch_hash(self) -> str | None:
        return "sim"

    def started_warm(self) -> bool:
        return True


class Recording(LoadEngineExecutor):
    """The real executor, keeping the engine's per-request records for the comparison."""

    def __init__(self, base_url: str) -> None:
        super().__init__(base_url)
        self.records: list[Any] = []

    async def __call__(self, plan: RunPlan, counters: Any, cancel: asyncio.Event) -> RunReport:
        from sglang_sentinel.load import run_load
        from sglang_sentinel.schedule.executor import report_from_result, spec_for

        result = await run_load(spec_for(plan, self.base_url), counters=counters, cancel=cancel)
        self.records = list(result.records)
        return report_from_result(result)


@dataclass(frozen=True)
class Sample:
    scenario: str
    charged: int  # what the budget was charged
    truth: int  # what the server spent (or, for requests lost with it, could have)
    failed_truth: int  # of which on requests that did not succeed
    success_only: int  # what the successful requests alone spent (the old charge)


class Clock:
    """Virtual time for the histories."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class TruthPoller:
    """Reads the simulator's truth until it dies: the last good answer is kept."""

    def __init__(self, control_url: str) -> None:
        self.url = control_url + "/requests"
        self.records: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(httpx.HTTPError, ValueError):
                self.records = HTTP.get(self.url, timeout=2).json()["requests"]
            self._stop.wait(0.05)

    def __enter__(self) -> TruthPoller:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(5)
        with contextlib.suppress(httpx.HTTPError, ValueError):
            self.records = HTTP.get(self.url, timeout=2).json()["requests"]


def truth_spent(records: list[Any], truth: list[dict[str, Any]]) -> tuple[int, int]:
    """(total, on failed requests): the server's tokens for the run's requests."""
    by_rid = {t["rid"]: t for t in truth}
    total = failed = 0
    for rec in records:
        if not rec.dispatched:
            continue
        t = by_rid.get(rec.rid)
        if t is None:
            if rec.failure == "connect_error" or (rec.http_status or 0) >= 400:
                continue  # never reached the server, or answered (503) before its engine saw it
            if rec.success and rec.prompt_tokens is not None:
                # Finished after the last read of the truth (the server was then killed): the
                # server's own usage report of it.
                spent = rec.prompt_tokens + rec.output_len
            else:
                # Lost with the server (killed while it ran): the most it could have spent.
                spent = rec.prompt_len + rec.planned_output_len
        else:
            spent = int(t["prompt_tokens"]) + int(t["completion_tokens"])
        total += spent
        if not rec.success:
            failed += spent
    return total, failed


async def one_run(
    tmp_path: Path, sim: Any, scenario: str, action: Callable[[LoadScheduler], Any] | None = None
) -> Sample:
    settings = ScheduleSettings.model_validate(
        {
            "warmup_seconds": 0,
            "reference_exclusion_seconds": 0,
            "profiles": {"ref": PROFILE},
            "polite": {"enabled": False},
            # The breaker must not cut the fault scenarios short before they spend anything.
            "breaker": {"check_interval_seconds": 0.1, "min_requests": 10_000},
        }
    )
    executor = Recording(sim.base_url)
    state = tmp_path / scenario
    state.mkdir()
    reader = ServerLoadReader(sim.base_url, "metrics", 2.0)
    sched = LoadScheduler(
        settings,
        server=ReadyServer(),
        executor=executor,
        metrics=ScheduleMetrics(),
        state=StateDir(state),
        load_reader=reader,
    )
    sim.control("/reset", "POST")
    try:
        with TruthPoller(sim.control_url) as poller:
            task = asyncio.ensure_future(sched.fire("ref"))
            if action is not None:
                await action(sched)
            outcome = await asyncio.wait_for(task, 60)
    finally:
        await reader.aclose()
    assert outcome, outcome
    record = StateDir(state).history("runs.jsonl")[-1]
    total, failed = truth_spent(executor.records, poller.records)
    success_only = sum(r.spent_tokens() for r in executor.records if r.success)
    return Sample(scenario, int(record["budget_tokens"]), total, failed, success_only)


async def _when_sent(sched: LoadScheduler, n: int) -> None:
    def sent() -> bool:
        current = sched._current
        return current is not None and current.counters.sent >= n

    await until(sent, what=f"{n} requests sent")


async def test_every_run_is_charged_its_truth_and_no_sliding_hour_overspends(
    tmp_path: Path, sim_factory: Callable[..., Any]
) -> None:
    samples: list[Sample] = []
    sim = sim_factory("--speed", "50")
    samples.append(await one_run(tmp_path, sim, "clean"))
    sim.control("/faults", "POST", {"name": "http_503", "params": {"rate": 0.6}})
    samples.append(await one_run(tmp_path, sim, "storm_503"))
    sim.control("/faults", "DELETE")
    sim.control("/faults", "POST", {"name": "error_chunk", "params": {"rate": 0.5, "tokens": 8}})
    samples.append(await one_run(tmp_path, sim, "error_chunk"))
    sim.control("/faults", "DELETE")

    async def cancel(sched: LoadScheduler) -> None:
        await _when_sent(sched, 8)
        await sched.cancel_current("shutdown")

    samples.append(await one_run(tmp_path, sim, "cancelled", cancel))
    victim = sim_factory("--speed", "20")

    async def kill(sched: LoadScheduler) -> None:
        await _when_sent(sched, 10)
        os.kill(victim.pid, signal.SIGKILL)

    samples.append(await one_run(tmp_path, victim, "killed", kill))

    print(*samples, sep="\n")  # the figures, shown with -s
    for s in samples:
        assert s.charged >= s.truth, s
    faulty = {s.scenario: s for s in samples}
    for name in ("storm_503", "error_chunk", "cancelled", "killed"):
        assert faulty[name].charged > faulty[name].success_only, faulty[name]  # failures are charged
    for name in ("error_chunk", "cancelled", "killed"):
        assert faulty[name].failed_truth > 0, faulty[name]  # the server did spend on failures

    # 60 histories in virtual time through the real budget, with these runs' real figures.
    reservation = PROFILE["num_prompts"] * (PROFILE["input_len"] + PROFILE["output_len"])
    reservation += PROFILE["input_len"] + PROFILE["output_len"]  # the warm-up request
    assert all(s.charged <= reservation for s in samples)
    rng = random.Random(20260807)
    worst_ratio = 0.0
    for _ in range(60):
        limit = rng.randint(2, 6) * reservation + rng.randint(0, reservation)
        clock = Clock()
        budget = TokenBudget(limit, clock=clock)
        runs: list[tuple[float, float, int]] = []  # (start, end, truth)
        for _ in range(rng.randint(20, 80)):
            clock.now += rng.choice([rng.uniform(0, 120), rng.uniform(0, 1200)])
            entry = budget.reserve(reservation)
            if entry is None:
                continue
            s = rng.choice(samples)
            start = clock.now
            clock.now += rng.uniform(1, 900)
            budget.settle(entry, s.charged)
            runs.append((start, clock.now, s.truth))
        # A run's spending may fall anywhere in it: every hour it overlaps gets all of it.
        for t in {r[0] for r in runs} | {r[1] - WINDOW_SECONDS for r in runs}:
            hour = sum(truth for start, end, truth in runs if start < t + WINDOW_SECONDS and end > t)
            assert hour <= limit, (hour, limit)
            worst_ratio = max(worst_ratio, hour / limit)
    print(f"worst sliding hour: {worst_ratio:.3f} of the budget")
    assert worst_ratio > 0.5  # the histories did press against the budget
