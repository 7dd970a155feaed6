"""The metric reference (0.5.9 and 0.5.23) against the wheels' source and real /metrics samples."""

from __future__ import annotations

import dataclasses
import importlib.util
import os
import re
from pathlib import Path

import pytest

from support.sglang_metricnames import FAMILIES, VERSIONS, MetricFamily, by_name, of_version

# Where the unpacked wheels are: $SGLANG_WHEEL_DIR/s59/sglang and $SGLANG_WHEEL_DIR/s23/sglang
# (``pip download --no-deps sglang==0.5.9`` / ``==0.5.23``, then unzip each into s59 / s23);
# scripts/test does that into the repository's .cache/sglang-wheels, the default here.
REPO = Path(__file__).resolve().parents[2]
WHEEL_DIR = Path(os.environ.get("SGLANG_WHEEL_DIR", REPO / ".cache" / "sglang-wheels"))
WHEELS = {"0.5.9": WHEEL_DIR / "s59" / "sglang", "0.5.23": WHEEL_DIR / "s23" / "sglang"}
# Real SGLang output (copies of the project's reference samples, kept in the repository).
SAMPLES = Path(__file__).resolve().parents[1] / "collect" / "samples"
SCHEDULER_LABELS = ("model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank")


def test_reference_matches_the_wheel_source() -> None:
    missing = [str(p) for p in WHEELS.values() if not (p / "srt").is_dir()]
    if missing:
        pytest.skip("unpacked SGLang wheels not found (scripts/test downloads them; or set SGLANG_WHEEL_DIR)")
    spec = importlib.util.spec_from_file_location(
        "extract", Path(__file__).parents[1] / "support" / "extract_sglang_metricnames.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    namespace: dict[str, object] = {}
    exec(module.render(module.extract(WHEEL_DIR)), namespace)
    fresh = namespace["FAMILIES"]
    assert isinstance(fresh, tuple)
    assert [dataclasses.astuple(f) for f in fresh] == [dataclasses.astuple(f) for f in FAMILIES]


def test_every_family_in_real_metric_samples_is_known() -> None:
    files = [p for p in sorted(SAMPLES.glob("sglang-metrics-*.txt")) if "smg" not in p.name]
    assert files, SAMPLES  # shipped with the tests
    known = {(f.name, f.type) for f in of_version("0.5.9")}
    checked = 0
    for path in files:
        for name, kind in re.findall(r"^# TYPE (sglang:\S+) (\w+)", path.read_text(), re.M):
            assert (name, kind) in known, f"{path.name}: {name} {kind}"
            checked += 1
    assert checked >= 10


def test_ttft_buckets_match_the_real_exposition_pr7317() -> None:
    path = SAMPLES / "sglang-metrics-pr7317.txt"
    edges = {
        float(le) for le in re.findall(r'time_to_first_token_seconds_bucket\{le="([\d.]+)"', path.read_text())
    }
    (ttft,) = by_name("sglang:time_to_first_token_seconds")
    assert ttft.buckets is not None
    assert edges <= set(ttft.buckets)
    assert {8.0, 10.0, 20.0, 40.0, 60.0, 80.0, 100.0, 200.0, 400.0} <= edges


@pytest.mark.parametrize(
    ("name", "kind", "labels"),
    [
        ("sglang:num_running_reqs", "gauge", SCHEDULER_LABELS),
        ("sglang:num_queue_reqs", "gauge", SCHEDULER_LABELS),
        ("sglang:token_usage", "gauge", SCHEDULER_LABELS),
        ("sglang:gen_throughput", "gauge", SCHEDULER_LABELS),
        ("sglang:realtime_tokens_total", "counter", (*SCHEDULER_LABELS, "mode")),
        ("sglang:num_retracted_requests_total", "counter", SCHEDULER_LABELS),
        ("sglang:prompt_tokens_total", "counter", ("model_name",)),
        ("sglang:generation_tokens_total", "counter", ("model_name",)),
        ("sglang:num_requests_total", "counter", ("model_name",)),
        ("sglang:time_to_first_token_seconds", "histogram", ("model_name",)),
        ("sglang:inter_token_latency_seconds", "histogram", ("model_name",)),
        ("sglang:e2e_request_latency_seconds", "histogram", ("model_name",)),
        ("sglang:http_requests_active", "gauge", ("endpoint", "method")),
    ],
)
def test_families_the_product_relies_on(name: str, kind: str, labels: tuple[str, ...]) -> None:
    families = by_name(name)
    assert families, name
    family: MetricFamily = families[0]
    assert family.type == kind
    assert family.labels == labels
    assert family.condition is None


@pytest.mark.parametrize(
    ("name", "kind", "labels"),
    [
        ("sglang:num_running_reqs", "gauge", SCHEDULER_LABELS),
        ("sglang:num_queue_reqs", "gauge", SCHEDULER_LABELS),
        ("sglang:token_usage", "gauge", SCHEDULER_LABELS),
        ("sglang:realtime_tokens_total", "counter", (*SCHEDULER_LABELS, "mode")),
        # 0.5.23 tokenizer labels: engine_type added, histograms/counters split by is_streaming.
        ("sglang:prompt_tokens_total", "counter", ("model_name", "engine_type", "is_streaming")),
        ("sglang:generation_tokens_total", "counter", ("model_name", "engine_type", "is_streaming")),
        ("sglang:time_to_first_token_seconds", "histogram", ("model_name", "engine_type", "is_streaming")),
        ("sglang:http_requests_active", "gauge", ("endpoint", "method")),
    ],
)
def test_families_the_product_relies_on_in_0_5_23(name: str, kind: str, labels: tuple[str, ...]) -> None:
    (family,) = by_name(name, "0.5.23")
    assert family.type == kind
    assert family.labels == labels
    assert "srt/observability/" in family.source


def test_versions_match_the_versions_table() -> None:
    # versions.py metrics.module_moved: 85 literal families added in 0.5.23, 8 gone.
    assert VERSIONS == ("0.5.9", "0.5.23")
    old = {f.name for f in of_version("0.5.9")}
    new = {f.name for f in of_version("0.5.23")}
    assert (len(new - old), len(old - new)) == (85, 8)
    assert "sglang:num_retractions" in old - new  # gone by 0.5.12 (its wheel no longer defines it)
    assert all(f.versions <= set(VERSIONS) and f.versions for f in FAMILIES)


def test_histograms_have_sorted_buckets() -> None:
    for family in FAMILIES:
        if family.type == "histogram" and family.buckets is not None:
            assert list(family.buckets) == sorted(family.buckets), family.name
