"""The HTML report renders in a real browser: every image loads and the page is not blank."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.calibrate import CalibrationSettings, SloSettings, Workload, run_search
from sglang_sentinel.calibrate.report import render_html, write_report
from support.headless_chromium import check_report_page, requires_chromium, screenshot

WORKLOAD = Workload(
    base_url="http://127.0.0.1:1", backend="sglang", input_len=256, output_len=256, range_ratio=0
)


async def _report(tmp_path: Path, synthetic: Any) -> Path:
    slo = SloSettings(ttft_seconds=1.0)
    result = await run_search(synthetic(), CalibrationSettings(slo=slo), WORKLOAD)
    return write_report(result, tmp_path / "report")


async def test_report_files(tmp_path: Path, synthetic: Any) -> None:
    page = await _report(tmp_path, synthetic)
    names = {p.name for p in page.parent.iterdir()}
    assert {"index.html", "result.json", "throughput.png", "latency.png", "server.png"} <= names
    text = page.read_text()
    assert text.count("data:image/png;base64,") == 4
    assert "Saturation output throughput" in text
    # Self-contained: nothing is fetched from elsewhere.
    assert not re.search(r'src="(?!data:)', text)


def test_report_escapes_untrusted_text() -> None:
    from datetime import UTC, datetime

    from sglang_sentinel.calibrate.model import CalibrationResult, Figure

    nothing = Figure(value=None)
    result = CalibrationResult(
        mode="full",
        started_at=datetime.now(UTC),
        finished_at=datetime.now(UTC),
        workload=WORKLOAD.model_copy(update={"base_url": "http://x/<script>alert(1)</script>"}),
        slo={},
        steps=(),
        stop_reason="errors",
        saturation_output_throughput=nothing,
        saturation_total_throughput=nothing,
        knee_concurrency=nothing,
        max_concurrency_within_slo=nothing,
        max_rate_within_slo=nothing,
        goodput=nothing,
        requests_spent=0,
        full_sweep_requests=0,
        warnings=("<b>bold</b>",),
    )
    html = render_html(result, {})
    assert "<script>alert" not in html
    assert "&lt;b&gt;bold" in html


@requires_chromium
@pytest.mark.slow
async def test_report_renders_in_headless_chromium(tmp_path: Path, synthetic: Any) -> None:
    page = await _report(tmp_path, synthetic)
    profile = tmp_path / "chromium-profile"
    seen = await asyncio.to_thread(check_report_page, page, profile=profile)
    assert seen.images == 4
    assert seen.loaded == seen.images
    assert seen.errors == 0
    assert seen.console == []

    shot = await asyncio.to_thread(
        screenshot,
        page,
        tmp_path / "screenshot.png",
        profile=profile,
        virtual_time_ms=5000,
        window="1280,2000",
    )
    import matplotlib.image as mpimg

    pixels = mpimg.imread(str(shot))[..., :3]
    non_white = (pixels < 0.9).any(axis=-1).mean()
    assert non_white > 0.05, f"page looks blank ({non_white:.1%} non-white pixels)"


async def test_lower_bound_is_labelled_and_no_slo_means_no_slo_rows(tmp_path: Path, synthetic: Any) -> None:
    # The synthetic server saturates far above 4: a sweep capped there only bounds the capacity.
    result = await run_search(synthetic(), CalibrationSettings(max_concurrency=4), WORKLOAD)
    assert result.stop_reason == "max-concurrency"
    assert result.lower_bound
    text = write_report(result, tmp_path / "report").read_text()
    assert "lower bound: did not saturate up to concurrency 4" in text
    assert re.search(r"<td class=num>≥ [\d,]+ tok/s</td>", text)
    assert "within SLO" not in text
    assert "Goodput" not in text


def test_report_without_data_leaves_empty_plots_out(tmp_path: Path) -> None:
    from datetime import UTC, datetime

    from sglang_sentinel.calibrate.model import CalibrationResult, Figure

    nothing = Figure(value=None)
    result = CalibrationResult(
        mode="full",
        started_at=datetime.now(UTC),
        finished_at=datetime.now(UTC),
        workload=WORKLOAD,
        slo={},
        steps=(),
        stop_reason="errors",
        saturation_output_throughput=nothing,
        saturation_total_throughput=nothing,
        knee_concurrency=nothing,
        max_concurrency_within_slo=nothing,
        max_rate_within_slo=nothing,
        goodput=nothing,
        requests_spent=0,
        full_sweep_requests=0,
    )
    page = write_report(result, tmp_path / "report")
    assert not list(page.parent.glob("*.png"))
    text = page.read_text()
    assert "data:image/png" not in text
    assert "Not plotted, no data" in text


@pytest.mark.slow
async def test_energy_per_token_plot_and_the_efficient_point(tmp_path: Path, synthetic: Any) -> None:
    from sglang_sentinel.calibrate import CalibrationResult
    from sglang_sentinel.calibrate.model import StepEnergy

    result: CalibrationResult = await run_search(synthetic(), CalibrationSettings(), WORKLOAD)

    def energy(c: int) -> StepEnergy:
        # U-shaped: idle power amortised by batching, then queueing costs again.
        per_token = 1.0 + (c - 24) ** 2 / 400
        return StepEnergy(
            joules=per_token * 1000,
            seconds=10.0,
            gpus=8,
            mean_power_watts=4800.0,
            joules_per_output_token=per_token,
            output_tokens_per_joule=1 / per_token,
            energy_cost_per_million_output_tokens=per_token * 1e6 / 3.6e6 * 0.25,
            currency="EUR",
        )

    steps = tuple(
        s.model_copy(
            update={"measurement": s.measurement.model_copy(update={"energy": energy(s.concurrency)})}
        )
        for s in result.steps
    )
    metered = result.model_copy(update={"steps": steps})
    best = metered.efficient_step
    assert best is not None
    trusted = [s.concurrency for s in steps if s.trusted]
    assert best.concurrency == min(trusted, key=lambda c: abs(c - 24))
    page = write_report(metered, tmp_path / "report")
    assert (page.parent / "energy.png").is_file()
    text = page.read_text()
    assert f"Efficient operating point: concurrency {best.concurrency}" in text
    assert "EUR per million output tokens there (GPU electricity only)" in text
    # Not metered: no energy plot, no energy sentence.
    plain = write_report(result, tmp_path / "plain")
    assert not (plain.parent / "energy.png").exists()
    assert "Efficient operating point" not in plain.read_text()
