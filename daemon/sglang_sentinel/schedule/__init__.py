"""The daemon's schedule: job wiring, synthetic-load budget, polite injection, breaker, calibration job.

Public surface (what ``sglang_sentinel.daemon`` wires)::

    from sglang_sentinel.schedule import LoadScheduler, ScheduleMetrics, LoadEngineExecutor
    from sglang_sentinel.statedir import StateDir
    metrics = ScheduleMetrics()                       # register it with the exporter's registry
    sched = LoadScheduler(settings.schedule, server=view, executor=LoadEngineExecutor(url),
                          metrics=metrics, state=StateDir(path), load_reader=ServerLoadReader(...))
    sched.restore(); await sched.start()              # history and budget back, jobs scheduled
    await sched.fire("reference")                     # one firing (what a job does)
    await sched.run_exclusive("calibration", tokens, work, limit_seconds)
    sched.reload(new_settings.schedule)               # SIGHUP
    await sched.stop()                                # cancels the run in progress

Modules: ``settings`` (the ``[schedule]`` section), ``scheduler`` (APScheduler jobs and the life of
one run), ``plan`` (what a run does and reports), ``executor`` (a plan through the load engine),
``budget`` (the hourly token budget), ``polite`` (foreign traffic), ``breaker`` (abort reasons),
``history`` (the run and epoch records, restored at start), ``metrics`` (every series of this
package). The state directory it writes to is the daemon's (:mod:`sglang_sentinel.statedir`: the
supervisor and the calibration store keep their files there too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_sentinel.lazy import lazy_exports

if TYPE_CHECKING:
    from sglang_sentinel.schedule.budget import TokenBudget
    from sglang_sentinel.schedule.executor import LoadEngineExecutor
    from sglang_sentinel.schedule.metrics import ScheduleMetrics
    from sglang_sentinel.schedule.plan import RunPlan, RunReport
    from sglang_sentinel.schedule.polite import ServerLoad, ServerLoadReader
    from sglang_sentinel.schedule.scheduler import ExclusiveRun, LoadScheduler

__all__ = [
    "ExclusiveRun",
    "LoadEngineExecutor",
    "LoadScheduler",
    "RunPlan",
    "RunReport",
    "ScheduleMetrics",
    "ServerLoad",
    "ServerLoadReader",
    "TokenBudget",
]

# Imported on first use: sglang_sentinel.config imports this package for its settings model, and every CLI
# command loads the config; APScheduler, httpx and the load engine are not needed for that.
__getattr__ = lazy_exports(
    __name__,
    {
        "TokenBudget": "sglang_sentinel.schedule.budget",
        "LoadEngineExecutor": "sglang_sentinel.schedule.executor",
        "ScheduleMetrics": "sglang_sentinel.schedule.metrics",
        "RunPlan": "sglang_sentinel.schedule.plan",
        "RunReport": "sglang_sentinel.schedule.plan",
        "ServerLoad": "sglang_sentinel.schedule.polite",
        "ServerLoadReader": "sglang_sentinel.schedule.polite",
        "ExclusiveRun": "sglang_sentinel.schedule.scheduler",
        "LoadScheduler": "sglang_sentinel.schedule.scheduler",
    },
)
