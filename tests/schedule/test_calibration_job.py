"""The daemon's calibration job: the initial calibration is not lost to a busy load slot."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, cast

from sglang_sentinel.calibrate.settings import CalibrationSettings
from sglang_sentinel.schedule.calibration import CalibrationJob
from sglang_sentinel.schedule.metrics import ScheduleMetrics
from sglang_sentinel.schedule.scheduler import LoadScheduler


class _Once:
    """The one scheduler method the job uses: ``add_once`` jobs kept in order, run by the test."""

    def __init__(self) -> None:
        self.jobs: list[tuple[str, Callable[[], Awaitable[Any]], float]] = []

    def add_once(self, name: str, func: Callable[[], Awaitable[Any]], at: float) -> None:
        self.jobs.append((name, func, at))


def _job(tmp_path: Path) -> CalibrationJob:
    return CalibrationJob(
        CalibrationSettings(),
        state_dir=tmp_path,
        server_url="http://127.0.0.1:1",
        api_key="",
        metrics=ScheduleMetrics(),
    )


async def test_initial_calibration_is_retried_while_the_slot_is_busy(tmp_path: Path) -> None:
    outcomes = iter(["skipped:busy", "skipped:warmup", "completed"])
    calls: list[str] = []

    async def run() -> str:
        calls.append("run")
        return next(outcomes)

    sched = _Once()
    job = _job(tmp_path)
    job.maybe_after_run(cast(LoadScheduler, sched), run)
    job.maybe_after_run(cast(LoadScheduler, sched), run)  # once per daemon life
    assert [name for name, _, _ in sched.jobs] == ["calibration:initial"]
    for i in range(3):
        assert await sched.jobs[i][1]() == ["skipped:busy", "skipped:warmup", "completed"][i]
    # Retried after each passing skip, never again once it ran.
    assert len(sched.jobs) == 3
    assert calls == ["run"] * 3


async def test_initial_calibration_is_not_retried_on_a_budget_skip(tmp_path: Path) -> None:
    async def run() -> str:
        return "skipped:budget"

    sched = _Once()
    _job(tmp_path).maybe_after_run(cast(LoadScheduler, sched), run)
    assert await sched.jobs[0][1]() == "skipped:budget"
    assert len(sched.jobs) == 1  # the nightly cron comes back to it
