"""`sentinel bench --output-csv` and `--output-html`: what they hold, and their checks before the run."""

from __future__ import annotations

import asyncio
import csv
import json
import math
import sys
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.cli import main
from sglang_sentinel.load.request_csv import COLUMNS
from sglang_sentinel.load.run_report import PLOTS
from support.headless_chromium import check_report_page, requires_chromium

pytestmark = pytest.mark.asyncio


async def _bench(*argv: str) -> int:
    # The command runs its own event loop; a fake server lives in the test's loop.
    return await asyncio.to_thread(main, ["bench", "--log-level", "error", *argv])


def _rows(path: Path) -> list[dict[str, str]]:
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        assert reader.fieldnames == [name for name, _ in COLUMNS]
        return list(reader)


async def test_csv_and_html_of_a_sim_run(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--skip-server-warmup")
    jsonl, table, page = tmp_path / "r.jsonl", tmp_path / "r.csv", tmp_path / "r.html"
    code = await _bench(
        "--base-url", sim.base_url, "--num-prompts", "24", "--random-input-len", "64",
        "--random-output-len", "16", "--request-rate", "100",
        "--header", "Authorization=Bearer s3cr3t-value", "--output-file", str(jsonl), "--output-details",
        "--output-csv", str(table), "--output-html", str(page),
    )  # fmt: skip
    assert code == 0
    record = json.loads(jsonl.read_text())
    rows = _rows(table)
    # One row per measured request, in request order, and the same figures as the JSONL's arrays.
    assert [int(r["index"]) for r in rows] == list(range(24))
    assert all(r["status"] == "ok" and r["error"] == "" for r in rows)
    assert sum(int(r["output_tokens"]) for r in rows) == record["total_output_tokens"]
    assert sum(int(r["input_tokens"]) for r in rows) == record["total_input_tokens"]
    for row, ttft, e2e, start, itls in zip(
        rows, record["ttfts"], record["e2e_latencies"], record["start_times"], record["itls"], strict=True
    ):
        assert float(row["ttft_s"]) == pytest.approx(ttft, abs=1e-6)
        assert float(row["e2e_s"]) == pytest.approx(e2e, abs=1e-6)
        assert float(row["started_at"]) == pytest.approx(start, abs=1e-6)
        if itls:
            assert float(row["itl_max_s"]) == pytest.approx(max(itls), abs=1e-6)
            assert float(row["itl_mean_s"]) == pytest.approx(sum(itls) / len(itls), abs=1e-6)
        else:  # a one-token answer has no gap: an empty cell, not 0
            assert row["itl_max_s"] == row["itl_mean_s"] == row["tpot_s"] == ""
        assert float(row["planned_at"]) <= float(row["started_at"])
    tpots = [float(r["tpot_s"]) for r in rows if r["tpot_s"]]
    # The CSV holds microseconds: the mean of the rounded values is within 0.5 us of the JSONL's.
    assert math.fsum(tpots) / len(tpots) * 1e3 == pytest.approx(record["mean_tpot_ms"], abs=5e-4)

    text = page.read_text(encoding="utf-8")
    assert text.count("data:image/png;base64,") == len(PLOTS)
    assert "Not plotted" not in text
    # The headline is the printed block, row for row.
    assert "<tr><td>Successful requests:</td><td class=num>24</td></tr>" in text
    assert f"<td>Total generated tokens:</td><td class=num>{record['total_output_tokens']}</td>" in text
    assert "<th>Time to First Token</th>" in text
    # The flags, a secret header masked.
    assert "<th>--num-prompts</th><td>24</td>" in text
    assert "Authorization=[redacted]" in text
    assert "s3cr3t" not in text


async def test_failed_requests_are_rows_with_their_reason(fake_sglang: Any, tmp_path: Path) -> None:
    fake = await fake_sglang(token_delay=0.0005, fail_mode="error_chunk", fail_every=2)
    table, page = tmp_path / "r.csv", tmp_path / "r.html"
    code = await _bench(
        "--base-url", fake.base_url, "--num-prompts", "8", "--random-input-len", "8",
        "--random-output-len", "6", "--random-range-ratio", "1", "--warmup-requests", "0",
        "--output-csv", str(table), "--output-html", str(page),
    )  # fmt: skip
    assert code == 0
    rows = _rows(table)
    assert len(rows) == 8
    failed = [r for r in rows if r["status"] != "ok"]
    assert len(failed) == 4
    assert {r["status"] for r in failed} == {"error_chunk"}
    assert all("CUDA out of memory" in r["error"] for r in failed)
    assert all(r["tpot_s"] == "" for r in failed)  # TPOT is defined on successful requests only
    assert all(r["e2e_s"] and r["tpot_s"] for r in rows if r["status"] == "ok")
    assert "<td>Failures by reason:</td><td class=num>error_chunk=4</td>" in page.read_text(encoding="utf-8")


async def test_unreachable_server_still_writes_both(tmp_path: Path) -> None:
    table, page = tmp_path / "r.csv", tmp_path / "r.html"
    code = await _bench(
        "--base-url", "http://127.0.0.1:9", "--num-prompts", "3", "--ready-check-timeout-sec", "0",
        "--output-csv", str(table), "--output-html", str(page),
    )  # fmt: skip
    assert code == 1
    assert _rows(table) == []  # the warm-up failed: no measured request
    text = page.read_text(encoding="utf-8")
    assert "Every warm-up request failed" in text
    assert "Not plotted, no data: " + ", ".join(PLOTS) in text
    assert "data:image/png" not in text


@pytest.mark.parametrize("flag", ["--output-csv", "--output-html", "--output-file"])
async def test_a_bad_path_is_refused_before_the_run(
    flag: str, fake_sglang: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = await fake_sglang()
    for path, why in ((tmp_path / "missing" / "r.out", "does not exist"), (tmp_path, "is a directory")):
        code = await _bench("--base-url", fake.base_url, "--num-prompts", "2", flag, str(path))
        assert code == 2
        err = capsys.readouterr().err
        assert f"sentinel bench: {flag} {path}: " in err
        assert why in err
    assert fake.requests == []  # nothing was sent


async def test_html_without_matplotlib_is_refused_before_the_run(
    fake_sglang: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    fake = await fake_sglang()
    # None in sys.modules is how Python spells "not importable": a box without the report extra.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    code = await _bench("--base-url", fake.base_url, "--output-html", str(tmp_path / "r.html"))
    assert code == 2
    err = capsys.readouterr().err
    assert (
        err.strip() == "sentinel bench: --output-html needs matplotlib: pip install 'sglang-sentinel[report]'"
    )
    assert fake.requests == []
    # CSV needs nothing.
    code = await _bench(
        "--base-url", fake.base_url, "--num-prompts", "2", "--output-csv", str(tmp_path / "r.csv"),
        "--random-input-len", "4", "--random-output-len", "2",
    )  # fmt: skip
    assert code == 0
    assert len(_rows(tmp_path / "r.csv")) == 2


@requires_chromium
async def test_bench_page_renders_in_headless_chromium(fake_sglang: Any, tmp_path: Path) -> None:
    fake = await fake_sglang(token_delay=0.001)
    page = tmp_path / "r.html"
    code = await _bench(
        "--base-url", fake.base_url, "--num-prompts", "12", "--random-input-len", "16",
        "--random-output-len", "8", "--max-concurrency", "4", "--output-html", str(page),
    )  # fmt: skip
    assert code == 0
    seen = await asyncio.to_thread(check_report_page, page, profile=tmp_path / "profile")
    assert seen.images == len(PLOTS)
    assert seen.loaded == seen.images
    assert seen.errors == 0
    assert seen.console == []
    assert "Serving Benchmark Result" in seen.dom
