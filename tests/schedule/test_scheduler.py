"""The scheduler core with fakes at its boundaries: server view, load reader, executor."""

from __future__ import annotations

import asyncio
import itertools
import socket
import time
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from structlog.testing import capture_logs

from sglang_sentinel.load.records import LoadCounters
from sglang_sentinel.schedule.executor import LoadEngineExecutor
from sglang_sentinel.schedule.metrics import RequestTimings, RunFigures, ScheduleMetrics
from sglang_sentinel.schedule.plan import RunPlan, RunReport
from sglang_sentinel.schedule.polite import LoadReadError, ServerLoad
from sglang_sentinel.schedule.scheduler import LoadScheduler
from sglang_sentinel.schedule.settings import LoadProfileSettings, ScheduleSettings
from sglang_sentinel.statedir import StateDir
from support.waits import until


class FakeServer:
    def __init__(self, epoch: float | None) -> None:
        self.epoch = epoch
        self.hash = "abc123"
        self.warm = False

    def ready_epoch(self) -> float | None:
        return self.epoch

    def launch_hash(self) -> str | None:
        return self.hash

    def started_warm(self) -> bool:
        return self.warm


class FakeLoad:
    def __init__(self, running: float = 0, queued: float = 0, usage: float | None = 0.1) -> None:
        self.running = running
        self.queued = queued
        self.usage = usage
        self.counters: LoadCounters | None = None
        self.fail = False

    async def read(self) -> ServerLoad:
        if self.fail:
            raise LoadReadError("HTTP 500")
        own = self.counters.in_flight if self.counters else 0
        return ServerLoad(self.running + own, self.queued, self.usage)


class FakeExecutor:
    """Sends `num_prompts` requests over `duration` seconds; can fail a share of them."""

    def __init__(self, duration: float = 0.2, fail_ratio: float = 0.0, load: FakeLoad | None = None) -> None:
        self.duration = duration
        self.fail_ratio = fail_ratio
        self.load = load
        self.plans: list[RunPlan] = []
        self.active = 0
        self.max_active = 0
        self.intervals: list[tuple[float, float]] = []

    async def __call__(self, plan: RunPlan, counters: LoadCounters, cancel: asyncio.Event) -> RunReport:
        self.plans.append(plan)
        self.active += 1
        self.max_active = max(self.max_active, self.active)
        if self.load is not None:
            self.load.counters = counters
        start = time.monotonic()
        try:
            n = plan.num_prompts
            counters.in_flight = n
            failed = 0
            for i in range(n):
                if cancel.is_set():
                    break
                await asyncio.sleep(self.duration / n)
                counters.in_flight -= 1
                if i < n * self.fail_ratio:
                    counters.failed += 1
                    failed += 1
                else:
                    counters.completed += 1
                    counters.output_tokens += plan.settings.output_len
            ok = counters.completed
            return RunReport(
                requests={"success": ok, "http_500": failed, "cancelled": counters.in_flight},
                input_tokens=ok * plan.settings.input_len,
                output_tokens=ok * plan.settings.output_len,
                figures=RunFigures(100.0 * plan.scale, 200.0, 4.0, 8, False, time.time()),
                timings=[RequestTimings(0.05, 0.01, 1.0, [0.01, 0.02]) for _ in range(ok)],
                summary={
                    "output_throughput": 100.0 * plan.scale,
                    "total_throughput": 200.0,
                    "concurrency_mean": 4.0,
                    "concurrency_peak": 8,
                },
            )
        finally:
            self.active -= 1
            self.intervals.append((start, time.monotonic()))


def profile(**kw: Any) -> LoadProfileSettings:
    base: dict[str, Any] = {
        "num_prompts": 10,
        "input_len": 10,
        "output_len": 10,
        "interval_seconds": 3600,
        "run_on_ready": False,
    }
    base.update(kw)
    return LoadProfileSettings(**base)


def settings(**kw: Any) -> ScheduleSettings:
    base: dict[str, Any] = {
        "warmup_seconds": 0,
        "reference_exclusion_seconds": 0,
        "profiles": {"ref": profile()},
        "polite": {"check_interval_seconds": 0.02},
        "breaker": {"check_interval_seconds": 0.02, "min_requests": 4},
    }
    base.update(kw)
    return ScheduleSettings(**base)


def make(
    tmp_path: Path,
    s: ScheduleSettings,
    executor: FakeExecutor,
    server: FakeServer | None = None,
    load: FakeLoad | None = None,
) -> LoadScheduler:
    return LoadScheduler(
        s,
        server=server or FakeServer(time.time() - 100),
        executor=executor,
        metrics=ScheduleMetrics(),
        state=StateDir(tmp_path),
        load_reader=load if load is not None else FakeLoad(),
    )


def sample(sched: LoadScheduler, name: str, **labels: str) -> float | None:
    reg = CollectorRegistry()
    reg.register(sched.metrics)
    return reg.get_sample_value(name, labels)


async def test_completed_run_feeds_reference_series(tmp_path: Path) -> None:
    sched = make(tmp_path, settings(), FakeExecutor())
    assert await sched.fire("ref") == "completed"
    assert sample(sched, "sentinel_load_runs_total", profile="ref", outcome="completed") == 1
    assert sample(sched, "sentinel_load_requests_total", profile="ref", outcome="success") == 10
    assert sample(sched, "sentinel_load_output_tokens_total", profile="ref") == 100
    assert sample(sched, "sentinel_load_output_throughput_tokens_per_second", profile="ref") == 100
    assert sample(sched, "sentinel_request_e2e_seconds_count", profile="ref") == 10
    assert sample(sched, "sentinel_request_itl_seconds_count", profile="ref") == 20
    runs = StateDir(tmp_path).history("runs.jsonl")
    assert runs[-1]["launch_hash"] == "abc123"
    assert runs[-1]["reference"] is True
    # The exposition is valid Prometheus text, every family sentinel's own.
    reg = CollectorRegistry()
    reg.register(sched.metrics)
    families = [f.name for f in text_string_to_metric_families(generate_latest(reg).decode())]
    assert "sentinel_load_runs" in families  # (the parser names a counter without _total)
    assert all(name.startswith("sentinel_") for name in families), families


async def test_schedules_fire_and_never_overlap(tmp_path: Path) -> None:
    ex = FakeExecutor(duration=0.6)
    s = settings(
        profiles={"a": profile(interval_seconds=0.1), "b": profile(interval_seconds=0.13)},
    )
    sched = make(tmp_path, s, ex)
    ticks: list[float] = []

    async def probe() -> None:
        ticks.append(time.monotonic())

    await sched.start()
    sched.add_interval_job("probe:health", probe, 0.05)
    # Three runs started: two whole ones behind them, and the due ones in between skipped.
    await until(lambda: len(ex.plans) >= 3 and len(ticks) >= 20, what="three runs and twenty probes")
    await sched.stop()
    assert ex.max_active == 1
    ordered = sorted(ex.intervals)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(ordered))
    busy = sum(sample(sched, "sentinel_load_skipped_total", profile=p, reason="busy") or 0 for p in "ab")
    coalesced = sum(
        sample(sched, "sentinel_schedule_coalesced_total", job=f"load:{p}", reason="running") or 0
        for p in "ab"
    )
    assert busy >= 1
    assert coalesced >= 1
    # Probes kept running while loads ran: every whole run saw one (a probe queued behind a run
    # would fire only after it; a gap's length would be the box's load, not the scheduler's). The
    # run the stop cut short may be too short to see one.
    whole = [(start, end) for start, end in ex.intervals if end - start >= ex.duration]
    assert len(whole) >= 2, ex.intervals
    assert all(any(start < t < end for t in ticks) for start, end in whole), (ex.intervals, ticks)


async def test_not_ready_and_warmup_skip(tmp_path: Path) -> None:
    server = FakeServer(None)
    sched = make(tmp_path, settings(warmup_seconds=30), FakeExecutor(), server=server)
    assert await sched.fire("ref") == "skipped:server_not_ready"
    server.epoch = time.time() - 1
    assert await sched.fire("ref") == "skipped:warmup"
    server.epoch = time.time() - 31
    assert await sched.fire("ref") == "completed"


async def test_restart_window_excludes_from_reference(tmp_path: Path) -> None:
    server = FakeServer(time.time() - 2)
    sched = make(tmp_path, settings(reference_exclusion_seconds=60), FakeExecutor(), server=server)
    assert await sched.fire("ref") == "completed"
    assert sample(sched, "sentinel_load_runs_excluded_total", profile="ref", reason="restart_window") == 1
    assert sample(sched, "sentinel_load_output_throughput_tokens_per_second", profile="ref") is None
    assert sample(sched, "sentinel_request_ttft_seconds_count", profile="ref") in (None, 0)
    # Still counted as synthetic traffic, and in the history with the epoch it ran in.
    assert sample(sched, "sentinel_load_requests_total", profile="ref", outcome="success") == 10
    record = StateDir(tmp_path).history("runs.jsonl")[-1]
    assert record["reference"] is False
    assert record["server_epoch"] == server.epoch
    server.epoch = time.time() - 61
    assert await sched.fire("ref") == "completed"
    assert sample(sched, "sentinel_load_output_throughput_tokens_per_second", profile="ref") == 100


async def test_server_restart_mid_run_aborts(tmp_path: Path) -> None:
    server = FakeServer(time.time() - 100)
    sched = make(tmp_path, settings(), FakeExecutor(duration=2.0), server=server)
    task = asyncio.create_task(sched.fire("ref"))
    await asyncio.sleep(0.2)
    server.epoch = time.time()
    assert await asyncio.wait_for(task, 2) == "aborted:server_restart"
    assert sample(sched, "sentinel_load_aborts_total", profile="ref", reason="server_restart") == 1


@pytest.mark.parametrize(("running", "expected", "prompts"), [(0, "completed", 10), (9, "completed", 7)])
async def test_foreign_traffic_shrinks(tmp_path: Path, running: int, expected: str, prompts: int) -> None:
    load = FakeLoad(running=running)
    ex = FakeExecutor(load=load)
    s = settings(polite={"shrink_above": 2, "skip_above": 20, "shrink_capacity_requests": 32, "tolerance": 1})
    sched = make(tmp_path, s, ex, load=load)
    assert await sched.fire("ref") == expected
    assert ex.plans[-1].num_prompts == prompts
    if running:
        assert sample(sched, "sentinel_load_shrunk_total", profile="ref", reason="foreign_traffic") == 1
        assert sample(sched, "sentinel_load_runs_excluded_total", profile="ref", reason="shrunk") == 1


async def test_foreign_traffic_skips_and_aborts(tmp_path: Path) -> None:
    load = FakeLoad(running=30)
    ex = FakeExecutor(duration=1.0, load=load)
    sched = make(tmp_path, settings(polite={"skip_above": 16, "check_interval_seconds": 0.02}), ex, load=load)
    assert await sched.fire("ref") == "skipped:foreign_traffic"
    assert not ex.plans
    # Traffic arrives mid-run: our own in-flight requests do not count, the newcomers do.
    load.running = 0
    task = asyncio.create_task(sched.fire("ref"))
    await asyncio.sleep(0.2)
    load.running = 25
    assert await asyncio.wait_for(task, 2) == "aborted:foreign_traffic"
    assert sample(sched, "sentinel_load_aborts_total", profile="ref", reason="foreign_traffic") == 1


async def test_unreadable_load_policy(tmp_path: Path) -> None:
    load = FakeLoad()
    load.fail = True
    sched = make(tmp_path, settings(polite={"on_unknown": "skip"}), FakeExecutor(), load=load)
    assert await sched.fire("ref") == "skipped:load_unknown"
    sched2 = make(tmp_path / "2", settings(), FakeExecutor(), load=load)
    (tmp_path / "2").mkdir()
    assert await sched2.fire("ref") == "completed"


async def test_breaker_aborts_on_errors(tmp_path: Path) -> None:
    ex = FakeExecutor(duration=1.0, fail_ratio=1.0)
    sched = make(tmp_path, settings(profiles={"ref": profile(num_prompts=40)}), ex)
    assert await sched.fire("ref") == "aborted:error_ratio"
    assert sample(sched, "sentinel_load_aborts_total", profile="ref", reason="error_ratio") == 1
    assert sample(sched, "sentinel_load_runs_total", profile="ref", outcome="aborted") == 1
    assert sample(sched, "sentinel_load_requests_total", profile="ref", outcome="http_500") in (4, 5, 6)


async def test_breaker_aborts_on_kv_usage(tmp_path: Path) -> None:
    load = FakeLoad(usage=0.995)
    sched = make(tmp_path, settings(), FakeExecutor(duration=1.0, load=load), load=load)
    assert await sched.fire("ref") == "aborted:kv_usage"


async def test_budget_holds(tmp_path: Path) -> None:
    # 10 prompts x 20 tokens + 1 warm-up = 220 reserved per full run, 200 really spent; 500 per hour.
    s = settings(budget={"tokens_per_hour": 500, "min_prompts": 3})
    ex = FakeExecutor(duration=0.05)
    sched = make(tmp_path, s, ex)
    outcomes = [await sched.fire("ref") for _ in range(4)]
    # 100 left after two runs: a shrunk run of 4 prompts (+ warm-up) fits; then 20 left: skipped.
    assert outcomes == ["completed", "completed", "completed", "skipped:budget"]
    assert [p.num_prompts for p in ex.plans] == [10, 10, 4]
    assert sched.budget.spent() <= 500
    assert sample(sched, "sentinel_budget_remaining_tokens") == 500 - sched.budget.spent()
    # The spending survives a daemon restart.
    again = make(tmp_path, s, FakeExecutor())
    again.restore()
    assert again.budget.spent() == sched.budget.spent()
    assert await again.fire("ref") == "skipped:budget"


async def test_a_restart_exports_the_last_reference_run_from_history_marked_restored(
    tmp_path: Path,
) -> None:
    s = settings(profiles={"ref": profile(), "other": profile()})
    first = make(tmp_path, s, FakeExecutor())
    assert await first.fire("ref") == "completed"
    finished = StateDir(tmp_path).history("runs.jsonl")[-1]["finished_at"]
    assert sample(first, "sentinel_load_last_run_restored", profile="ref") == 0
    # Later runs fail: they are on record but no reference, so they do not move the timestamp.
    failing = make(tmp_path, s, FakeExecutor(fail_ratio=1.0))
    assert await failing.fire("ref") == "aborted:error_ratio"

    again = make(tmp_path, s, FakeExecutor())
    assert sample(again, "sentinel_load_last_run_timestamp_seconds", profile="ref") is None
    again.restore()
    # From the first scrape after the restart: the last reference run's time and figures.
    assert sample(again, "sentinel_load_last_run_timestamp_seconds", profile="ref") == finished
    assert sample(again, "sentinel_load_output_throughput_tokens_per_second", profile="ref") == 100
    assert sample(again, "sentinel_load_concurrency_peak", profile="ref") == 8
    assert sample(again, "sentinel_load_client_bound", profile="ref") == 0
    assert sample(again, "sentinel_load_last_run_restored", profile="ref") == 1
    # A profile that never had a reference run has nothing to restore: absent, not 0.
    assert sample(again, "sentinel_load_last_run_timestamp_seconds", profile="other") is None
    assert sample(again, "sentinel_load_last_run_restored", profile="other") is None
    # The first run of this daemon life replaces the restored figures.
    assert await again.fire("ref") == "completed"
    assert sample(again, "sentinel_load_last_run_restored", profile="ref") == 0
    assert (sample(again, "sentinel_load_last_run_timestamp_seconds", profile="ref") or 0) > finished


async def test_a_profile_no_longer_configured_is_not_restored(tmp_path: Path) -> None:
    first = make(tmp_path, settings(profiles={"gone": profile()}), FakeExecutor())
    assert await first.fire("gone") == "completed"
    again = make(tmp_path, settings(), FakeExecutor())
    again.restore()
    assert sample(again, "sentinel_load_last_run_timestamp_seconds", profile="gone") is None
    assert sample(again, "sentinel_load_last_run_restored", profile="gone") is None


async def test_budget_shrinks_to_fit(tmp_path: Path) -> None:
    s = settings(budget={"tokens_per_hour": 400, "min_prompts": 3})
    ex = FakeExecutor(duration=0.05)
    sched = make(tmp_path, s, ex)
    assert await sched.fire("ref") == "completed"
    assert await sched.fire("ref") == "completed"
    assert ex.plans[1].num_prompts == 9  # 200 left: 10 x 20, one of them for the warm-up
    assert sched.budget.spent() <= 400
    assert sample(sched, "sentinel_load_shrunk_total", profile="ref", reason="budget") == 1


async def test_stop_cancels_the_run(tmp_path: Path) -> None:
    sched = make(tmp_path, settings(), FakeExecutor(duration=5.0))
    await sched.start()
    task = asyncio.create_task(sched.fire("ref"))
    await asyncio.sleep(0.2)
    await asyncio.wait_for(sched.stop(), 2)
    assert await task == "cancelled:shutdown"
    assert sample(sched, "sentinel_load_runs_total", profile="ref", outcome="cancelled") == 1


async def test_run_on_ready_fires_after_the_window(tmp_path: Path) -> None:
    server = FakeServer(None)
    ex = FakeExecutor(duration=0.05)
    s = settings(
        profiles={"ref": profile(run_on_ready=True)}, warmup_seconds=0.2, reference_exclusion_seconds=0.4
    )
    sched = make(tmp_path, s, ex, server=server)
    await sched.start()
    try:
        server.epoch = time.time()
        await until(lambda: sample(sched, "sentinel_load_output_throughput_tokens_per_second", profile="ref"))
        assert len(ex.plans) == 1
        assert sample(sched, "sentinel_load_output_throughput_tokens_per_second", profile="ref") == 100
        restarts = StateDir(tmp_path).history("restarts.jsonl")
        assert restarts[-1]["ready_at"] == server.epoch
    finally:
        await sched.stop()
    # A daemon restart that sees the same server life records no new restart.
    again = make(tmp_path, s, FakeExecutor(), server=server)
    again.restore()
    await again.start()
    await again.stop()
    assert len(StateDir(tmp_path).history("restarts.jsonl")) == 1


async def test_reload_changes_jobs_and_budget(tmp_path: Path) -> None:
    sched = make(tmp_path, settings(), FakeExecutor())
    await sched.start()
    try:
        assert "load:ref" in sched.next_runs()
        sched.reload(settings(profiles={"other": profile()}, budget={"tokens_per_hour": 7}))
        assert "load:other" in sched.next_runs()
        assert "load:ref" not in sched.next_runs()
        assert sched.budget.tokens_per_hour == 7
    finally:
        await sched.stop()


async def test_a_reload_keeps_the_due_reference_run_and_every_unchanged_schedule(tmp_path: Path) -> None:
    """SIGHUP just before the reference run due after a (re)start: that run still fires when it
    was due, the unchanged profile keeps its next run, only the profile whose timing changed moves."""
    server = FakeServer(None)
    ex = FakeExecutor(duration=0.05)
    s = settings(
        profiles={"ref": profile(run_on_ready=True), "other": profile(interval_seconds=7200)},
        warmup_seconds=1.5,
        reference_exclusion_seconds=1.5,
    )
    sched = make(tmp_path, s, ex, server=server)
    await sched.start()
    try:
        server.epoch = time.time()
        await until(lambda: "ready:ref" in sched.next_runs())
        before = sched.next_runs()
        changed = settings(
            profiles={"ref": profile(run_on_ready=True), "other": profile(interval_seconds=60)},
            warmup_seconds=1.5,
            reference_exclusion_seconds=1.5,
            budget={"tokens_per_hour": 10**6},
        )
        sched.reload(changed)
        after = sched.next_runs()
        assert after["ready:ref"] == before["ready:ref"]
        assert after["load:ref"] == before["load:ref"]
        assert after["load:other"] < before["load:other"]  # 60 s from now, not 7200 s from start
        await until(lambda: len(ex.plans) == 1)
        assert time.time() >= before["ready:ref"]
    finally:
        await sched.stop()


async def test_a_reload_during_the_reference_run_lets_it_finish(tmp_path: Path) -> None:
    ex = FakeExecutor(duration=1.0)
    sched = make(tmp_path, settings(), ex)
    await sched.start()
    try:
        task = asyncio.create_task(sched.fire("ref"))
        await until(lambda: sched.busy)
        sched.reload(settings(budget={"tokens_per_hour": 10**6}))
        assert await asyncio.wait_for(task, 20) == "completed"
    finally:
        await sched.stop()


def _sweep(duration: float, tokens: int) -> Any:
    """Exclusive work like a calibration: charges as it goes, stops when asked."""

    async def work(run: Any) -> None:
        for _ in range(10):
            if run.cancel.is_set():
                return
            run.charged += tokens // 10
            run.counters.in_flight = 4
            await asyncio.sleep(duration / 10)
            run.counters.completed += 4
            run.counters.in_flight = 0

    return work


async def test_exclusive_work_shares_the_slot_and_the_budget(tmp_path: Path) -> None:
    s = settings(budget={"tokens_per_hour": 1000})
    sched = make(tmp_path, s, FakeExecutor(duration=0.5))
    sweep = asyncio.create_task(sched.run_exclusive("calibration", 800, _sweep(0.5, 600), 30))
    await asyncio.sleep(0.1)
    # A reference run cannot start while the sweep holds the slot, and vice versa.
    assert await sched.fire("ref") == "skipped:busy"
    assert await sweep == "completed"
    assert sched.budget.spent() == 600  # charged what it spent, not its whole reservation
    assert await sched.run_exclusive("calibration", 800, _sweep(0.1, 100), 30) == "skipped:budget"
    record = StateDir(tmp_path).history("runs.jsonl")[-2]
    assert (record["kind"], record["outcome"], record["budget_tokens"]) == ("calibration", "completed", 600)


async def test_exclusive_work_is_polite_and_restart_aware(tmp_path: Path) -> None:
    load = FakeLoad(running=0)
    server = FakeServer(time.time() - 1)
    sched = make(tmp_path, settings(reference_exclusion_seconds=30), FakeExecutor(), server=server, load=load)
    assert await sched.run_exclusive("calibration", 100, _sweep(0.1, 10), 30) == "skipped:restart_window"
    server.epoch = time.time() - 60
    load.running = 3
    assert await sched.run_exclusive("calibration", 100, _sweep(0.1, 10), 30) == "skipped:foreign_traffic"
    load.running = 0
    task = asyncio.create_task(sched.run_exclusive("calibration", 1000, _sweep(2.0, 1000), 30))
    await asyncio.sleep(0.3)
    load.running = 40  # someone else's traffic arrives mid-sweep
    assert await asyncio.wait_for(task, 5) == "aborted"
    assert sample(sched, "sentinel_load_aborts_total", profile="calibration", reason="foreign_traffic") == 1
    assert sched.budget.spent() < 1000


async def test_exclusive_work_cancelled_on_stop(tmp_path: Path) -> None:
    sched = make(tmp_path, settings(), FakeExecutor())
    await sched.start()
    task = asyncio.create_task(sched.run_exclusive("calibration", 1000, _sweep(5.0, 1000), 30))
    await asyncio.sleep(0.2)
    await asyncio.wait_for(sched.stop(), 5)
    assert await task == "cancelled"
    assert sched.budget.spent() <= 200


async def test_a_server_found_already_serving_needs_no_window(tmp_path: Path) -> None:
    # sentinel restarted, the systemd-run server did not: no warm-up, no exclusion, no on-ready run.
    server = FakeServer(time.time() - 1)
    server.warm = True
    ex = FakeExecutor(duration=0.05)
    s = settings(
        profiles={"ref": profile(run_on_ready=True)}, warmup_seconds=60, reference_exclusion_seconds=600
    )
    sched = make(tmp_path, s, ex, server=server)
    await sched.start()
    try:
        assert await sched.fire("ref") == "completed"
        assert sample(sched, "sentinel_load_output_throughput_tokens_per_second", profile="ref") == 100
        assert "ready:ref" not in sched.next_runs()
        assert StateDir(tmp_path).history("restarts.jsonl")[-1]["observed_running"] is True
    finally:
        await sched.stop()


async def test_a_full_kv_cache_does_not_stop_a_sweep(tmp_path: Path) -> None:
    load = FakeLoad(usage=0.999)  # saturation is what a calibration sweep looks for
    sched = make(tmp_path, settings(), FakeExecutor(), load=load)
    assert await sched.run_exclusive("calibration", 1000, _sweep(0.3, 100), 30) == "completed"


async def test_a_run_whose_every_request_fails_says_why(tmp_path: Path) -> None:
    with socket.socket() as s:  # a port nothing listens on: every request is refused
        s.bind(("127.0.0.1", 0))
        closed = s.getsockname()[1]
    sched = LoadScheduler(
        settings(profiles={"ref": profile(num_prompts=4, input_len=8, output_len=8)}),
        server=FakeServer(time.time() - 100),
        executor=LoadEngineExecutor(f"http://127.0.0.1:{closed}"),
        metrics=ScheduleMetrics(),
        state=StateDir(tmp_path),
        load_reader=FakeLoad(),
    )
    with capture_logs() as logs:
        assert await sched.fire("ref") == "failed"
    assert sample(sched, "sentinel_load_runs_total", profile="ref", outcome="failed") == 1
    run = StateDir(tmp_path).history("runs.jsonl")[-1]
    assert run["outcome"] == "failed"
    # The cause, by failure reason (the warm-up's: the measured phase never ran), and the engine's note.
    assert run["failure_reasons"] == {"connect_error": 1}
    assert any("warm-up" in n for n in run["notes"])
    assert sample(sched, "sentinel_load_requests_total", profile="ref", outcome="connect_error") == 1
    end = [e for e in logs if e["event"] == "load_run_end"]
    assert end[-1]["log_level"] == "warning"
    assert end[-1]["failure_reasons"] == {"connect_error": 1}


async def test_runs_since_the_last_passing_canary_leave_the_reference_series(tmp_path: Path) -> None:
    sched = make(tmp_path, settings(), FakeExecutor())
    assert await sched.fire("ref") == "completed"
    between = time.time()  # the last passing canary
    assert await sched.fire("ref") == "completed"
    assert sample(sched, "sentinel_load_output_throughput_tokens_per_second", profile="ref") == 100
    assert sched.revoke_reference(between, "canary_arithmetic: garbage_repeated") == 1
    runs = StateDir(tmp_path).history("runs.jsonl")
    assert [r["reference"] for r in runs] == [True, False]
    assert runs[1]["reference_revoked"] == "canary_arithmetic: garbage_repeated"
    assert sched.snapshot()["recent"][-1]["reference"] is False
    assert sample(sched, "sentinel_load_runs_excluded_total", profile="ref", reason="canary_failed") == 1
    # Revoking again changes nothing; revoking everything leaves no last-run figures (absent, not 0).
    assert sched.revoke_reference(between, "again") == 0
    assert sched.revoke_reference(0.0, "canary_arithmetic: wrong_answer") == 1
    assert sample(sched, "sentinel_load_output_throughput_tokens_per_second", profile="ref") is None
    assert sample(sched, "sentinel_load_runs_excluded_total", profile="ref", reason="canary_failed") == 2
