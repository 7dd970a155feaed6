"""Calibration: find a server's throughput ceiling, its knee and its SLO capacity, cheaply.

For the daemon::

    from sentinel.calibrate import recalibrate, store_for

    store = store_for(settings.state_dir, settings.calibration)
    result = await recalibrate(settings.calibration, store, base_url=url, api_key=key)
    result.saturation_output_throughput.value   # tok/s (None: nothing trustworthy measured)
    result.knee_concurrency.value, result.max_concurrency_within_slo.value,
    result.max_rate_within_slo.value, result.goodput.value
    result.comparison and result.comparison.regressions   # drops beyond regression_threshold

``recalibrate`` runs incrementally from the store's latest result (a full sweep when there is
none), compares with it and saves. ``calibrate`` is the bare search (no store); ``run_search``
takes any ``StepRunner`` (unit tests use a synthetic server). Every figure carries the indices
of the steps that support it. See ``search`` for the algorithm and ``judge`` for the verdicts.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sentinel.lazy import lazy_exports

if TYPE_CHECKING:
    from sentinel.calibrate.api import base_spec, calibrate, recalibrate, store_for
    from sentinel.calibrate.model import (
        CalibrationResult,
        Comparison,
        Figure,
        Latency,
        ServerSignals,
        Step,
        StepMeasurement,
        StepPlan,
        StopReason,
        Target,
        Workload,
    )
    from sentinel.calibrate.runner import LoadStepRunner
    from sentinel.calibrate.search import (
        PlanCallback,
        Progress,
        StepCallback,
        StepRunner,
        run_search,
        step_requests,
    )
    from sentinel.calibrate.settings import CalibrationSettings, SloSettings
    from sentinel.calibrate.store import ResultStore, StoreError, compare, load_result

__all__ = [
    "CalibrationResult",
    "CalibrationSettings",
    "Comparison",
    "Figure",
    "Latency",
    "LoadStepRunner",
    "PlanCallback",
    "Progress",
    "ResultStore",
    "ServerSignals",
    "SloSettings",
    "Step",
    "StepCallback",
    "StepMeasurement",
    "StepPlan",
    "StepRunner",
    "StopReason",
    "StoreError",
    "Target",
    "Workload",
    "base_spec",
    "calibrate",
    "compare",
    "load_result",
    "recalibrate",
    "run_search",
    "step_requests",
    "store_for",
]

# Imported on first use: sentinel.config imports this package for its settings model, and
# every CLI command loads the config; the load engine, aiohttp and matplotlib are not needed for that.
__getattr__ = lazy_exports(
    __name__,
    {
        "base_spec": "sentinel.calibrate.api",
        "calibrate": "sentinel.calibrate.api",
        "recalibrate": "sentinel.calibrate.api",
        "store_for": "sentinel.calibrate.api",
        "CalibrationResult": "sentinel.calibrate.model",
        "Target": "sentinel.calibrate.model",
        "Comparison": "sentinel.calibrate.model",
        "Figure": "sentinel.calibrate.model",
        "Latency": "sentinel.calibrate.model",
        "ServerSignals": "sentinel.calibrate.model",
        "Step": "sentinel.calibrate.model",
        "StepMeasurement": "sentinel.calibrate.model",
        "StepPlan": "sentinel.calibrate.model",
        "StopReason": "sentinel.calibrate.model",
        "Workload": "sentinel.calibrate.model",
        "LoadStepRunner": "sentinel.calibrate.runner",
        "PlanCallback": "sentinel.calibrate.search",
        "Progress": "sentinel.calibrate.search",
        "StepCallback": "sentinel.calibrate.search",
        "StepRunner": "sentinel.calibrate.search",
        "run_search": "sentinel.calibrate.search",
        "step_requests": "sentinel.calibrate.search",
        "CalibrationSettings": "sentinel.calibrate.settings",
        "SloSettings": "sentinel.calibrate.settings",
        "ResultStore": "sentinel.calibrate.store",
        "StoreError": "sentinel.calibrate.store",
        "compare": "sentinel.calibrate.store",
        "load_result": "sentinel.calibrate.store",
    },
)
