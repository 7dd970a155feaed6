"""Readers against fixtures captured from SGLang 0.5.9 / 0.5.23's own code (fixtures/versions/),
plus the version table and the launch facts."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import structlog
import structlog.testing
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.schedule.polite import parse_loads_json, parse_metrics_text
from sglang_sentinel.sglang.launch_facts import launch_facts
from sglang_sentinel.sglang.logparse import (
    CrashKind,
    CrashSignature,
    DecodeBatch,
    KvRetraction,
    NanSanitized,
    PrefillBatch,
    classify_crash,
    parse_line,
)
from sglang_sentinel.sglang.series import loads_totals, server_total
from sglang_sentinel.sglang.versions import (
    CHANGES,
    NEWEST_KNOWN,
    OLDEST_KNOWN,
    Version,
    behaves_new,
    note_version,
    parse_version,
    resolve,
)
from sglang_sentinel.supervise.classify import classify_exit
from sglang_sentinel.supervise.runners import ExitInfo

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "versions"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "sglang-versions.md"


def fixture_lines(name: str) -> dict[str, str]:
    """``{tag: line}``: each fixture line ends with ``  # <tag>`` naming where it comes from."""
    out = {}
    for raw in (FIXTURES / name).read_text().splitlines():
        line, _, tag = raw.rpartition("  # ")
        out[tag] = line
    return out


def test_every_captured_batch_line_parses() -> None:
    lines = fixture_lines("log_lines.txt")
    for tag, line in lines.items():
        event = parse_line(line)
        if "retract" in tag:
            assert isinstance(event, KvRetraction), tag
        else:
            assert isinstance(event, DecodeBatch | PrefillBatch), tag
    hisparse = parse_line(lines["0.5.23 decode hisparse"])
    assert isinstance(hisparse, DecodeBatch)
    assert (hisparse.gpu_token_usage, hisparse.cpu_token_usage) == (0.62, 0.13)
    assert hisparse.token_usage == 0.62  # the device pool: the GPU's KV
    assert hisparse.used_tokens == 8192
    swa = parse_line(lines["0.5.23 decode hybrid_swa"])
    assert isinstance(swa, DecodeBatch)
    assert (swa.token_usage, swa.used_tokens) == (0.41, 20800)


def test_bootstrap_queue_under_both_names() -> None:
    lines = fixture_lines("log_lines.txt")
    new = parse_line(lines["0.5.23 PD prefill"])
    old = parse_line(lines["0.5.9 PD prefill"])
    assert isinstance(new, PrefillBatch)
    assert isinstance(old, PrefillBatch)
    assert (new.bootstrap_req, new.optimistic_req, new.inflight_req, new.pending_token) == (3, 2, 1, 512)
    assert (old.bootstrap_req, old.prealloc_req, old.optimistic_req) == (3, 3, None)
    assert not new.extra


def test_retraction_with_mamba_field_keeps_the_ratio() -> None:
    event = parse_line(fixture_lines("log_lines.txt")["0.5.23 retract"])
    assert event == KvRetraction(event.timestamp, event.ranks, 3, 1024, 0.7, 0.9, 2)  # type: ignore[union-attr]


def test_captured_crash_texts() -> None:
    lines = fixture_lines("crash_lines.txt")
    died = parse_line(lines["0.5.23 engine.py"])
    assert isinstance(died, CrashSignature)
    assert (died.kind, died.exit_code) == (CrashKind.SCHEDULER_DIED_INIT, -9)
    crashed = parse_line(lines["0.5.23 watchdog.py"])
    assert isinstance(crashed, CrashSignature)
    assert (crashed.kind, crashed.exit_code) == (CrashKind.SUBPROCESS_CRASHED, -11)
    sanitized = parse_line(lines["0.5.23 sanitize"])
    assert sanitized == NanSanitized(sanitized.timestamp, sanitized.ranks, "sampler: next_token_logits")  # type: ignore[union-attr]
    nan = [lines["0.5.23 device assert (triton)"], "RuntimeError: CUDA error: device-side assert triggered"]
    assert classify_crash(nan) is CrashKind.NAN_DETECTED
    for version in ("0.5.9", "0.5.23"):
        assert classify_crash([lines[version]]) is CrashKind.TOKENIZER_EXCEPTION
    assert parse_line("DetokenizerManager hit an exception: x").kind is CrashKind.DETOKENIZER_EXCEPTION  # type: ignore[union-attr]


KILLED = ExitInfo(None, 9, "killed by signal 9 (SIGKILL)")


def test_classify_new_crash_texts() -> None:
    lines = fixture_lines("crash_lines.txt")
    # SGLang SIGKILLs its own tree after a TokenizerManager exception: not an outside kill.
    crash = classify_exit(KILLED, [lines["0.5.23"]], 0.0)
    assert crash.reason == "unknown"
    assert "tokenizer_exception" in crash.detail
    nan = classify_exit(
        KILLED, [lines["0.5.23 device assert (triton)"], "CUDA error: device-side assert"], 0.0
    )
    assert nan.reason == "nan_in_sampler"
    assert "nan_detected" in nan.detail
    oom_killed = classify_exit(ExitInfo(1, None, "exited with status 1"), [lines["0.5.23 engine.py"]], 0.0)
    assert (oom_killed.reason, oom_killed.child_exit_code) == ("killed", -9)
    assert "OOM killer" in oom_killed.detail
    segv = classify_exit(KILLED, [lines["0.5.23 watchdog.py"], "Received sigquit from a child process."], 0.0)
    assert (segv.reason, segv.child_exit_code) == ("unknown", -11)
    assert "SIGSEGV" in segv.detail


def samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(s.labels), s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name
    ]


@pytest.mark.parametrize(
    ("fixture", "running", "queued"),
    [("priority", 6.0, 3.0), ("all_schedulers_tp4", 5.0, 2.0), ("dp2_priority_all", 7.0, 1.0)],
)
def test_scheduler_gauges_counted_once(fixture: str, running: float, queued: float) -> None:
    text = (FIXTURES / f"metrics_0.5.23_{fixture}.txt").read_text()
    assert server_total(samples(text, "sglang:num_running_reqs")) == running
    assert server_total(samples(text, "sglang:num_queue_reqs")) == queued
    text += '# TYPE sglang:token_usage gauge\nsglang:token_usage{tp_rank="0"} 0.5\n'
    load = parse_metrics_text(text)
    assert (load.running, load.queued) == (running, queued)


def test_v1_loads_both_shapes() -> None:
    old = json.loads((FIXTURES / "v1_loads_0.5.9.json").read_text())
    new = json.loads((FIXTURES / "v1_loads_0.5.23.json").read_text())
    assert "aggregate" not in new
    a, b = loads_totals(old), loads_totals(new)
    assert (a.running, a.waiting, a.source) == (7.0, 1.0, "aggregate")
    assert (b.running, b.waiting, b.token_usage, b.source) == (7.0, 1.0, 0.4, "loads")
    assert parse_loads_json(new).running == 7.0
    with pytest.raises(ValueError, match="num_running_reqs"):
        loads_totals({"loads": [{"num_running_reqs": "x"}]})


def test_version_parse_and_resolve() -> None:
    assert parse_version("0.5.10.post1") > parse_version("0.5.10") > parse_version("0.5.10rc1")
    assert parse_version("v0.5.23") == Version(0, 5, 23)
    with pytest.raises(ValueError, match="not an SGLang version"):
        parse_version("latest")
    assert resolve("0.5.9").known
    newer = resolve("0.6.0")
    assert (newer.known, newer.behaves_as) == (False, NEWEST_KNOWN)
    assert not resolve(None).known
    assert not behaves_new("loads.no_aggregate", Version(0, 5, 9))
    assert not behaves_new("loads.no_aggregate", Version(0, 5, 12, 1))  # read: no gap to assume over
    assert behaves_new("loads.no_aggregate", Version(0, 5, 13))
    older = resolve("0.5.8")
    assert (older.known, older.behaves_as) == (False, OLDEST_KNOWN)
    assert "oldest supported" in older.note
    assert resolve("0.5.13").note == "release row 0.5.13 (read from its wheel)"
    assert not behaves_new("cli.nsa_rejected", Version(0, 5, 19))
    assert behaves_new("cli.nsa_rejected", Version(0, 5, 20))
    # str() parses back to the same row: a .postN is its own read release, a pre-release (its
    # marker kept) the newest read release below it.
    for text in ("0.5.10.post1", "0.5.23rc0", "0.5.24.dev3"):
        assert str(parse_version(text)) == text
    assert resolve(str(parse_version("0.5.23rc0"))).note.startswith("release row 0.5.22 ")
    assert resolve(str(parse_version("0.5.10.post1"))).note.startswith("release row 0.5.10.post1 ")


def test_unknown_version_is_logged_once() -> None:
    # structlog's own test double: independent of how an earlier test configured logging.
    with structlog.testing.capture_logs() as events:
        note_version("9.9.1")
        note_version("9.9.1")
    assert [e["event"] for e in events].count("sglang_version_unknown") == 1


def test_every_change_is_documented_with_its_source() -> None:
    doc = DOCS.read_text()
    for row in CHANGES:
        assert f"`{row.key}`" in doc, row.key
        assert re.search(r"sglang/|PR #|issue", row.source), row.key


def test_launch_facts_per_version() -> None:
    old, new, future = launch_facts("0.5.9", 120), launch_facts("0.5.23", 120), launch_facts("0.7.0", 120)
    assert old.entrypoint == ("python3", "-m", "sglang.launch_server")
    assert old.dsa_flag_prefix == "--nsa"
    assert old.disable_cuda_graph_flags == ("--disable-cuda-graph",)
    assert old.glm_dsa_default_backends == ("flashmla_auto", "flashmla_kv")
    assert any("glm5.sm120.trtllm_bf16 (known_good)" in f.what for f in old.glm5_findings)
    assert any("glm5.sm120.trtllm_unsupported" in f.what for f in new.glm5_findings)
    assert new.entrypoint == ("sglang", "serve")
    assert new.launch_server_warns
    assert not new.nsa_flags_accepted
    assert launch_facts("0.5.19", 120).nsa_flags_accepted
    assert new.disable_cuda_graph_deprecated
    assert new.dsa_default_kv_dtype == "fp8_e4m3"
    assert new.glm_dsa_default_backends == ("flashinfer_sparse_mla", "flashinfer_sparse_mla")
    assert new.dsa_default_backends == ("trtllm", "trtllm")
    assert launch_facts("0.5.23", 90).dsa_default_backends == ("flashmla_sparse", "fa3")
    assert new.deep_gemm_env == "SGLANG_ENABLE_JIT_DEEPGEMM"
    assert "SGLANG_ENABLE_DEEP_GEMM" in new.unread_env
    assert not future.resolution.known
    assert future.entrypoint == new.entrypoint
    assert not launch_facts("0.5.23", 100).glm5_findings  # SM120 findings only on SM12x
