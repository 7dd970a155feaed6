"""deploy/alerts.yml evaluated by a real Prometheus while faults hit the simulated server.

The rules are the shipped ones with every duration (``for:``, ranges, offsets) scaled down
(:func:`support.live_prometheus.scale_durations`), generated here from deploy/alerts.yml so that
they cannot drift from it. A sentinel daemon runs the simulator as its child with the simulator's
control API on a known port; the test arms faults through it and follows each alert through
pending, firing and resolved as Prometheus reports them (``/api/v1/alerts``).
"""

from __future__ import annotations

import contextlib
import re
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from datetime import datetime
from pathlib import Path

import httpx
import pytest

from support.live_prometheus import (
    PROMTOOL,
    Box,
    Prometheus,
    free_port,
    requires_prometheus,
    scale_durations,
)
from support.loopback import HTTP
from support.waits import DEADLINE_S

pytestmark = [pytest.mark.slow, requires_prometheus]

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "alerts.yml"
# One hour of the shipped rules is 15 s here: `for: 10m` holds 2.5 s, `[1h]` spans 15 s (the
# last wait, ReferenceRunsFailing resolving, is an hour after the first fault). A `for:` shorter
# than the 1 s evaluation interval still shows pending for one evaluation.
FACTOR = 1 / 240
SCRAPE = "1s"


def test_scaled_rules_are_the_shipped_ones_with_short_durations(tmp_path: Path) -> None:
    text = ALERTS.read_text()
    scaled = scale_durations(text, FACTOR, min_range_ms=4000)
    assert "for: 2500ms" in scaled  # 10m
    assert "[15000ms]" in scaled  # 1h
    assert "offset 15000ms" in scaled
    assert "[4000ms]" in scaled  # 5m is 1.25 s: raised to four scrapes
    # ReferenceRunsStale's 3 hours, written as a count of hours: 45 s scaled.
    assert "sentinel_load_last_run_timestamp_seconds) / 3600 > 0.0125  # threshold" in scaled
    assert not [line for line in scaled.splitlines() if line.strip().startswith("for:") and "ms" not in line]
    # Nothing but durations changed.
    assert len(scaled.splitlines()) == len(text.splitlines())
    if PROMTOOL is not None:
        (tmp_path / "scaled.yml").write_text(scaled)
        check = subprocess.run(
            [PROMTOOL, "check", "rules", str(tmp_path / "scaled.yml")],
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert check.returncode == 0, check.stdout + check.stderr


class AlertLog:
    """Polls Prometheus' active alerts; keeps each alert's sequence of states (inactive = absent)."""

    def __init__(self, prom: Prometheus) -> None:
        self.prom = prom
        self.states: dict[str, list[str]] = {}
        self.current: dict[str, str] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            with contextlib.suppress(httpx.HTTPError, AssertionError, ValueError):
                active = self.prom.alerts()
                for name in set(active) | set(self.current):
                    state = active.get(name, "inactive")
                    history = self.states.setdefault(name, ["inactive"])
                    if history[-1] != state:
                        history.append(state)
                self.current = active
            self._stop.wait(0.2)

    def wait(self, name: str, state: str, timeout: float, tail: Callable[[], str]) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.current.get(name, "inactive") == state:
                return
            time.sleep(0.1)
        raise AssertionError(f"{name} not {state} after {timeout} s (states {self.states}):\n{tail()}")

    def went_through(self, name: str, *states: str) -> bool:
        """The states occurred in this order (others may come between)."""
        it = iter(self.states.get(name, []))
        return all(any(s == want for s in it) for want in states)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(5)


@pytest.fixture
def alert_log() -> Iterator[Callable[[Prometheus], AlertLog]]:
    made: list[AlertLog] = []

    def make(prom: Prometheus) -> AlertLog:
        log = AlertLog(prom)
        made.append(log)
        return log

    yield make
    for log in made:
        log.stop()


def _last_evaluation(prom: Prometheus, group: str) -> float:
    """When Prometheus last evaluated the rule group (epoch seconds; 0 before its first)."""
    for g in prom.api("rules")["groups"]:
        if g["name"] == group:
            # RFC 3339 with nanoseconds: fromisoformat takes at most microseconds.
            stamp = re.sub(r"(\.\d{6})\d*", r"\1", g["lastEvaluation"]).replace("Z", "+00:00")
            return datetime.fromisoformat(stamp).timestamp()
    return 0.0


def _long_request(base_url: str, decoding: threading.Event) -> None:
    """Decoding for long enough that the stall freezes it mid-flight; ``decoding`` is set at its
    first token. (Streamed as OpenAI completions: deltas, where /generate repeats the whole text.)"""
    body = {"prompt": "hello", "max_tokens": 60000, "ignore_eos": True, "stream": True}
    with (
        contextlib.suppress(httpx.HTTPError),
        HTTP.stream("POST", base_url + "/v1/completions", json=body, timeout=120) as stream,
    ):
        for line in stream.iter_lines():
            if line.startswith("data: {"):
                decoding.set()


@pytest.mark.slow(seconds=25)
def test_alerts_follow_faults_pending_firing_resolved(
    tmp_path: Path,
    box_factory: Callable[..., Box],
    prometheus_factory: Callable[..., Prometheus],
    alert_log: Callable[[Prometheus], AlertLog],
) -> None:
    rules = tmp_path / "alerts.fast.yml"
    rules.write_text(scale_durations(ALERTS.read_text(), FACTOR, min_range_ms=4000))
    control_port = free_port()
    alert_only = {"action": "alert"}
    box = box_factory(
        "faults",
        {
            "server": {
                # Checks only report (no restart), so that a fault stays until the test clears it.
                "checks": {
                    "health": alert_only,
                    "health_generate": alert_only,
                    "canary": {**alert_only, "failures": 1},
                    "stall": {**alert_only, "stall_after": 1.5},
                },
                # The second crash within a minute is one restart too many: a crash loop.
                "restart": {"max_restarts": 1, "window": 60},
                "profiles": {"fastsim": {"extra_args": ["--control-port", str(control_port)]}},
            },
            "schedule": {
                "calibrate_when_missing": False,
                "profiles": {"reference": {"interval_seconds": 1}},
            },
        },
    )
    daemon = box.start()
    prom = prometheus_factory({"box1": box.exporter}, interval=SCRAPE, rule_files=[rules])
    control = f"http://127.0.0.1:{control_port}"
    server = f"http://127.0.0.1:{box.server_port}"

    def tail() -> str:
        return daemon.tail() + "\n--- prometheus:\n" + prom.tail()

    prom.wait(
        "the server ready, scraped", lambda: bool(prom.query('sentinel_server_state{state="ready"} == 1')), 40
    )
    log = alert_log(prom)
    quiet = ("SglangCanaryFailing", "SglangStalled", "SglangCrashLoop", "ReferenceRunsFailing")
    time.sleep(2)
    assert not set(quiet) & set(log.current), log.current

    def arm(spec: str) -> None:
        HTTP.post(control + "/faults", json={"spec": spec}, timeout=10).raise_for_status()

    def clear() -> None:
        HTTP.delete(control + "/faults", timeout=10).raise_for_status()

    # 1. Streams that end in an error chunk (HTTP 200; the checks do not stream, the server stays
    #    ready): the reference run fails. sentinel_load_runs_total{outcome="failed"} is at 0 from
    #    start: its first event fires ReferenceRunsFailing (no `for`: straight to firing); it
    #    resolves once the hour (15 s here) has passed, checked at the end.
    arm("error_chunk")
    log.wait("ReferenceRunsFailing", "firing", 30, tail)
    clear()

    # 2. Garbage answers: the canaries fail while /health stays fine.
    arm("garbage")
    log.wait("SglangCanaryFailing", "firing", 30, tail)
    clear()
    log.wait("SglangCanaryFailing", "inactive", 30, tail)
    assert log.went_through("SglangCanaryFailing", "pending", "firing", "inactive"), log.states

    # 3. A stall with a request in flight: no tokens while it runs. The stall is armed once the
    #    long request has had its first token, so it is in the running batch and stays there: a
    #    wait for "some request running" was met by a reference run's request that could end
    #    before the stall came, and the stall then froze an engine with nothing running (no
    #    stall to see: the check counts running requests, and /health failing is another alert).
    decoding = threading.Event()
    threading.Thread(target=_long_request, args=(server, decoding), daemon=True).start()
    assert decoding.wait(DEADLINE_S), "the long request never had its first token"
    arm("stall:duration=3000")
    log.wait("SglangStalled", "firing", 30, tail)
    clear()
    log.wait("SglangStalled", "inactive", 30, tail)
    assert log.went_through("SglangStalled", "pending", "firing", "inactive"), log.states

    # 4. Crashes: sentinel restarts the server once, the second crash is a crash loop (failed).
    #    The operator's reset is a sentinel restart: the alert resolves once the server is ready.
    # (The stall before may have taken /health down long enough for SglangServerDown: only what
    # follows the crashes counts below.)
    log.wait("SglangServerDown", "inactive", 30, tail)
    before = {name: len(log.states.get(name, [])) for name in ("SglangServerDown", "SglangRestartsFrequent")}
    arm("crash")
    prom.wait(
        "the restarted server",
        lambda: (
            HTTP.get(control + "/state", timeout=2).json()["status"] == "up"
            and bool(prom.query("sum(sentinel_server_restarts_total) >= 1"))
        ),
        30,
    )
    arm("crash")
    log.wait("SglangCrashLoop", "firing", 30, tail)
    # Held past SglangServerDown's `for: 5m` (1.25 s here): the crash loop is one page. The
    # server has been down (failed) for 3 s of scrapes, 12 minutes of the shipped rules.
    prom.wait(
        "the crash loop held past 5 minutes (scaled)",
        lambda: bool(prom.query('min_over_time(sentinel_server_state{state="failed"}[3000ms]) == 1')),
        30,
    )
    held = time.time()
    prom.wait(
        "the server rules evaluated after that", lambda: _last_evaluation(prom, "sentinel-server") > held, 10
    )
    # Between a crash and sentinel's restart (or its giving up) the server is briefly down in no
    # excluded state: SglangServerDown may go pending then, but never fires.
    for other in ("SglangServerDown", "SglangRestartsFrequent"):
        assert "firing" not in log.states.get(other, [])[before[other] :], log.states
        assert log.current.get(other, "inactive") == "inactive", log.states
    assert log.current.get("SglangCrashLoop") == "firing", log.states
    assert daemon.stop() == 0
    daemon = box.start()
    log.wait("SglangCrashLoop", "inactive", 40, tail)
    assert log.went_through("SglangCrashLoop", "pending", "firing", "inactive"), log.states

    log.wait("ReferenceRunsFailing", "inactive", 40, tail)
    assert log.went_through("ReferenceRunsFailing", "firing", "inactive"), log.states
    print("\nalert states seen:", log.states)
