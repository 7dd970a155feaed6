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
