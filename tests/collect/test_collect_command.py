"""``sentinel collect``: exposition on stdout, failing collectors named on stderr and in the exit code."""

from __future__ import annotations

import os
import socket
import subprocess
import sys


def run(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    full.update(env)
    return subprocess.run(
        [sys.executable, "-m", "sglang_sentinel", "collect", *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=full,
    )


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_all_good_exits_0() -> None:
    result = run(
        {"SENTINEL_COLLECTORS__ENABLED": '["gpu", "sglang_log"]', "SENTINEL_COLLECTORS__GPU__BACKEND": "fake"}
    )
    assert result.returncode == 0, result.stderr
    assert 'sentinel_collector_success{collector="gpu"} 1.0' in result.stdout
    assert result.stdout.count("sentinel_gpu_power_watts{") == 8


def test_a_failing_collector_exits_1_and_says_which() -> None:
    result = run(
        {
            "SENTINEL_COLLECTORS__GPU__BACKEND": "fake",
            "SENTINEL_SERVER__PORT": str(closed_port()),
            "SENTINEL_LOG__FORMAT": "json",
        },
        "--openmetrics",
    )
    assert result.returncode == 1
    assert "collector sglang failed" in result.stderr
    # The bounded reader's typed reason: the stage that failed, then what the transport said.
    assert "/metrics: connect: " in result.stderr
    assert result.stdout.endswith("# EOF\n")
    assert 'sentinel_collector_success{collector="sglang"} 0.0' in result.stdout
