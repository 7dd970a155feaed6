"""The one-shot commands (sim, bench, sweep) as an operator runs them: SIGHUP from a closed terminal,
the API key from the environment, and sweep writing into a state directory only when asked."""

from __future__ import annotations

import fcntl
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from support.loopback import HTTP

pytestmark = pytest.mark.slow

_SMALL_BENCH = [
    "--num-prompts",
    "40",
    "--request-rate",
    "20",
    "--random-input-len",
    "16",
    "--random-output-len",
    "16",
    "--random-range-ratio",
    "1",
    "--disable-tqdm",
]


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("SENTINEL_", "OPENAI_"))}
    env.update(extra)
    return env


def test_the_simulator_ignores_sighup(sim_factory: Any) -> None:
    sim = sim_factory()
    sim.process.send_signal(signal.SIGHUP)
    time.sleep(0.5)
    assert sim.process.poll() is None
    assert HTTP.get(sim.base_url + "/health", timeout=5).status_code == 200


def test_bench_ignores_sighup_and_reads_sentinel_api_key(sim_factory: Any, tmp_path: Path) -> None:
    key = "sk-bench-from-env-4321"
    sim = sim_factory("--api-key", key, "--speed", "20")
    out = tmp_path / "bench.jsonl"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sglang_sentinel",
            "bench",
            "--base-url",
            sim.base_url,
            *_SMALL_BENCH,
            "--output-file",
            str(out),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(SENTINEL_API_KEY=key),
        text=True,
    )
    # SIGHUP once the bench is sending (its handlers are set before the first request), not after
    # a fixed time: a busy box can take longer than that just to import.
    deadline = time.monotonic() + 60
    while not sim.control("/requests")["requests"] and proc.poll() is None:
        assert time.monotonic() < deadline, "the bench sent no request within 60 s"
        time.sleep(0.05)
    proc.send_signal(signal.SIGHUP)
    stdout, stderr = proc.communicate(timeout=120)
    assert proc.returncode == 0, stderr
    assert "Successful requests:" in stdout
    assert key not in stdout + stderr
    assert '"completed": 40' in out.read_text()


def _sweep(sim: Any, *extra: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    argv = [sys.executable, "-m", "sglang_sentinel", "sweep", "--base-url", sim.base_url]
    argv += ["--random-input-len", "16", "--random-output-len", "16", "--max-concurrency", "4"]
    argv += ["--max-requests", "60", "--log-level", "error", *extra]
    return subprocess.run(argv, capture_output=True, text=True, env=env or _env(), timeout=300)


def test_sweep_writes_a_state_dir_only_when_asked_and_warns_about_a_live_daemon(
    sim_factory: Any, tmp_path: Path
) -> None:
    sim = sim_factory("--enable-metrics", "--speed", "50")
    default_state = tmp_path / "default-state"
    env = _env(SENTINEL_STATE_DIR=str(default_state), SENTINEL_CALIBRATION__CLIENT_LAG_TOLERANCE="0.5")
    # Not asked: nothing is written anywhere.
    plain = _sweep(sim, env=env)
    assert plain.returncode in (0, 1), plain.stderr
    assert "Calibration Result" in plain.stdout
    assert not default_state.exists()

    # --save: the state directory run would use; marked with its target.
    saved = _sweep(sim, "--save", env=env)
    assert "saved:" in saved.stdout, saved.stderr
    (stored,) = (default_state / "calibration").glob("calibration-*.json")
    assert f'"url": "{sim.base_url}"' in stored.read_text().replace('":"', '": "')

    # --state-dir of a directory a daemon holds (its lock, as `sentinel run` takes it): a warning.
    live = tmp_path / "live"
    live.mkdir()
    fd = os.open(live / "sentinel.lock", os.O_RDWR | os.O_CREAT, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        os.write(fd, b"4242\n")
        warned = _sweep(sim, "--state-dir", str(live), env=env)
    finally:
        os.close(fd)
    assert "belongs to a running sentinel daemon (pid 4242)" in warned.stderr
    assert list((live / "calibration").glob("calibration-*.json"))


def test_sweep_report_without_the_extra_fails_before_sending_load(sim_factory: Any, tmp_path: Path) -> None:
    sim = sim_factory("--enable-metrics")
    # An interpreter where matplotlib is not importable (as without the [report] extra).
    hide = tmp_path / "hide"
    hide.mkdir()
    (hide / "sitecustomize.py").write_text("import sys\nsys.modules['matplotlib'] = None\n")
    env = _env(PYTHONPATH=os.pathsep.join([str(hide), os.environ.get("PYTHONPATH", "")]))
    # (the server's own start-up warm-up request is counted too: compare before and after)
    before = _requests(HTTP.get(sim.base_url + "/metrics", timeout=5).text)
    done = _sweep(sim, "--report", str(tmp_path / "report"), env=env)
    assert done.returncode == 2, done.stderr
    assert "pip install 'sglang-sentinel[report]'" in done.stderr
    assert "Calibration Result" not in done.stdout
    served = HTTP.get(sim.base_url + "/metrics", timeout=5).text
    assert _requests(served) == before  # not one request was sent


def _requests(metrics: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    return sum(
        s.value
        for f in text_string_to_metric_families(metrics)
        for s in f.samples
        if s.name.startswith("sglang:num_requests_total")
    )
