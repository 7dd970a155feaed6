"""SglangServerOnFallbackConfig evaluated by a real Prometheus scraping a real ``sentinel run``.

The self-healing launch on SM120, end to end: the daemon launches the simulator's GLM-5-NVFP4
profile (8 simulated RTX PRO 6000, SM120) with the DSA backends that answer right there
(trtllm/trtllm) and records that launch known-good itself; the operator edits the profile to the
known-bad flashmla backends (launch_facts glm5.sm120.flashmla_garbage: the simulator answers
NaN-style garbage) and restarts sentinel (SIGHUP keeps ``[server]``); the daemon falls back to
the recorded launch within the window, its canaries pass, the alert fires and stays firing with
no second fallback; the operator puts the good backends back and restarts sentinel (the saved
decision is about another configured command: discarded), the alert resolves, fired once.

The GPUs of this scenario are the simulator's: its profile is what makes a backend answer right
or garbage. The daemon's fake NVML backend replays H200 readings only, so the GPU collector is off
here (a record would name an H200) and the records carry no GPU model; the fallback's candidates
from history need none (the launch table, which reads the profile's ``gpu_arch``, is not a source
here).

And the way back while the fallback runs: ``POST /reset?configured=1`` (``sentinel reset
--configured``) relaunches the configured command at once, the alert resolves. That configured
launch must answer right this time, which an edited configuration cannot give without a restart
of sentinel (one that would discard the decision first): here the garbage is the simulator's fault
armed through its control API on the plain sim profile, gone with the process, and the known-good
record is one a previous life of this host would have written.
"""

from __future__ import annotations

import itertools
import json
import os
import signal
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.supervise.knowngood import KNOWN_GOOD_FILE
from support.fallback_reads import known_good_record, records
from support.live_prometheus import (
    Box,
    Prometheus,
    free_port,
    requires_prometheus,
    scale_durations,
)
from support.loopback import HTTP

pytestmark = [pytest.mark.slow, requires_prometheus]

ALERTS = Path(__file__).resolve().parents[2] / "deploy" / "alerts.yml"
ALERT = "SglangServerOnFallbackConfig"
GOOD = ("trtllm", "trtllm")  # the deployment's DSA backends for 0.5.9 on SM120: answers right
BAD = ("flashmla_sparse", "flashmla_kv")  # SGLang's defaults there: NaN-style garbage
PROFILE = "glm5-sm120"
WINDOW = 60.0


def _firing(prom: Prometheus) -> str:
    return prom.alerts().get(ALERT, "inactive")


def _rules(tmp_path: Path) -> Path:
    rules = tmp_path / "alerts.fast.yml"
    rules.write_text(scale_durations(ALERTS.read_text(), 1 / 240, min_range_ms=4000))
    return rules


def _sm120(backends: tuple[str, str]) -> dict[str, Any]:
    """The box's config with the GLM-5 SM120 simulator launched with these DSA backends."""
    extra = [
        "--profile", "glm5-nvfp4-8x-rtxpro6000", "--sglang-version", "0.5.9",
        "--nsa-prefill-backend", backends[0], "--nsa-decode-backend", backends[1],
        "--kv-cache-dtype", "bfloat16",
    ]  # fmt: skip
    return {
        "server": {
            "profile": PROFILE,
            "checks": {"canary": {"failures": 1}},
            "fallback": {
                "enabled": True,
                "failures": 2,
                "window": WINDOW,
                "good_after": 0.5,
                "sources": ["history"],
            },
            "profiles": {PROFILE: {"kind": "sim", "sim_speed": 100, "extra_args": extra}},
        },
        # No GPU collector: the fake backend's GPUs are H200s, this scenario's are the simulator's.
        "collectors": {"enabled": ["sglang", "sglang_log"]},
        "schedule": {"calibrate_when_missing": False},
    }


def _config_info(source: str, running: str, configured: str) -> str:
    return (
        f'sentinel_server_config_info{{source="{source}", config_hash="{running}", '
        f'configured_hash="{configured}"}}'
    )


def _one(prom: Prometheus, expr: str) -> float | None:
    """The value of an instant query that selects at most one series (None: none)."""
    result = prom.query(expr)
    assert len(result) <= 1, (expr, result)
    return float(result[0]["value"][1]) if result else None


def _raw(prom: Prometheus, selector: str, since: float) -> list[float]:
    """Every sample Prometheus stored for ``selector`` (one series) since ``since``, in order."""
    seconds = max(1, int(time.time() - since) + 1)
    result = prom.query(f"{selector}[{seconds}s]")
    assert len(result) <= 1, (selector, result)
    return [float(v) for _, v in result[0]["values"]] if result else []


def _firing_runs(prom: Prometheus, since: float) -> int:
    """How many separate times the alert fired since ``since``: runs of consecutive evaluations
    (a resolved alert's series gets a staleness marker, which ends a run)."""
    step = 1.0
    result = prom.query_range(f'ALERTS{{alertname="{ALERT}", alertstate="firing"}}', since, time.time(), step)
    runs = 0
    for series in result:
        stamps = [float(t) for t, _ in series["values"]]
        runs += 1 + sum(1 for a, b in itertools.pairwise(stamps) if b - a > step * 1.5)
    return runs


@pytest.mark.slow(seconds=30)
def test_sm120_garbage_after_a_recorded_good_config_falls_back_once_and_the_alert_fires_once(
    tmp_path: Path, box_factory: Callable[..., Box], prometheus_factory: Callable[..., Prometheus]
) -> None:
    began = time.time()
    box = box_factory("sm120", _sm120(GOOD))
    state = box.workdir / "state"
    prom = prometheus_factory({"box1": box.exporter}, interval="1s", rule_files=[_rules(tmp_path)])
    daemon = box.start()

    def tail() -> str:
        return daemon.tail() + "\n--- prometheus:\n" + prom.tail()

    # 1. The good launch: it answers right for good_after, the daemon records it known-good.
    daemon.wait("a known-good record", lambda: bool(records(state)), 60)
    [good] = records(state)
    good_hash = good["argv_hash"]
    assert good["sglang_version"] == "0.5.9", good  # as the server reported it
    assert good["profile"] == PROFILE, good
    assert "trtllm" in good["argv"], good["argv"]
    assert not any("flashmla" in a for a in good["argv"]), good["argv"]
    assert good["first_good"] <= good["last_good"], good
    assert daemon.status()["server"]["launch_hash"] == good_hash
    configured = _config_info("configured", good_hash, good_hash)
    prom.wait("the good launch scraped as configured", lambda: _one(prom, configured) == 1, 40)
    assert _firing(prom) == "inactive"
    assert daemon.stop() == 0, tail()

    # 2. The operator edits the profile to the known-bad backends and restarts sentinel; the
    # known-good record is the only thing that carries over.
    box.rewrite(_sm120(BAD))
    daemon = box.start()
    prom.wait("the alert firing", lambda: _firing(prom) == "firing", 90)
    status = daemon.status()["server"]
    fb = status["fallback"]
    assert fb["source"] == "fallback", fb
    assert fb["origin"] == "history", fb
    assert fb["reason"] == "garbage", fb
    assert fb["running_hash"] == good_hash, fb  # the recorded launch, this port
    bad_hash = fb["configured_hash"]
    assert bad_hash != good_hash
    assert any("flashmla" in d and "trtllm" in d for d in fb["differences"]), fb["differences"]
    assert fb["message"].startswith("running the fallback configuration"), fb["message"]
    assert "sentinel reset --configured" in fb["message"]
    # Within the window: from the start of the first configured (bad) life to the decision.
    bad_lives = [life for life in fb["lives"] if life["argv_hash"] == bad_hash]
    assert bad_lives, fb["lives"]
    assert all(life["source"] == "configured" for life in bad_lives), fb["lives"]
    assert fb["since"] - bad_lives[0]["at"] <= WINDOW, (fb["since"], bad_lives)
    assert _one(prom, 'sentinel_server_fallback_total{reason="garbage"}') == 1, tail()
    info = _config_info("fallback", good_hash, bad_hash)
    assert _one(prom, info) == 1, tail()
    # The fallback's canaries pass: Prometheus sees them pass on it, and the daemon's own verdict
    # (every canary right for good_after) refreshes the record's last-good time past the decision.
    for probe in ("canary_arithmetic", "canary_is_prime"):
        prom.wait(
            f"{probe} passing on the fallback",
            lambda p=probe: bool(  # type: ignore[misc]
                prom.query(f'sentinel_probe_success{{probe="{p}"}} == 1 and on (instance) {info} == 1')
            ),
            60,
        )
    daemon.wait("the fallback recorded good again", lambda: records(state)[0]["last_good"] > fb["since"], 60)

    # It runs on: a while of scrapes and canary rounds, no second fallback, no wrong answer.
    fired_at = time.time()
    scraped = f"count_over_time({info}[{int(fired_at - began) + 600}s])"
    before = _one(prom, scraped) or 0
    prom.wait("15 more scrapes of the fallback", lambda: (_one(prom, scraped) or 0) >= before + 15, 90)
    assert _firing(prom) == "firing", tail()
    assert set(_raw(prom, 'sentinel_server_fallback_total{reason="garbage"}', fired_at)) == {1.0}, tail()
    assert set(_raw(prom, info, fired_at)) == {1.0}, tail()
    wrong = 'sentinel_probe_failures_total{probe=~"canary_.*", reason=~"wrong_answer|garbage.*"}'
    for series in prom.query(f"{wrong}[{int(time.time() - fired_at) + 1}s]"):
        values = {float(v) for _, v in series["values"]}
        assert len(values) == 1, (series["metric"], series["values"])  # no new wrong answer
    # Every life since the decision (a restart of the fallback's server would be one more) is the
    # fallback's: never the configured launch again, never another configuration.
    lives = daemon.status()["server"]["fallback"]["lives"]
    recent = [(life["source"], life["argv_hash"]) for life in lives if life["at"] >= bad_lives[-1]["at"]]
    assert recent[0] == ("configured", bad_hash), lives
    assert set(recent[1:]) == {("fallback", good_hash)}, lives

    # 3. The operator puts the good backends back. A SIGHUP does not apply [server] (the daemon
    # says a restart is needed, the fallback runs on); a restart of sentinel does, and the saved
    # decision, about the bad command, is discarded.
    box.rewrite(_sm120(GOOD))
    os.kill(daemon.proc.pid, signal.SIGHUP)
    daemon.wait(
        "the reload naming [server]",
        lambda: any("server" in e.get("sections", ()) for e in daemon.events("reload_needs_restart")),
        30,
    )
    assert daemon.status()["server"]["fallback"]["source"] == "fallback"
    assert daemon.stop() == 0, tail()
    daemon = box.start()
    discarded = ["configuration_changed"]
    daemon.wait(
        "the decision discarded",
        lambda: [e["reason"] for e in daemon.events("server_fallback_discarded")] == discarded,
        60,
    )
    daemon.wait_ready(60)
    fb = daemon.status()["server"]["fallback"]
    assert fb["source"] == "configured", fb
    assert fb["configured_hash"] == fb["running_hash"] == good_hash, fb
    prom.wait("the configured launch scraped", lambda: _one(prom, configured) == 1, 40)
    prom.wait("the alert resolved", lambda: _firing(prom) == "inactive", 60)
    assert _one(prom, 'sentinel_server_fallback_discarded_total{why="configuration_changed"}') == 1, tail()
    # The runbook's last step changes nothing more: no fallback runs, the configured one stays.
    reset = HTTP.post(f"http://{box.exporter}/reset?configured=1", timeout=10)
    assert reset.status_code == 200, reset.text
    assert daemon.status()["server"]["fallback"]["source"] == "configured"

    # Over the whole test: one fallback decision (each daemon's counter starts at 0: count the
    # steps up), one firing of the alert, never pending (the rule has no `for`), and the bad
    # launch never recorded known-good.
    fallbacks = _raw(prom, 'sentinel_server_fallback_total{reason="garbage"}', began)
    assert sum(max(0.0, b - a) for a, b in itertools.pairwise(fallbacks)) == 1, fallbacks
    assert [e["reason"] for e in daemon.events("server_fallback")] == ["garbage"]
    # (A scrape that failed while it fired would end a run too: the target's down times then show.)
    assert _firing_runs(prom, began) == 1, (prom.query_range("up == 0", began, time.time()), tail())
    assert not prom.query_range(f'ALERTS{{alertname="{ALERT}", alertstate="pending"}}', began, time.time())
    assert [r["argv_hash"] for r in records(state)] == [good_hash]


def test_reset_configured_ends_a_running_fallback_and_the_alert_resolves(
    tmp_path: Path, box_factory: Callable[..., Box], prometheus_factory: Callable[..., Prometheus]
) -> None:
    rules = _rules(tmp_path)
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
    record = known_good_record(flags, now)
    (state / KNOWN_GOOD_FILE).write_text(json.dumps({"records": [record]}))
    daemon = box.start()
    prom = prometheus_factory({"box1": box.exporter}, interval="1s", rule_files=[rules])

    def tail() -> str:
        return daemon.tail() + "\n--- prometheus:\n" + prom.tail()

    prom.wait("ready and scraped", lambda: bool(prom.query('sentinel_server_state{state="ready"} == 1')), 40)
    assert prom.query('sentinel_server_fallback_total{reason="garbage"} == 0'), tail()
    assert _firing(prom) == "inactive"
    HTTP.post(f"http://127.0.0.1:{control}/faults", json={"spec": "garbage"}, timeout=10).raise_for_status()
    prom.wait("the alert firing", lambda: _firing(prom) == "firing", 60)
    assert prom.query('sentinel_server_config_info{source="fallback"} == 1'), tail()
    assert prom.query('sentinel_server_fallback_total{reason="garbage"} == 1'), tail()
    status = HTTP.get(f"http://{box.exporter}/status.json", timeout=10).json()
    message = status["server"]["fallback"]["message"]
    assert message.startswith("running the fallback configuration"), message
    assert "sentinel reset --configured" in message
    assert any("--max-running-requests" in d for d in status["server"]["fallback"]["differences"])
    reset = HTTP.post(f"http://{box.exporter}/reset?configured=1", timeout=10)
    assert reset.status_code == 200, reset.text
    prom.wait("the alert resolved", lambda: _firing(prom) == "inactive", 60)
    assert prom.query('sentinel_server_config_info{source="configured"} == 1'), tail()
