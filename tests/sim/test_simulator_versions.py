"""The simulator's output per SGLang version against the real-SGLang fixtures (shapes).

``tests/sglang/fixtures/versions/`` holds lines and payloads produced by the 0.5.9 / 0.5.23 wheels'
own code (its README says how). Here the simulator's log lines, metric label sets, ``/v1/loads``
bodies and crash texts are compared with them by *shape*: numbers become ``<n>``, so layout, field
names and order must match exactly while the values may differ. 0.5.9's plain Prefill/Decode lines
have no fixture there; their regexes are written from the format strings of
``srt/managers/scheduler_metrics_mixin.py`` (0.5.9) L214-240 and L358-366.
"""

from __future__ import annotations

import io
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.sglang.logparse import DecodeBatch, KvRetraction, PrefillBatch, parse_line
from sglang_sentinel_sim import SimServer, serve
from sglang_sentinel_sim import crash as simcrash
from sglang_sentinel_sim.versions import decode_line, prefill_line, retract_line

FIXTURES = Path(__file__).resolve().parents[1] / "sglang" / "fixtures" / "versions"
_NUMBER = re.compile(r"-?\d+(?:\.\d+)?")
_STAMP = re.compile(r"^\[[^\]]*\] ")


def _tagged(name: str) -> dict[str, str]:
    """``line  # tag`` rows of a fixture file, by tag."""
    out: dict[str, str] = {}
    for row in (FIXTURES / name).read_text().splitlines():
        line, _, tag = row.rpartition("  # ")
        out[tag.strip()] = line
    return out


def _shape(line: str) -> str:
    """Numbers -> <n>; the graph flag -> <b> (the profiles run with CUDA graphs off)."""
    return re.sub(r"\b(True|False)\b", "<b>", _NUMBER.sub("<n>", _STAMP.sub("", line)))


LOGS = _tagged("log_lines.txt")
CRASHES = _tagged("crash_lines.txt")

# 0.5.9 scheduler_metrics_mixin.py: log_prefill_stats / log_decode_stats without PD, spec, hybrid pools.
PREFILL_059 = re.compile(
    r"Prefill batch, #new-seq: \d+, #new-token: \d+, #cached-token: \d+, token usage: \d+\.\d\d, "
    r"#running-req: \d+, #queue-req: \d+, input throughput \(token/s\): \d+\.\d\d, cuda graph: (True|False)"
)
DECODE_059 = re.compile(
    r"Decode batch, #running-req: \d+, #token: \d+, token usage: \d+\.\d\d, cuda graph: (True|False), "
    r"gen throughput \(token/s\): \d+\.\d\d, #queue-req: \d+"
)


def _messages(err: io.StringIO) -> list[str]:
    return [_STAMP.sub("", line) for line in err.getvalue().splitlines()]


async def _run_some(**options: Any) -> tuple[list[str], str, dict[str, Any], SimServer]:
    """Serve, run two requests, return (log messages, /metrics text, /v1/loads body, server)."""
    err = io.StringIO()
    async with (
        serve(speed=200, enable_metrics=True, decode_log_interval=4, err=err, **options) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        for priority in (0, 1):
            body: dict[str, Any] = {
                "text": "hi",
                "sampling_params": {"max_new_tokens": 40, "ignore_eos": True},
            }
            if options.get("enable_priority_scheduling"):
                body["priority"] = priority
            assert (await client.post("/generate", json=body)).status_code == 200
        metrics = (await client.get("/metrics")).text
        loads = (await client.get("/v1/loads")).json()
    return _messages(err), metrics, loads, sim


# ---- log lines -----------------------------------------------------------------------------------


async def test_0_5_23_batch_lines_have_the_wheels_shape() -> None:
    messages, _, _, _ = await _run_some(sglang_version="0.5.23")
    decodes = [m for m in messages if m.startswith("Decode batch")]
    prefills = [m for m in messages if m.startswith("Prefill batch")]
    assert decodes
    assert prefills
    assert {_shape(m) for m in decodes} == {_shape(LOGS["0.5.23 decode plain"])}
    assert {_shape(m) for m in prefills} == {_shape(LOGS["0.5.23 prefill plain"])}


async def test_0_5_23_hisparse_decode_line_prints_both_pools() -> None:
    messages, _, _, _ = await _run_some(sglang_version="0.5.23", enable_hisparse=True)
    decodes = [m for m in messages if m.startswith("Decode batch")]
    assert decodes
    assert {_shape(m) for m in decodes} == {_shape(LOGS["0.5.23 decode hisparse"])}
    assert all(
        "token usage: " not in m.replace("gpu token usage", "").replace("cpu token usage", "")
        for m in decodes
    )
    prefills = [m for m in messages if m.startswith("Prefill batch")]
    assert {_shape(m) for m in prefills} == {_shape(LOGS["0.5.23 prefill hisparse"])}
    for m in decodes:
        event = parse_line(m)
        assert isinstance(event, DecodeBatch)
        assert event.gpu_token_usage is not None
        assert event.cpu_token_usage is not None
        assert event.extra == ()


async def test_0_5_9_batch_lines_match_the_0_5_9_format_strings() -> None:
    messages, _, _, _ = await _run_some(sglang_version="0.5.9")
    decodes = [m for m in messages if m.startswith("Decode batch")]
    prefills = [m for m in messages if m.startswith("Prefill batch")]
    assert decodes
    assert prefills
    assert all(DECODE_059.fullmatch(m) for m in decodes), decodes[0]
    assert all(PREFILL_059.fullmatch(m) for m in prefills), prefills[0]
    for m in prefills:
        event = parse_line(m)
        assert isinstance(event, PrefillBatch)
        assert event.extra == ()


def test_retraction_line_shape() -> None:
    # 0.5.23 adds "#mamba_num_gained" only when the pool is hybrid-SSM (scheduler.py: `if
    # mamba_num_gained is not None`); none of the profiles is, so both versions print this:
    real = LOGS["0.5.23 retract"].replace(", #mamba_num_gained: 2", "")
    for version in ("0.5.9", "0.5.23"):
        line = retract_line(version, reqs=3, gained=1024, old_ratio=0.7, new_ratio=0.9)
        assert _shape(line) == _shape(real)
        event = parse_line(line)
        assert isinstance(event, KvRetraction)


def test_prefill_and_decode_formatters_differ_where_the_versions_do() -> None:
    kw: dict[str, Any] = dict(
        new_seqs=1,
        new_tokens=2048,
        cached_tokens=0,
        usage=0.29,
        running=0,
        queued=0,
        throughput=46.36,
        cuda_graph=False,
    )
    assert prefill_line("0.5.23", **kw) == _STAMP.sub("", LOGS["0.5.23 prefill plain"])
    assert PREFILL_059.fullmatch(prefill_line("0.5.9", **kw))
    dk: dict[str, Any] = dict(
        running=5, kv_used=20800, usage=0.29, spec="", cuda_graph=True, gen_throughput=144.95, queued=0
    )
    assert decode_line("0.5.23", **dk) == _STAMP.sub("", LOGS["0.5.23 decode plain"])
    assert decode_line("0.5.23", **dk, hisparse=(8192, 0.62, 65536, 0.13)) == _STAMP.sub(
        "", LOGS["0.5.23 decode hisparse"]
    )


# ---- metrics -------------------------------------------------------------------------------------


def _label_sets(text: str, name: str) -> list[dict[str, str]]:
    return [dict(s.labels) for f in text_string_to_metric_families(text) for s in f.samples if s.name == name]


def _fixture_label_names(name: str, family: str) -> set[frozenset[str]]:
    return {frozenset(labels) for labels in _label_sets((FIXTURES / name).read_text(), family)}


@pytest.mark.parametrize("family", ["sglang:num_running_reqs", "sglang:num_queue_reqs"])
async def test_priority_scheduling_label_shape(family: str) -> None:
    _, metrics, _, _ = await _run_some(sglang_version="0.5.23", enable_priority_scheduling=True)
    ours = _label_sets(metrics, family)
    assert {frozenset(labels) for labels in ours} == _fixture_label_names(
        "metrics_0.5.23_priority.txt", family
    )
    priorities = {labels["priority"] for labels in ours}
    # the total under "", one series per priority seen ("None": the warm-up carries no priority);
    # the requests ran one at a time, so none was ever seen waiting
    expected = {"", "None", "0", "1"} if family == "sglang:num_running_reqs" else {""}
    assert priorities == expected


async def test_priority_label_is_0_5_23_only() -> None:
    _, metrics, _, _ = await _run_some(sglang_version="0.5.9", enable_priority_scheduling=True)
    assert all("priority" not in labels for labels in _label_sets(metrics, "sglang:num_running_reqs"))


@pytest.mark.parametrize("family", ["sglang:num_running_reqs", "sglang:num_queue_reqs"])
async def test_all_schedulers_label_shape(family: str) -> None:
    _, metrics, _, _ = await _run_some(
        sglang_version="0.5.23", enable_metrics_for_all_schedulers=True, tp_size=4
    )
    ours = _label_sets(metrics, family)
    # The fixture ran with --enable-priority-scheduling too (priority=""): the label names otherwise.
    expected = {
        frozenset(names - {"priority"})
        for names in _fixture_label_names("metrics_0.5.23_all_schedulers_tp4.txt", family)
    }
    assert {frozenset(labels) for labels in ours} == expected
    assert sorted(labels["tp_rank"] for labels in ours) == ["0", "1", "2", "3"]


async def test_0_5_23_tokenizer_families_carry_is_streaming_and_engine_type() -> None:
    _, metrics, _, _ = await _run_some(sglang_version="0.5.23")
    for family in ("sglang:num_requests_total", "sglang:e2e_request_latency_seconds_count"):
        for labels in _label_sets(metrics, family):
            assert set(labels) == {"model_name", "engine_type", "is_streaming"}, family
    assert "sglang:num_retractions" not in metrics  # gone in 0.5.23
    assert "sglang:cache_config_info" not in metrics
    assert "sglang:request_time_per_output_token_seconds_count" in metrics


# ---- /v1/loads and /server_info ------------------------------------------------------------------


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
async def test_v1_loads_keys_match_the_fixture(version: str) -> None:
    _, _, loads, _ = await _run_some(sglang_version=version)
    real = json.loads((FIXTURES / f"v1_loads_{version}.json").read_text())
    assert list(loads) == list(real)
    if version == "0.5.9":
        # the fixture's entries were minimal inputs to _compute_aggregate; a real entry is all of
        # GetLoadsReqOutput (io_struct.py) without timestamp, plus num_total_reqs
        assert set(real["loads"][0]) <= set(loads["loads"][0])
        assert set(loads["aggregate"]) == set(real["aggregate"])
    else:
        assert "aggregate" not in loads
        assert list(loads["loads"][0]) == list(real["loads"][0])  # LoadSnapshot struct order
    assert loads["version"] == version


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
async def test_server_info_version(version: str) -> None:
    async with (
        serve(speed=200, sglang_version=version) as sim,
        httpx.AsyncClient(base_url=sim.base_url) as client,
    ):
        for path in ("/server_info", "/get_server_info"):
            assert (await client.get(path)).json()["version"] == version


# ---- crash texts ---------------------------------------------------------------------------------


def test_crash_texts_have_the_wheels_shape() -> None:
    head, _ = simcrash.tokenizer_lines()
    assert _shape(head) == _shape(CRASHES["0.5.23"]) == _shape(CRASHES["0.5.9"])
    died = simcrash.died_init_lines("0.5.23", rank=0).splitlines()[-1]
    assert _shape(died) == _shape(CRASHES["0.5.23 engine.py"])
    assert _shape(simcrash.subprocess_crash_line(3, 4242)) == _shape(CRASHES["0.5.23 watchdog.py"])
    assert _shape(simcrash.NAN_SANITIZED) == _shape(CRASHES["0.5.23 sanitize"])
    asserts, _, _ = simcrash.nan_assert_lines("0.5.23")
    real_assert = CRASHES["0.5.23 device assert (triton)"]
    tail = real_assert[real_assert.index("_assert_no_nan_kernel") :]
    assert _shape(asserts.splitlines()[0].split("async_probe.py:117: ", 1)[1]) == _shape(tail)
