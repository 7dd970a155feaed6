"""`sentinel bench --profile` (bench_serving 0.5.23's profiler calls), `--plot-throughput` and
`--fake-prefill`, end to end against `sentinel sim` (subprocess) and the fake server."""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from sglang_sentinel.cli import build_parser, main
from sglang_sentinel.cli.bench import build_spec
from sglang_sentinel.cli.bench_plot import text_plot
from sglang_sentinel.cli.bench_profile import profile_plan
from sglang_sentinel.cli.common import CliError

SMALL = [
    "--num-prompts",
    "4",
    "--random-input-len",
    "16",
    "--random-output-len",
    "8",
    "--random-range-ratio",
    "1",
]


async def _bench(*argv: str) -> int:
    return await asyncio.to_thread(main, ["bench", "--log-format", "json", *argv])


def _args(*argv: str) -> argparse.Namespace:
    return build_parser().parse_args(["bench", *argv])


def _events(err: str) -> list[dict[str, Any]]:
    out = []
    for line in err.splitlines():
        if line.startswith("{"):
            out.append(json.loads(line))
    return [e for e in out if str(e.get("event", "")).startswith("bench_profile")]


def _entries(d: Path) -> list[Path]:
    return sorted(d.iterdir())


def _profile_calls(sim: Any) -> list[tuple[str, str]]:
    return re.findall(r'"POST (/st\w+_profile) HTTP/1.1" (\d+)', sim.stdout_text())


@pytest.mark.slow
@pytest.mark.asyncio
@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
async def test_profile_brackets_the_measured_run(
    sim_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str], version: str
) -> None:
    sim = sim_factory("--skip-server-warmup", "--tp-size", "1", "--sglang-version", version)
    argv = ["--base-url", sim.base_url, *SMALL, "--profile", "--profile-output-dir", str(tmp_path / "traces"),
            "--profile-prefix", "bench", "--plot-throughput"]  # fmt: skip
    assert await _bench(*argv) == 0
    captured = capsys.readouterr()
    # one start after the warm-up, one stop after the run, both 200
    assert _profile_calls(sim) == [("/start_profile", "200"), ("/stop_profile", "200")]
    (run_dir,) = _entries(tmp_path / "traces")  # the client made <dir>/<unix time>, as bench_serving
    float(run_dir.name)
    (trace,) = _entries(run_dir)
    assert trace.name.startswith("bench-")
    assert trace.name.endswith("-TP-0.trace.json.gz")
    assert json.loads(gzip.decompress(trace.read_bytes()))["traceEvents"] == []
    started, stopped = _events(captured.err)
    assert (started["event"], started["output_dir"]) == ("bench_profile_started", str(run_dir))
    assert stopped["event"] == "bench_profile_stopped"
    log = sim.stderr_text()
    assert f"Profiling starts. Traces will be saved to: {run_dir}" in log
    assert log.index("Profiling starts") < log.index("Profiling done")
    # the warm-up went out before the profiler started: its request is not in the trace window
    access = sim.stdout_text()
    assert access.index("/generate") < access.index("/start_profile")
    # --plot-throughput: two text charts above the result block
    out = captured.out
    assert out.index("Output tokens per second") < out.index("Concurrent requests per second")
    assert out.index("Concurrent requests per second") < out.index(" Serving Benchmark Result ")
    assert "Time (s)" in out


@pytest.mark.slow
@pytest.mark.asyncio
async def test_profile_steps_leave_the_stop_to_the_server(
    sim_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("--skip-server-warmup", "--tp-size", "1")
    argv = ["--base-url", sim.base_url, *SMALL, "--profile", "--profile-output-dir", str(tmp_path / "traces"),
            "--profile-start-step", "1", "--profile-steps", "3"]  # fmt: skip
    assert await _bench(*argv) == 0
    assert _profile_calls(sim) == [("/start_profile", "200")]  # no /stop_profile: the server stops
    (run_dir,) = _entries(tmp_path / "traces")
    assert len(_entries(run_dir)) == 1
    assert "Profiling done" in sim.stderr_text()


@pytest.mark.slow
@pytest.mark.asyncio
async def test_a_refused_profile_is_reported_and_the_run_goes_on(
    sim_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("--skip-server-warmup", "--tp-size", "1", "--sglang-version", "0.5.23")
    # someone else's profile is running: torch refuses a second one, SGLang answers a bare 500
    theirs = {"output_dir": str(tmp_path / "theirs")}
    await asyncio.to_thread(httpx.post, sim.base_url + "/start_profile", json=theirs)
    argv = ["--base-url", sim.base_url, *SMALL, "--profile", "--profile-output-dir", str(tmp_path)]
    assert await _bench(*argv) == 0
    failed, stopped = _events(capsys.readouterr().err)
    assert (failed["event"], failed["call"], failed["status"]) == ("bench_profile_failed", "start", 500)
    assert failed["error"] == "Internal Server Error: Internal Server Error"
    assert stopped["event"] == "bench_profile_stopped"  # bench_serving stops anyway (theirs, here)
    # PD workers: one with nothing listening, then the sim
    argv = ["--base-url", sim.base_url, *SMALL, "--profile", "--pd-separated",
            "--profile-output-dir", str(tmp_path / "pd"),
            "--profile-decode-url", "http://127.0.0.1:9", sim.base_url]  # fmt: skip
    assert await _bench(*argv) == 0
    events = _events(capsys.readouterr().err)
    kinds = [(e["event"], e["worker"]) for e in events]
    assert kinds == [
        ("bench_profile_failed", "Decode-0"),
        ("bench_profile_started", "Decode-1"),
        ("bench_profile_failed", "Decode-0"),
        ("bench_profile_stopped", "Decode-1"),
    ]
    assert all(e["url"] == "http://127.0.0.1:9" for e in events if e["worker"] == "Decode-0")
    assert "Traceback" not in json.dumps(events)


@pytest.mark.asyncio
async def test_a_server_without_the_routes_is_a_logged_failure(
    fake_sglang: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    fake = await fake_sglang()
    argv = ["--base-url", fake.base_url, *SMALL, "--profile", "--profile-output-dir", str(tmp_path)]
    assert await _bench(*argv) == 0
    events = _events(capsys.readouterr().err)
    assert [(e["event"], e["call"], e["status"]) for e in events] == [
        ("bench_profile_failed", "start", 404),
        ("bench_profile_failed", "stop", 404),
    ]


def test_profile_bodies_are_bench_servings(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("SGLANG_TORCH_PROFILER_DIR", str(tmp_path / "env"))
    plan = profile_plan(_args("--profile", "--profile-by-stage", "--profile-start-step", "7"))
    assert plan is not None
    local = plan.local_output_dir()
    assert local.parent == tmp_path / "env"
    assert plan.start_body(str(local)) == {
        "activities": ["CPU", "GPU"],
        "num_steps": 5,  # bench_serving's default with --profile-by-stage
        "profile_by_stage": True,
        "profile_stages": None,
        "output_dir": str(local),
        "profile_prefix": None,
        "start_step": "7",
    }
    assert plan.stop_body() == {"start_step": "7"}
    assert plan.stops()
    steps = profile_plan(_args("--profile", "--profile-num-steps", "4", "--profile-steps", "9"))
    assert steps is not None
    assert steps.start_body("/x")["num_steps"] == "9"  # --profile-steps wins, as a string
    assert not steps.stops()
    num = profile_plan(_args("--profile", "--profile-num-steps", "4"))
    assert num is not None
    assert not num.stops()  # one server: the server stops after num_steps
    pd = profile_plan(
        _args(
            "--profile", "--profile-num-steps", "4", "--pd-separated", "--profile-prefill-url", "http://a:1"
        )
    )
    assert pd is not None
    assert pd.stops()
    assert pd.workers == (("Prefill-0", "http://a:1"),)
    assert profile_plan(_args("--profile-steps", "3")) is None  # without --profile: nothing
    with pytest.raises(CliError) as exc:
        profile_plan(_args("--profile", "--pd-separated", "--profile-decode-url", "localhost:30010"))
    assert exc.value.exit_code == 2
    with pytest.raises(SystemExit):  # argparse: the two URL flags are mutually exclusive
        _args("--profile-prefill-url", "http://a:1", "--profile-decode-url", "http://b:2")
    with pytest.raises(SystemExit):
        _args("--profile-activities", "RPD")


def test_fake_prefill_adds_the_fake_bootstrap_fields() -> None:
    spec = build_spec(_args("--fake-prefill", "--extra-request-body", '{"bootstrap_room": 5, "x": 1}'))
    assert dict(spec.extra_body) == {"x": 1, "bootstrap_host": "2.2.2.2", "bootstrap_room": 0}


@pytest.mark.slow
@pytest.mark.asyncio
async def test_fake_prefill_runs_against_a_decode_server(
    sim_factory: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("--skip-server-warmup", "--disaggregation-mode", "decode")
    plain = await _bench("--base-url", sim.base_url, *SMALL, "--warmup-requests", "0")
    assert plain == 1  # without a bootstrap room the decode server refuses every request
    out = tmp_path / "r.jsonl"
    assert await _bench("--base-url", sim.base_url, *SMALL, "--fake-prefill", "--output-file", str(out)) == 0
    assert json.loads(out.read_text())["completed"] == 4


def test_text_plot_shape() -> None:
    lines = text_plot([0.0, 2.0, 4.0], "T", width=10, height=3).splitlines()
    assert lines == ["  T", "4 |  *", "  | *", "0 |*", "  +---", "   0 2", "Time (s)"]
    wide = text_plot([float(i) for i in range(100)], "T", width=10, height=4).splitlines()
    assert wide[1] == "99 |        **"  # columns past the width keep their highest second (99, 89)
    assert wide[-2].endswith("99")
