"""The tune report, rendered from a tune document alone: complete, escaped, and honest about nulls.

The fixture (tests/tune/fixtures/tune_report_doc.json) follows the `sentinel.tune/v1` document
(one measured baseline, a winner, an eliminated, a rejected (garbage output), a skipped and a
failed configuration, a dominated one); the null cases are derived from it.
"""

from __future__ import annotations

import copy
import json
import re
import sys
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.reportkit import ReportError
from sglang_sentinel.tune.report import render_html, write_report
from support.headless_chromium import check_report_page, requires_chromium

FIXTURE = Path(__file__).parent / "fixtures" / "tune_report_doc.json"


def _doc() -> dict[str, Any]:
    doc: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))
    return doc


def _no_winner_doc() -> dict[str, Any]:
    doc = _doc()
    doc.update(winner=None, winner_reason=None, winner_toml=None, finished_at=None, pareto=[])
    doc["trials"][1]["summary"] = None  # an eliminated trial whose summary was never written
    doc["trials"][1]["figures"] = None
    doc["trials"][1]["rounds"] = []
    return doc


def _nothing_measured_doc() -> dict[str, Any]:
    doc = _no_winner_doc()
    for t in doc["trials"]:
        t.update(summary=None, figures=None, rounds=[], status="pending", reason=None)
    return doc


def test_report_has_every_section_of_the_fixture(tmp_path: Path) -> None:
    page = write_report(_doc(), tmp_path / "tune")
    assert page == tmp_path / "tune" / "index.html"
    text = page.read_text(encoding="utf-8")
    assert text.count("data:image/png;base64,") == 2  # throughput per config, Pareto front
    assert not re.search(r'src="(?!data:)', text)  # self-contained
    # Verdict, baseline, budget.
    assert "Winner: <b>t04</b>" in text
    assert "beats t01 208.2 [204.0, 212.1] beyond the spread" in text
    assert (
        "t01 (--attention-backend=flashinfer --disable-cuda-graph=True), full 208.2 [204.0, 212.1] n=3 tok/s"
        in text
    )
    assert "812 s of 3,600 s trial time; 1,203,340 of — tokens" in text
    assert "TTFT p99 ≤ 2,000 ms" in text
    # The configuration table: spreads in the figures' units, nulls as dashes.
    assert "<th>t04 ★</th>" in text
    assert "<td class=num>231.0 [226.1, 235.8] n=3</td>" in text
    assert "<td class=num>840 [800, 900] n=3</td>" in text  # p99 TTFT in ms
    assert "<td class=num>72.0 [70.6, 73.4] n=3</td>" in text  # TPOT p50 in ms
    # Each dropped configuration with its reason, the garbage example escaped.
    for reason in (
        "correctness: garbage_repeated on &#x27;What is 2+2?&#x27;",
        "preflight: trtllm_mha needs CUDA graphs on SM120",
        "not ready within 600 s",
        "round 0: output throughput 215.0 tok/s below the best half",
    ):
        assert reason in text, reason
    assert "&lt;script&gt;alert(1)&lt;/script&gt; → nan logprobs" in text
    assert "<script>" not in text
    assert (
        "Pareto front (no other configuration is both faster and quicker to the first token):\nt04, t02"
        in text
    )
    # The snippet to paste, and per-trial details with the argv's secret masked.
    assert (
        "<pre>[server.launch]\nextra_args = [&quot;--attention-backend&quot;, &quot;trtllm_mha&quot;]\n</pre>"
        in text
    )
    assert "sk-secret-should-not-show" not in text
    assert "--api-key" in text
    assert "GPU 1: SM 1.75 GHz, throttling: sw_power_cap" in text
    assert "FAILED over 24 prompts" in text


def test_no_winner_and_a_trial_without_summary_are_said_not_hidden() -> None:
    text = render_html(_no_winner_doc())
    assert "No winner: no configuration beat the others beyond the spread yet." in text
    assert "No winner, no snippet." in text
    assert "not finished" in text
    # The eliminated trial without summary: a row of dashes, and still its reason.
    row = text[text.index("<th>t02</th>") :]
    row = row[: row.index("</tr>")]
    assert row.count("<td class=num>—</td>") == 6
    assert "below the best half" in text
    assert text.count("data:image/png;base64,") == 2  # the other trials still plot


def test_nothing_measured_says_so_instead_of_empty_plots() -> None:
    text = render_html(_nothing_measured_doc())
    assert "data:image/png" not in text
    assert "No trial has a measured throughput yet: nothing to plot." in text
    assert "None: every configuration was measured (or is still pending)." in text
    assert text.count("No round measured.") == 7


@pytest.mark.parametrize(
    "doc",
    [
        {},
        {"trials": None, "budget": None, "slo": None},
        {"trials": [{"id": None, "summary": {"throughput_tok_s": {"mean": "fast", "low": None}}}]},
        {"trials": [{"summary": {"throughput_tok_s": {"mean": 1.0, "n": True}}, "gpu": {"devices": [None]}}]},
        {
            "trials": [
                {
                    "id": "a",
                    "summary": {"throughput_tok_s": {"mean": 5.0}, "ttft_p99_s": {"mean": float("nan")}},
                }
            ]
        },
    ],
)
def test_malformed_or_partial_documents_render(doc: dict[str, Any]) -> None:
    text = render_html(doc)
    assert text.startswith("<!DOCTYPE html>")
    assert "sentinel tune" in text


def test_a_missing_matplotlib_is_one_line_with_the_install_hint(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # None in sys.modules is how Python spells "not importable": this is a box without the extra.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    with pytest.raises(ReportError) as exc:
        write_report(copy.deepcopy(_doc()), tmp_path / "tune")
    assert (
        str(exc.value) == "the sentinel tune report needs matplotlib: pip install 'sglang-sentinel[report]'"
    )
    assert not (tmp_path / "tune").exists()


def test_an_unwritable_directory_is_a_report_error(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(ReportError, match="cannot write the tune report to"):
        write_report(_doc(), blocker / "tune")


@requires_chromium
@pytest.mark.parametrize("variant", ["fixture", "nothing measured"])
def test_report_renders_in_headless_chromium(tmp_path: Path, variant: str) -> None:
    doc = _doc() if variant == "fixture" else _nothing_measured_doc()
    page = write_report(doc, tmp_path / "tune")
    seen = check_report_page(page, profile=tmp_path / "profile")
    assert seen.images == (2 if variant == "fixture" else 0)
    assert seen.loaded == seen.images
    assert seen.errors == 0
    assert seen.console == []
    assert "Winning launch profile" in seen.dom
