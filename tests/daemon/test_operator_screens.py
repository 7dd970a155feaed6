"""What the operator sees, through a real daemon on the simulator: status page, `sentinel status`, /metrics.

A sim crash fault drives the server from starting through ready and restarting into failed; at
each state the page is captured (and rendered in headless Chromium), and the screens must say
why (the classified crash cause and its log lines), when (the next retry, or "waiting for
reset"), and what to do (``sentinel reset``); probe results must not pretend a server that is
gone still passes. A second daemon runs a calibration that cannot saturate the simulator: every
screen must call its figure a lower bound.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.cli.status import health_code, summarize
from support.daemon_proc import DaemonProcess, clean_env, free_port
from support.headless_chromium import CHROMIUM, dump_dom_and_screenshot
from support.loopback import HTTP

pytestmark = pytest.mark.slow

# Where to keep the screenshots for a human to look at (optional).
_SCREENS = os.environ.get("SENTINEL_SCREENS_DIR")


def _start(tmp_path: Path, config: str) -> DaemonProcess:
    """The daemon on ``config`` with its exporter on a free port (``@EXPORTER_PORT@``)."""
    port = free_port()
    cfg = tmp_path / "sentinel.toml"
    cfg.write_text(config.replace("@EXPORTER_PORT@", str(port)))
    # The screens are captured at each state the server passes through: polled every 50 ms, as
    # before, so that a short-lived state is not missed.
    return DaemonProcess(cfg, port, tmp_path / "daemon.log", poll=0.05)


def _cli_status(d: DaemonProcess) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "sglang_sentinel", "status", "--url", d.url],
        capture_output=True,
        text=True,
        timeout=60,
        env=clean_env(),
    )


_CRASH_LOOP = """
state_dir = "@STATE@"

[log]
format = "json"

[server]
profile = "fastsim"
port = @SERVER_PORT@
stop_timeout = 5
startup_poll_interval = 0.1

[server.checks.health]
interval = 0.3

[server.checks.stall]
interval = 0.3

[server.restart]
# Long enough for the restarting screen (its state, page and document) to be captured in it,
# polled every 50 ms, on a busy box too.
backoff_initial = 2.0
jitter = 0
max_restarts = 1
window = 600

[server.profiles.fastsim]
kind = "sim"
sim_speed = 10
# Port refused 1 s, 503 for 0.5 s, ready; 3 s after ready (time for the first probe and canary
# results) a scheduler exception kills it.
sim_faults = ["slow_start:refuse=10,warmup=5", "crash:after=30"]

[exporter]
port = @EXPORTER_PORT@

[schedule]
calibrate_when_missing = false
recalibrate_cron = ""
"""


def _shoot(html: str, name: str, tmp_path: Path) -> tuple[str, Path | None]:
    """The page's DOM as Chromium parsed it, and a screenshot (when Chromium is there)."""
    page = tmp_path / f"{name}.html"
    page.write_text(html, encoding="utf-8")
    if CHROMIUM is None:
        return html, None
    profile = tmp_path / f"profile-{name}"
    shot = tmp_path / f"{name}.png"
    dom = dump_dom_and_screenshot(page, shot, profile=profile, virtual_time_ms=500, window="1280,1500")
    if _SCREENS:
        Path(_SCREENS).mkdir(parents=True, exist_ok=True)
        shutil.copy(shot, Path(_SCREENS) / f"status-{name}.png")
    return dom, shot


def _text(dom: str) -> str:
    """What a reader sees: tags dropped, entities left (they are asserted escaped)."""
    return re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", dom))


@pytest.mark.slow(seconds=22)
def test_crash_loop_screens(tmp_path: Path, daemons: list[DaemonProcess]) -> None:
    config = _CRASH_LOOP.replace("@STATE@", str(tmp_path / "state")).replace(
        "@SERVER_PORT@", str(free_port())
    )
    d = _start(tmp_path, config)
    daemons.append(d)
    pages: dict[str, tuple[str, dict[str, Any]]] = {}

    def capture(state: str) -> Callable[[], bool]:
        def check() -> bool:
            doc = d.status()
            if doc["server"].get("state") != state:
                return False
            names = {p["name"] for p in doc["probes"]}
            if state == "ready" and not {"health", "stall", "canary_arithmetic"} <= names:
                return False  # wait for the first results, so there is something to go stale
            html = HTTP.get(d.url + "/", timeout=5).text
            pages[state] = (html, d.status())
            return True

        return check

    d.wait("starting", capture("starting"), 60)
    d.wait("ready", capture("ready"), 60)
    ready_metrics = d.metrics()
    d.wait("restarting", capture("restarting"), 60)
    restarting_metrics = d.metrics()
    d.wait("failed", capture("failed"), 90)

    # --- starting: what is going on and how long sentinel waits
    html, doc = pages["starting"]
    text = _text(_shoot(html, "starting", tmp_path)[0])
    assert "Wait: the server is loading weights" in text
    assert doc["server"]["last_crash"] is None

    # --- ready: probes with their age, no "why" box
    html, doc = pages["ready"]
    text = _text(_shoot(html, "ready", tmp_path)[0])
    assert "What to do" not in text
    assert re.search(r"health ok \d+ s ago", text), text
    assert ready_metrics[("sentinel_probe_success", (("probe", "stall"),))] == 1

    # --- restarting: the cause, its log lines, the retry time; nothing pretends to pass
    html, doc = pages["restarting"]
    server = doc["server"]
    crash = server["last_crash"]
    # The sim's scheduler exception is a NaN in the sampler: classified, with the lines it rests on.
    assert crash["reason"] == "nan_in_sampler", crash
    assert crash["lines"], crash
    assert any("Scheduler hit an exception" in line for line in crash["lines"]), crash
    assert server["next_retry_at"] > doc["generated_at"] - 1
    text = _text(_shoot(html, "restarting", tmp_path)[0])
    assert "Scheduler hit an exception" in text
    assert re.search(r"Next retry: \S+ \S+ UTC \(in \d+ s\)", text), text
    assert re.search(r"stall unknown \d+ s ago", text), text
    probes = {p["name"]: p for p in doc["probes"]}
    assert probes["health"]["success"] is False
    assert probes["stall"]["success"] is None
    assert probes["stall"]["stale"]
    # /metrics: /health 0 while the port refuses, stall absent (unknown), its alert silent.
    assert restarting_metrics[("sentinel_probe_success", (("probe", "health"),))] == 0
    assert ("sentinel_probe_success", (("probe", "stall"),)) not in restarting_metrics
    assert health_code(doc) == 1
    summary = summarize(doc, now=doc["generated_at"])
    assert "next retry  in" in summary
    assert "(stale: server not serving)" in summary

    # --- failed: waiting for reset, and the command that gets out of it
    html, doc = pages["failed"]
    assert doc["server"]["retry"] == "waiting for reset"
    dom, shot = _shoot(html, "failed", tmp_path)
    text = _text(dom)
    assert "Next retry: none, waiting for reset" in text
    assert "sentinel reset" in text
    assert "Scheduler hit an exception" in text
    if shot is not None:
        assert shot.stat().st_size > 20_000  # a rendered page, not a blank one
    cli = _cli_status(d)
    assert cli.returncode == 1, cli.stdout + cli.stderr
    out = cli.stdout
    assert out.startswith("sentinel: DEGRADED")
    assert "server      failed" in out
    assert "last crash  nan_in_sampler" in out
    assert "Scheduler hit an exception" in out
    assert "next retry  none: waiting for reset" in out
    assert "`sentinel reset`" in out
    m = d.metrics()
    assert m[("sentinel_server_state", (("state", "failed"),))] == 1
    assert m[("sentinel_probe_success", (("probe", "health"),))] == 0
    assert ("sentinel_probe_success", (("probe", "stall"),)) not in m
    # Collectors are current with the server state: the SGLang scrape fails, it does not say ok.
    collectors = {c["name"]: c for c in d.status()["collectors"]}
    assert collectors["sglang"]["success"] is False


_LOWER_BOUND = """
state_dir = "@STATE@"

[log]
format = "json"

[server]
profile = "fastsim"
port = @SERVER_PORT@
stop_timeout = 5
startup_poll_interval = 0.2

[server.profiles.fastsim]
kind = "sim"
sim_speed = 20

[exporter]
port = @EXPORTER_PORT@

[schedule]
warmup_seconds = 0.2
# The first reference run (after which the initial calibration is scheduled) right after the
# warm-up, not after the default 15 s window kept out of the reference series.
reference_exclusion_seconds = 0
calibrate_when_missing = true
recalibrate_cron = ""

[schedule.profiles.reference]
num_prompts = 8
request_rate = 16
input_len = 16
output_len = 16
interval_seconds = 600
run_on_ready = true

[calibration]
input_len = 16
output_len = 16
start_concurrency = 1
max_concurrency = 2
step_min_requests = 4
"""


def test_lower_bound_calibration_screens(tmp_path: Path, daemons: list[DaemonProcess]) -> None:
    config = _LOWER_BOUND.replace("@STATE@", str(tmp_path / "state")).replace(
        "@SERVER_PORT@", str(free_port())
    )
    d = _start(tmp_path, config)
    daemons.append(d)
    d.wait("a calibration", lambda: bool(d.status()["capacity"]), 120)
    doc = d.status()
    capacity = doc["capacity"]
    assert capacity["bound"] == "lower", capacity
    assert capacity["max_concurrency"] == 2
    # No SLO configured: nothing claims "within SLO".
    assert capacity["slo_concurrency"] is None
    html = HTTP.get(d.url + "/", timeout=5).text
    text = _text(_shoot(html, "lower-bound", tmp_path)[0])
    assert "≥" in text
    assert "lower bound: did not saturate up to concurrency 2" in text
    assert "within SLO" not in text
    out = summarize(doc)
    assert "capacity    ≥" in out
    assert "lower bound" in out
    m = d.metrics()
    series = [k for k in m if k[0] == "sentinel_capacity_output_throughput_tokens_per_second"]
    assert series == [("sentinel_capacity_output_throughput_tokens_per_second", (("bound", "lower"),))]
    assert not [k for k in m if k[0] == "sentinel_capacity_slo_concurrency"]
    latest = HTTP.get(d.url + "/calibration/latest.json", timeout=5).json()
    assert latest["stop_reason"] == "max-concurrency"
    report = HTTP.get(d.url + "/calibration/report", timeout=5)
    if report.status_code == 200:  # matplotlib installed
        assert "lower bound: did not saturate up to concurrency 2" in report.text
        assert "within SLO" not in report.text
    json.dumps(doc)  # the document stays plain JSON
