"""Entry points for the CLI and the daemon: run a calibration, and the store-backed round trip."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import SecretStr

from sglang_sentinel.calibrate.model import CalibrationResult, Target, Workload
from sglang_sentinel.calibrate.runner import LoadStepRunner
from sglang_sentinel.calibrate.search import PlanCallback, StepCallback, StepRunner, run_search
from sglang_sentinel.calibrate.settings import CalibrationSettings
from sglang_sentinel.calibrate.store import ResultStore, StoreError, compare
from sglang_sentinel.collect.gpu.energy import LoadMeter
from sglang_sentinel.load import Backend, LoadSpec, RandomDataset
from sglang_sentinel.log import get_logger

__all__ = ["base_spec", "calibrate", "recalibrate", "store_for"]

_log = get_logger(__name__)


def _secret(key: str | SecretStr | None) -> str | None:
    if isinstance(key, SecretStr):
        key = key.get_secret_value()
    return key or None


def base_spec(
    settings: CalibrationSettings,
    base_url: str,
    backend: str = "sglang",
    api_key: str | SecretStr | None = None,
) -> LoadSpec:
    """The LoadSpec every step derives from (the runner sets concurrency and count per step)."""
    return LoadSpec(
        base_url=base_url,
        backend=Backend.parse(backend),
        dataset=RandomDataset(
            input_len=settings.input_len, output_len=settings.output_len, range_ratio=settings.range_ratio
        ),
        num_requests=1,
        seed=settings.seed,
        api_key=_secret(api_key),
        request_timeout_s=settings.request_timeout,
    )


async def calibrate(
    settings: CalibrationSettings,
    *,
    base_url: str,
    backend: str = "sglang",
    api_key: str | SecretStr | None = None,
    previous: CalibrationResult | None = None,
    on_step: StepCallback | None = None,
    on_plan: PlanCallback | None = None,
    runner: StepRunner | None = None,
    cancel: asyncio.Event | None = None,
    energy: LoadMeter | None = None,
) -> CalibrationResult:
    """Calibrate the server at ``base_url``: a full sweep, or incremental when ``previous`` is given.

    Never raises for the server's behaviour: failures end the search with ``stop_reason`` "errors"
    and whatever was measured. ``sglang_sentinel.load.SpecError`` for an unusable backend name.
    """
    spec = base_spec(settings, base_url, backend, api_key)
    if runner is None:
        headers = {"Authorization": f"Bearer {spec.api_key}"} if spec.api_key else None
        runner = LoadStepRunner(spec, settings, metrics_headers=headers, energy=energy)
    workload = Workload(
        base_url=spec.base_url,
        backend=str(spec.backend),
        input_len=settings.input_len,
        output_len=settings.output_len,
        range_ratio=settings.range_ratio,
    )
    return await run_search(
        runner, settings, workload, previous=previous, on_step=on_step, on_plan=on_plan, cancel=cancel
    )


def store_for(state_dir: Path, settings: CalibrationSettings, target: Target | None = None) -> ResultStore:
    return ResultStore(state_dir / "calibration", history=settings.history, target=target)


async def recalibrate(
    settings: CalibrationSettings,
    store: ResultStore,
    *,
    base_url: str,
    backend: str = "sglang",
    api_key: str | SecretStr | None = None,
    full: bool = False,
    on_step: StepCallback | None = None,
    on_plan: PlanCallback | None = None,
    cancel: asyncio.Event | None = None,
    runner: StepRunner | None = None,
    energy: LoadMeter | None = None,
) -> CalibrationResult:
    """The daemon's periodic job: incremental from the stored latest result (full without one, or
    with ``full``), compared with that baseline, saved. A result that cannot be saved is still
    returned, with a warning saying so: losing the file must not lose the measurement.
    """
    previous = None if full else store.latest(conclusive=True)
    result = await calibrate(
        settings,
        base_url=base_url,
        backend=backend,
        api_key=api_key,
        previous=previous,
        on_step=on_step,
        on_plan=on_plan,
        cancel=cancel,
        runner=runner,
        energy=energy,
    )
    baseline = previous if previous is not None else store.latest(conclusive=True)
    if baseline is not None:
        comparison = compare(result, baseline, settings.regression_threshold)
        if comparison is not None:
            result = result.model_copy(update={"comparison": comparison})
    try:
        store.save(result)
    except StoreError as exc:
        _log.error("calibration_not_saved", error=str(exc))
        result = result.model_copy(update={"warnings": (*result.warnings, f"result not saved: {exc}")})
    return result
