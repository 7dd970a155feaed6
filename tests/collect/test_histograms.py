"""[collectors.sglang] histograms = keep | coarsen | drop: fewer series, exact counts, golden + promtool.

Regenerate the goldens after an intended change with
``SENTINEL_UPDATE_GOLDEN=1 pytest tests/collect/test_histograms.py`` and review the diff.
"""

from __future__ import annotations

import math
import os
import re
import shutil
import subprocess
from collections import defaultdict
from pathlib import Path

import httpx
import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.collect import SGLangMetricsCollector
from sglang_sentinel.collect.histograms import DEFAULT_COARSE_BUCKETS, HistogramFilter, Mode
from sglang_sentinel.collect.settings import SGLangMetricsSettings
from sglang_sentinel.config import ConfigError, load_settings
from sglang_sentinel_sim import serve


def registry_of(collector: SGLangMetricsCollector) -> CollectorRegistry:
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)
    return registry


SAMPLES = Path(__file__).resolve().parent / "samples"
GOLDEN = Path(__file__).resolve().parent / "golden"
TP8 = (SAMPLES / "sglang-0.5.9-tp8-synthetic.txt").read_text()


def served(text: str, mode: Mode, buckets: tuple[float, ...] = DEFAULT_COARSE_BUCKETS) -> str:
    """The sglang part of /metrics as sentinel serves it with ``mode``."""
    c = SGLangMetricsCollector(
        "http://sglang:30000/metrics",
        transport=httpx.MockTransport(lambda r: httpx.Response(200, text=text)),
        histograms=HistogramFilter(mode, buckets),
    )
    body = generate_latest(registry_of(c)).decode()
    return "\n".join(ln for ln in body.splitlines() if _name(ln).startswith("sglang")) + "\n"


def _name(line: str) -> str:
    return line.split(" ", 3)[2] if line.startswith("# ") else re.split(r"[{ ]", line, maxsplit=1)[0]


def histogram_samples(text: str) -> dict[str, dict[tuple[str, frozenset[tuple[str, str]]], float]]:
    out: dict[str, dict[tuple[str, frozenset[tuple[str, str]]], float]] = defaultdict(dict)
    for fam in text_string_to_metric_families(text):
        if fam.type == "histogram":
            for s in fam.samples:
                out[fam.name][(s.name, frozenset(s.labels.items()))] = s.value
    return out


def test_coarsen_keeps_a_subset_of_boundaries_with_exact_counts_and_untouched_sums() -> None:
    before = histogram_samples(TP8)
    after = histogram_samples(served(TP8, "coarsen"))
    assert set(after) == set(before)  # every histogram family is still there
    fewer = 0
    for name, samples in after.items():
        for key, value in samples.items():
            assert before[name][key] == value  # each kept line's value as the server sent it
        kept_le = {float(dict(k[1])["le"]) for k in samples if k[0].endswith("_bucket")}
        assert math.inf in kept_le
        assert kept_le - {math.inf} <= set(DEFAULT_COARSE_BUCKETS)
        dropped = set(before[name]) - set(samples)
        assert all(k[0].endswith("_bucket") for k in dropped)  # _sum, _count (and _created) all kept
        fewer += len(dropped)
    non_hist = {f.name for f in text_string_to_metric_families(TP8) if f.type != "histogram"}
    assert non_hist == {
        f.name for f in text_string_to_metric_families(served(TP8, "coarsen")) if f.type != "histogram"
    }
    assert fewer > 100


def test_drop_removes_histogram_families_only() -> None:
    text = served(TP8, "drop")
    families = list(text_string_to_metric_families(text))
    assert families
    assert all(f.type != "histogram" for f in families)
    kept = served(TP8, "keep")
    assert {f.name for f in families} == {
        f.name for f in text_string_to_metric_families(kept) if f.type != "histogram"
    }


async def test_coarsened_sim_histograms_in_both_versions() -> None:
    # SGLang's own boundaries (the simulator copies them per version): what coarsen keeps of each.
    expect = {
        "sglang:time_to_first_token_seconds": [0.1, 0.2, 1, 2, 10, 20, 100, 200],
        "sglang:inter_token_latency_seconds": [0.002, 0.01, 0.02, 0.1, 0.2, 1, 2],
    }
    for version in ("0.5.9", "0.5.23"):
        async with (
            serve(speed=200, enable_metrics=True, sglang_version=version) as sim,
            httpx.AsyncClient(base_url=sim.base_url) as c,
        ):
            # 64 tokens: at least eight outputs however late the simulator runs (it joins at most
            # eight decode steps in one), so inter-token latency is observed (8 came as one on a
            # busy box: no observation, no series).
            body = {"text": "hi", "sampling_params": {"max_new_tokens": 64, "ignore_eos": True}}
            await c.post("/generate", json=body)
            text = (await c.get("/metrics")).text
        out = histogram_samples(HistogramFilter("coarsen").apply(text).text)
        for name, les in expect.items():
            got = sorted({float(dict(k[1])["le"]) for k in out[name] if k[0].endswith("_bucket")})
            assert got == [*les, math.inf], (version, name)
        queue = sorted(
            {float(dict(k[1])["le"]) for k in out["sglang:queue_time_seconds"] if k[0].endswith("_bucket")}
        )
        assert len(queue) == (16 if version == "0.5.9" else 20)  # of 37 / 41 boundaries (+Inf included)


def test_an_operator_set_of_boundaries() -> None:
    after = histogram_samples(served(TP8, "coarsen", (1.0, 10.0)))
    les = {
        float(dict(k[1])["le"])
        for k in after["sglang:time_to_first_token_seconds"]
        if k[0].endswith("_bucket")
    }
    assert les == {1.0, 10.0, math.inf}


def test_the_collector_says_how_much_it_left_out() -> None:
    c = SGLangMetricsCollector(
        "http://sglang:30000/metrics",
        transport=httpx.MockTransport(lambda r: httpx.Response(200, text=TP8)),
        histograms=HistogramFilter("coarsen"),
    )
    reg = registry_of(c)
    generate_latest(reg)  # a first scrape
    dropped = reg.get_sample_value("sentinel_sglang_histogram_samples_dropped", {"mode": "coarsen"})
    assert dropped == len(TP8.splitlines()) - len(HistogramFilter("coarsen").apply(TP8).text.splitlines())
    keep = SGLangMetricsCollector(
        "http://sglang:30000/metrics", transport=httpx.MockTransport(lambda r: httpx.Response(200, text=TP8))
    )
    assert "sentinel_sglang_histogram_samples_dropped" not in generate_latest(registry_of(keep)).decode()


def test_settings_are_validated() -> None:
    assert SGLangMetricsSettings().histograms == "keep"
    s = load_settings(None, environ={"SENTINEL_COLLECTORS__SGLANG__HISTOGRAMS": "coarsen"})
    assert s.collectors.sglang.histograms == "coarsen"
    with pytest.raises(ConfigError, match="histograms"):
        load_settings(None, environ={"SENTINEL_COLLECTORS__SGLANG__HISTOGRAMS": "thin"})
    for bad in ("[1, 0.5]", "[1, 1]", '["inf"]'):
        with pytest.raises(ConfigError, match="coarsen_buckets"):
            load_settings(None, environ={"SENTINEL_COLLECTORS__SGLANG__COARSEN_BUCKETS": bad})


@pytest.mark.parametrize("mode", ["coarsen", "drop"])
def test_golden_and_promtool(mode: Mode) -> None:
    text = served(TP8, mode)
    golden = GOLDEN / f"sglang-tp8-histograms-{mode}.txt"
    if os.environ.get("SENTINEL_UPDATE_GOLDEN"):
        golden.parent.mkdir(exist_ok=True)
        golden.write_text(text)
    assert text == golden.read_text()
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (scripts/test installs Debian's prometheus package)")

    def lint(body: str) -> tuple[int, set[str]]:
        proc = subprocess.run(
            [promtool, "check", "metrics"], input=body, capture_output=True, text=True, timeout=60
        )
        return proc.returncode, set((proc.stdout + proc.stderr).splitlines())

    code, problems = lint(text)
    keep_code, keep_problems = lint(served(TP8, "keep"))
    # SGLang's own names draw lint remarks (':' in names, "_ms" units); a variant adds none and
    # parses (an unparsable page is exit 1 with an error line, not a lint remark).
    assert problems <= keep_problems
    assert not any("error" in p for p in problems)
    assert code in (0, 3)
    assert keep_code in (0, 3)
