"""The daemon's schedule: job wiring, synthetic-load budget, polite injection, breaker, calibration job.

Public surface (what ``sentinel.daemon`` wires)::

    from sentinel.schedule import LoadScheduler, ScheduleMetrics, LoadEngineExecutor
    from sentinel.statedir import StateDir
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
package). The state directory it writes to is the daemon's (:mod:`sentinel.statedir`: the
supervisor and the calibration store keep their files there too).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sentinel.lazy import lazy_exports

if TYPE_CHECKING:
    from sentinel.schedule.budget import TokenBudget
    from sentinel.schedule.executor import LoadEngineExecutor
    from sentinel.schedule.metrics import ScheduleMetrics
    from sentinel.schedule.plan import RunPlan, RunReport
    from sentinel.schedule.polite import ServerLoad, ServerLoadReader
    from sentinel.schedule.scheduler import ExclusiveRun, LoadScheduler

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

# Imported on first use: sentinel.config imports this package for its settings model, and every CLI
# command loads the config; APScheduler, httpx and the load engine are not needed for that.
__getattr__ = lazy_exports(
    __name__,
    {
        "TokenBudget": "sentinel.schedule.budget",
        "LoadEngineExecutor": "sentinel.schedule.executor",
        "ScheduleMetrics": "sentinel.schedule.metrics",
        "RunPlan": "sentinel.schedule.plan",
        "RunReport": "sentinel.schedule.plan",
        "ServerLoad": "sentinel.schedule.polite",
        "ServerLoadReader": "sentinel.schedule.polite",
        "ExclusiveRun": "sentinel.schedule.scheduler",
        "LoadScheduler": "sentinel.schedule.scheduler",
    },
)
