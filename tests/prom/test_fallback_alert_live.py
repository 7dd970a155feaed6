"""SglangServerOnFallbackConfig evaluated by a real Prometheus: it fires when the daemon falls back
to a known-good configuration and resolves after ``reset --configured``.

The daemon runs the simulator as its child; this host's history holds one other known-good
configuration of the same SGLang version (written here as a previous life would have, with one
launch flag more). Garbage armed through the simulator's control API makes the configured life
fail its canaries: the fallback is launched, the alert fires; ``POST /reset?configured=1`` starts
the configured command again (a new process: the armed fault is gone), the alert resolves.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from sglang_sentinel.supervise.knowngood import KNOWN_GOOD_FILE
from support.live_prometheus import Box, Prometheus, free_port, requires_prometheus, scale_durations

pytestmark = [pytest.mark.slow, requires_prometheus]

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "alerts.yml"
ALERT = "SglangServerOnFallbackConfig"


def _firing(prom: Prometheus) -> str:
    return prom.alerts().get(ALERT, "inactive")


def test_fallback_alert_fires_and_resolves(
    tmp_path: Path, box_factory: Callable[..., Box], prometheus_factory: Callable[..., Prometheus]
) -> None:
    rules = tmp_path / "alerts.fast.yml"
    rules.write_text(scale_durations(ALERTS.read_text(), 1 / 240, min_range_ms=4000))
    control = free_port()
    extra = ["--sglang-version", "0.5.9", "--control-port", str(control)]
    box = box_factory(
        "fallback",
        {
            "server": {
                "checks": {"canary": {"failures": 1}},
                "fallback": {"enabled": True, "failures": 1, "window": 60, "good_after": 0.5},
                "profiles": {"fastsim": {"extra_args": extra}},
            },
            "schedule": {"calibrate_when_missing": False},
        },
    )
    state = box.workdir / "state"
    state.mkdir(parents=True, exist_ok=True)
    flags = [
        ["--host", ["127.0.0.1"]], ["--port", [str(box.server_port)]], ["--enable-metrics", []],
        ["--speed", ["100"]], ["--sglang-version", ["0.5.9"]], ["--control-port", [str(control)]],
        ["--max-running-requests", ["64"]],
    ]  # fmt: skip
    now = time.time() - 3600
    record = {
        "argv_hash": "0123456789abcdef",
        "flags": flags,
        "argv": ["python", "-m", "sglang_sentinel_sim", *(t for f, v in flags for t in (f, *v))],
        "sglang_version": "0.5.9",
        "driver_version": None,
        "gpu_model": None,
        "first_good": now,
        "last_good": now,
        "profile": "fastsim",
    }
    (state / KNOWN_GOOD_FILE).write_text(json.dumps({"records": [record]}))
    daemon = box.start()
    prom = prometheus_factory({"box1": box.exporter}, interval="1s", rule_files=[rules])

    def tail() -> str:
        return daemon.tail() + "\n--- prometheus:\n" + prom.tail()

    prom.wait("ready and scraped", lambda: bool(prom.query('sentinel_server_state{state="ready"} == 1')), 40)
    assert prom.query('sentinel_server_fallback_total{reason="garbage"} == 0'), tail()
    assert _firing(prom) == "inactive"
    httpx.post(f"http://127.0.0.1:{control}/faults", json={"spec": "garbage"}, timeout=10).raise_for_status()
    prom.wait("the alert firing", lambda: _firing(prom) == "firing", 60)
    assert prom.query('sentinel_server_config_info{source="fallback"} == 1'), tail()
    assert prom.query('sentinel_server_fallback_total{reason="garbage"} == 1'), tail()
    status = httpx.get(f"http://{box.exporter}/status.json", timeout=10).json()
    message = status["server"]["fallback"]["message"]
    assert message.startswith("running the fallback configuration"), message
    assert "sentinel reset --configured" in message
    assert any("--max-running-requests" in d for d in status["server"]["fallback"]["differences"])
    reset = httpx.post(f"http://{box.exporter}/reset?configured=1", timeout=10)
    assert reset.status_code == 200, reset.text
    prom.wait("the alert resolved", lambda: _firing(prom) == "inactive", 60)
    assert prom.query('sentinel_server_config_info{source="configured"} == 1'), tail()
