"""Calibration: find a server's throughput ceiling, its knee and its SLO capacity, cheaply.

For the daemon::

    from sglang_sentinel.calibrate import recalibrate, store_for

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

from sglang_sentinel.lazy import lazy_exports

if TYPE_CHECKING:
    from sglang_sentinel.calibrate.api import base_spec, calibrate, recalibrate, store_for
    from sglang_sentinel.calibrate.model import (
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
    from sglang_sentinel.calibrate.runner import LoadStepRunner
    from sglang_sentinel.calibrate.search import (
        PlanCallback,
        Progress,
        StepCallback,
        StepRunner,
        run_search,
        step_requests,
    )
    from sglang_sentinel.calibrate.settings import CalibrationSettings, SloSettings
    from sglang_sentinel.calibrate.store import ResultStore, StoreError, compare, load_result

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

# Imported on first use: sglang_sentinel.config imports this package for its settings model, and
# every CLI command loads the config; the load engine, aiohttp and matplotlib are not needed for that.
__getattr__ = lazy_exports(
    __name__,
    {
        "base_spec": "sglang_sentinel.calibrate.api",
        "calibrate": "sglang_sentinel.calibrate.api",
        "recalibrate": "sglang_sentinel.calibrate.api",
        "store_for": "sglang_sentinel.calibrate.api",
        "CalibrationResult": "sglang_sentinel.calibrate.model",
        "Target": "sglang_sentinel.calibrate.model",
        "Comparison": "sglang_sentinel.calibrate.model",
        "Figure": "sglang_sentinel.calibrate.model",
        "Latency": "sglang_sentinel.calibrate.model",
        "ServerSignals": "sglang_sentinel.calibrate.model",
        "Step": "sglang_sentinel.calibrate.model",
        "StepMeasurement": "sglang_sentinel.calibrate.model",
        "StepPlan": "sglang_sentinel.calibrate.model",
        "StopReason": "sglang_sentinel.calibrate.model",
        "Workload": "sglang_sentinel.calibrate.model",
        "LoadStepRunner": "sglang_sentinel.calibrate.runner",
        "PlanCallback": "sglang_sentinel.calibrate.search",
        "Progress": "sglang_sentinel.calibrate.search",
        "StepCallback": "sglang_sentinel.calibrate.search",
        "StepRunner": "sglang_sentinel.calibrate.search",
        "run_search": "sglang_sentinel.calibrate.search",
        "step_requests": "sglang_sentinel.calibrate.search",
        "CalibrationSettings": "sglang_sentinel.calibrate.settings",
        "SloSettings": "sglang_sentinel.calibrate.settings",
        "ResultStore": "sglang_sentinel.calibrate.store",
        "StoreError": "sglang_sentinel.calibrate.store",
        "compare": "sglang_sentinel.calibrate.store",
        "load_result": "sglang_sentinel.calibrate.store",
    },
)
