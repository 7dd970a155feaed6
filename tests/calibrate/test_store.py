from __future__ import annotations

from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.calibrate import (
    CalibrationSettings,
    ResultStore,
    Workload,
    compare,
    load_result,
    run_search,
)
from sglang_sentinel.calibrate.api import recalibrate
from sglang_sentinel.calibrate.model import CalibrationResult

WORKLOAD = Workload(
    base_url="http://127.0.0.1:1", backend="sglang", input_len=256, output_len=256, range_ratio=0
)


async def _result(server: Any, **kw: Any) -> CalibrationResult:
    return await run_search(server, CalibrationSettings(**kw), WORKLOAD)


async def test_save_load_roundtrip_and_bounded_history(tmp_path: Path, synthetic: Any) -> None:
    store = ResultStore(tmp_path / "calibration", history=3)
    base = await _result(synthetic())
    for i in range(5):
        r = base.model_copy(update={"started_at": base.started_at + timedelta(minutes=i)})
        path = store.save(r)
        assert load_result(path) == r
    files = sorted(p.name for p in store.directory.iterdir())
    assert len(files) == 3
    assert not [f for f in files if f.startswith(".") or f.endswith(".tmp")]
    latest = store.latest()
    assert latest is not None
    assert latest.started_at == base.started_at + timedelta(minutes=4)
    assert [x.started_at for x in store.results()] == sorted(x.started_at for x in store.results())


async def test_unreadable_newest_file_is_skipped(tmp_path: Path, synthetic: Any) -> None:
    store = ResultStore(tmp_path)
    good = await _result(synthetic())
    store.save(good)
    (tmp_path / "calibration-99999999T000000.000000Z.json").write_text('{"schema_version": 1, "mode": "x"}')
    (tmp_path / "calibration-99999999T000001.000000Z.json").write_text("{truncated")
    latest = store.latest()
    assert latest is not None
    assert latest.started_at == good.started_at
    assert len(store.results()) == 1
    with pytest.raises(ValueError, match="not a calibration result"):
        load_result(tmp_path / "calibration-99999999T000001.000000Z.json")


async def test_comparison_flags_a_drop(synthetic: Any) -> None:
    before = await _result(synthetic(ceiling=200.0))
    after = await _result(synthetic(ceiling=160.0, per_stream=10.0))
    cmp = compare(after, before, threshold=0.1)
    assert cmp is not None
    assert cmp.regressed
    assert any(r.startswith("saturation output throughput fell") for r in cmp.regressions)
    assert cmp.changes["saturation_output_throughput"] == pytest.approx(-0.2, abs=0.03)
    same = compare(before, before, threshold=0.1)
    assert same is not None
    assert not same.regressed
    other = after.model_copy(update={"workload": WORKLOAD.model_copy(update={"input_len": 1024})})
    assert compare(other, before, threshold=0.1) is None


async def test_recalibrate_keeps_the_result_when_the_store_cannot_be_written(
    tmp_path: Path, synthetic: Any
) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    store = ResultStore(blocker / "calibration")
    result = await recalibrate(
        CalibrationSettings(), store, base_url="http://127.0.0.1:1", runner=synthetic()
    )
    assert result.saturation_output_throughput.value is not None
    assert any("not saved" in w for w in result.warnings)


async def test_recalibrate_runs_incremental_from_the_store(tmp_path: Path, synthetic: Any) -> None:
    store = ResultStore(tmp_path / "calibration")
    cfg = CalibrationSettings()
    first = await recalibrate(cfg, store, base_url="http://127.0.0.1:1", runner=synthetic())
    assert first.mode == "full"
    assert first.comparison is None
    slower = synthetic(ceiling=150.0, per_stream=10.0)
    second = await recalibrate(cfg, store, base_url="http://127.0.0.1:1", runner=slower)
    assert second.mode == "incremental"
    assert second.requests_spent <= first.requests_spent / 3 + 1
    assert second.comparison is not None
    assert second.comparison.regressed
    assert len(store.results()) == 2


async def test_a_cancelled_or_inconclusive_result_is_never_the_latest_shown(
    tmp_path: Path, synthetic: Any
) -> None:
    store = ResultStore(tmp_path)
    good = await _result(synthetic())
    assert good.conclusive
    store.save(good)
    for i, reason in enumerate(("cancelled", "client-bound", "budget-time"), start=1):
        store.save(
            good.model_copy(
                update={"started_at": good.started_at + timedelta(minutes=i), "stop_reason": reason}
            )
        )
    newest = store.latest()
    assert newest is not None
    assert newest.stop_reason == "budget-time"
    shown = store.latest(conclusive=True)
    assert shown is not None
    assert shown.started_at == good.started_at


async def test_a_store_with_a_target_sees_only_that_targets_results(tmp_path: Path, synthetic: Any) -> None:
    from sglang_sentinel.calibrate.model import Target

    base = await _result(synthetic())
    daemon = Target(url="http://127.0.0.1:30000", served_model="sim", launch_hash="aaaa")
    other_launch = daemon.model_copy(update={"launch_hash": "bbbb"})
    elsewhere = daemon.model_copy(update={"url": "http://10.0.0.9:30000"})
    anyone = ResultStore(tmp_path)
    for i, target in enumerate((daemon, other_launch, elsewhere, None)):
        anyone.save(
            base.model_copy(update={"started_at": base.started_at + timedelta(minutes=i), "target": target})
        )

    own = ResultStore(tmp_path, target=daemon)
    assert [r.target for r in own.results()] == [daemon]
    latest = own.latest()
    assert latest is not None
    assert latest.target == daemon  # not the newer foreign ones
    assert own.foreign() == {"another launch_hash": 1, "another url": 1, "no target recorded": 1}
    # A sweep knows only the URL: every result of that URL is comparable, whatever its launch.
    sweep = ResultStore(tmp_path, target=Target(url=daemon.url))
    assert {r.target for r in sweep.results()} == {daemon, other_launch}
    # What a targeted store saves carries the target.
    saved = load_result(
        sweep.save(base.model_copy(update={"started_at": base.started_at + timedelta(hours=1)}))
    )
    assert saved.target == Target(url=daemon.url)
