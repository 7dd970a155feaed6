from __future__ import annotations

import io
from typing import Any

from sglang_sentinel.calibrate import CalibrationSettings, Workload, run_search
from sglang_sentinel.calibrate.progress import SweepProgress
from sglang_sentinel.load import LoadCounters
from support.waits import until

WORKLOAD = Workload(
    base_url="http://127.0.0.1:1", backend="sglang", input_len=256, output_len=256, range_ratio=0
)


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


class _Runner:
    counters: LoadCounters | None = None


async def test_one_line_per_step_and_no_bar_off_a_tty(synthetic: Any) -> None:
    out, err = io.StringIO(), io.StringIO()
    progress = SweepProgress(None, out=out, err=err)
    async with progress:
        result = await run_search(
            synthetic(), CalibrationSettings(), WORKLOAD, on_step=progress.on_step, on_plan=progress.on_plan
        )
    lines = out.getvalue().splitlines()
    assert len(lines) == len(result.steps)
    assert lines[0].startswith("step  0 escalate")
    assert "SATURATED: server queue" in "\n".join(lines)
    assert err.getvalue() == ""


async def test_bar_on_a_tty(synthetic: Any) -> None:
    out, err = io.StringIO(), _Tty()
    runner = _Runner()
    runner.counters = LoadCounters(sent=5, in_flight=3, completed=2, output_tokens=300)
    progress = SweepProgress(runner, out=out, err=err)  # type: ignore[arg-type]
    from sglang_sentinel.calibrate.model import StepPlan
    from sglang_sentinel.calibrate.search import Progress

    async with progress:
        progress.on_plan(
            StepPlan(concurrency=8, num_requests=8, phase="escalate"), Progress(10, 100, 1.0, 60.0)
        )
        await until(lambda: "(sweep: 10/100 requests)" in err.getvalue(), what="the bar drawn")
    drawn = err.getvalue()
    assert "c=8 2/8 in flight 3" in drawn
    assert "(sweep: 10/100 requests)" in drawn
    assert drawn.endswith("\r\x1b[2K")  # erased on exit
