"""Two outages that must each page once, evaluated by a real Prometheus on the shipped rules with
their durations scaled down as in tests/prom/test_alerts_live.py (also the ``3 * 3600`` of
ReferenceRunsStale's expression: :func:`support.live_prometheus.scale_durations`).

- A daemon restarted onto a server whose reference runs all fail: the last run of its previous
  life, read back from runs.jsonl, is exported from the first scrape, marked restored; the failing
  runs leave it where it is, so ReferenceRunsStale goes pending once that run is 3 hours (scaled)
  old, fires 10 minutes (scaled) later, and resolves when a run completes again.
- A GPU lost for longer than 10 minutes (scaled): GpuMissing is the one page; the gpu collector,
  which fails meanwhile, does not page (SentinelCollectorFailing's ``unless``), nor does any other
  alert; both are inactive once the GPU is back. The daemon runs the fake GPU backend, which loses
  the GPUs that its fault file names (``[collectors.gpu] fake_faults_file``).
"""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest

from prom.test_alerts_live import ALERTS, FACTOR, SCRAPE, AlertLog, _last_evaluation
from prom.test_alerts_live import alert_log as alert_log  # the fixture
from sglang_sentinel.atomic import atomic_write_bytes
from sglang_sentinel.schedule.history import RUNS_FILE
from support.live_prometheus import Box, Prometheus, free_port, requires_prometheus, scale_durations
from support.loopback import HTTP

pytestmark = [pytest.mark.slow, requires_prometheus]

# ReferenceRunsStale: `time() - sentinel_load_last_run_timestamp_seconds > 3 * 3600`, `for: 10m`.
STALE_AFTER = 3 * 3600 * FACTOR  # 45 s
STALE_FOR = 10 * 60 * FACTOR  # 2.5 s
# How long after its start the restarted daemon's last run turns 3 hours (scaled) old: long enough
# that an idle box scrapes it before (the alert is seen inactive first), and correct however late
# a busy box starts it (the schedule is the stored run's, not the daemon's).
LEAD = 15.0
# GpuMissing's `for: 5m` and SentinelCollectorFailing's `for: 10m`, scaled: 1.25 s and 2.5 s. The
# GPU stays lost until the collector has failed for 4 s of scrapes, 16 minutes of the shipped rules.
GPU_HELD = "4000ms"
GPU_ALERTS = (
    "GpuXidCritical",
    "GpuRowRemapFailure",
    "GpuRowRemapPending",
    "GpuTemperatureHigh",
    "GpuThermalSlowdown",
    "GpuPcieLinkDegraded",
    "GpuPcieReplays",
)


def _scaled_rules(tmp_path: Path) -> Path:
    rules = tmp_path / "alerts.fast.yml"
    rules.write_text(scale_durations(ALERTS.read_text(), FACTOR, min_range_ms=4000))
    return rules


def _epoch(rfc3339: str) -> float:
    # RFC 3339 with nanoseconds: fromisoformat takes at most microseconds.
    return datetime.fromisoformat(re.sub(r"(\.\d{6})\d*", r"\1", rfc3339).replace("Z", "+00:00")).timestamp()


def _samples(prom: Prometheus, selector: str) -> list[tuple[float, float]]:
    """Every raw sample of the one series ``selector`` names, oldest first (the last 10 minutes)."""
    result = prom.query(f"{selector}[10m]")
    assert len(result) == 1, (selector, result)
    return [(float(t), float(v)) for t, v in result[0]["values"]]


def _active_at(prom: Prometheus, name: str) -> float:
    """When the active alert ``name`` went pending: the evaluation that first found it true."""
    (alert,) = [a for a in prom.api("alerts")["alerts"] if a["labels"]["alertname"] == name]
    return _epoch(alert["activeAt"])


def _replace(path: Path, doc: dict[str, Any]) -> None:
    # Whole or not at all, as the fake GPU backend's fault file must be written.
    atomic_write_bytes(path, json.dumps(doc).encode())


@pytest.mark.slow(seconds=20)
def test_after_a_restart_with_only_failing_runs_the_stale_run_alert_fires_on_schedule(
    tmp_path: Path,
    box_factory: Callable[..., Box],
    prometheus_factory: Callable[..., Prometheus],
    alert_log: Callable[[Prometheus], AlertLog],
) -> None:
    rules = _scaled_rules(tmp_path)
    assert f"/ 3600 > {STALE_AFTER / 3600:g}  # threshold" in rules.read_text()  # scaled, not 3 hours
    control = f"http://127.0.0.1:{free_port()}"
    box = box_factory(
        "stale",
        {
            "server": {
                "profiles": {
                    # Every streamed request ends in an error chunk from the server's start: no
                    # reference run of this daemon life completes (the checks do not stream).
                    "fastsim": {
                        "extra_args": ["--control-port", control.rsplit(":", 1)[1], "--fault", "error_chunk"]
                    }
                },
            },
            "schedule": {
                "calibrate_when_missing": False,
                # Every request 16 tokens, so every one meets the error after its 2nd token (one of
                # 1 or 2 tokens would end first, and the run would complete).
                "profiles": {"reference": {"interval_seconds": 1, "range_ratio": 1.0}},
                # Sentinel's own checks count as foreign traffic: a run that meets two of them is
                # shrunk, and a shrunk run is no reference (it would not move the timestamp). On a
                # busy box runs are slow and meet them often; this test is about stale runs only.
                "polite": {"enabled": False},
            },
        },
    )
    # The previous daemon life's last reference run, as it wrote it (schedule/runrecord.py): the
    # figures and finish time that restore_figures reads back.
    finished = time.time() - STALE_AFTER + LEAD
    record = {
        "kind": "run",
        "profile": "reference",
        "outcome": "completed",
        "abort_reason": None,
        "reference": True,
        "started_at": finished - 2.0,
        "finished_at": finished,
        "summary": {
            "output_throughput": 512.5,
            "total_throughput": 1025.0,
            "concurrency_mean": 3.5,
            "concurrency_peak": 8,
            "client_bound": False,
        },
    }
    state = box.workdir / "state"
    state.mkdir()
    (state / RUNS_FILE).write_text(json.dumps(record) + "\n")
    daemon = box.start()
    prom = prometheus_factory({"box1": box.exporter}, interval=SCRAPE, rule_files=[rules])
    log = alert_log(prom)

    def tail() -> str:
        return daemon.tail() + "\n--- prometheus:\n" + prom.tail()

    prom.wait("sentinel scraped", lambda: bool(prom.query('up{instance="box1"} == 1')), 40)
    # Restored from the first scrape: the same scrape as the first `up` of 1 holds the stored
    # run's finish time, marked restored.
    first = next(t for t, v in _samples(prom, 'up{instance="box1"}') if v == 1)
    stamps = _samples(prom, 'sentinel_load_last_run_timestamp_seconds{profile="reference"}')
    assert stamps[0] == (first, finished), (first, stamps[:3], tail())
    restored = _samples(prom, 'sentinel_load_last_run_restored{profile="reference"}')
    assert restored[0] == (first, 1.0), (first, restored[:3], tail())

    # Runs of this life fail (ReferenceRunsFailing pages that, a cause of its own).
    prom.wait(
        "two failed reference runs, scraped",
        lambda: bool(
            prom.query('sum(sentinel_load_runs_total{profile="reference",outcome=~"failed|aborted"}) >= 2')
        ),
        60,
    )
    deadline = finished + STALE_AFTER + STALE_FOR + 60 - time.time()
    log.wait("ReferenceRunsStale", "firing", max(deadline, 30), tail)
    # On schedule: pending at the first evaluation after the stored run turned 3 hours (scaled)
    # old, never before; firing one `for` after that.
    active = _active_at(prom, "ReferenceRunsStale")
    assert active >= finished + STALE_AFTER, (active - finished, tail())
    fired = _samples(prom, 'ALERTS{alertname="ReferenceRunsStale",alertstate="firing"}')
    assert fired[0][0] >= active + STALE_FOR, (fired[0][0] - active, tail())
    # The failing runs did not move the timestamp: every sample so far is the stored run's.
    assert not prom.query('sum(sentinel_load_runs_total{profile="reference",outcome="completed"}) > 0')
    stamps = _samples(prom, 'sentinel_load_last_run_timestamp_seconds{profile="reference"}')
    assert {v for _, v in stamps} == {finished}, tail()
    restored = _samples(prom, 'sentinel_load_last_run_restored{profile="reference"}')
    assert {v for _, v in restored} == {1.0}, tail()

    # The server answers again: the next run completes, replaces the restored figures, resolves it.
    HTTP.delete(control + "/faults", timeout=10).raise_for_status()
    log.wait("ReferenceRunsStale", "inactive", 60, tail)
    prom.wait(
        "a completed run of this life, scraped",
        lambda: bool(
            prom.query(
                f'sentinel_load_last_run_timestamp_seconds{{profile="reference"}} > {finished!r}'
                " and on (profile) sentinel_load_last_run_restored == 0"
            )
        ),
        30,
    )
    assert log.went_through("ReferenceRunsStale", "pending", "firing", "inactive"), log.states
    assert log.states["ReferenceRunsStale"].count("firing") == 1, log.states
    print("\nalert states seen:", log.states)


def test_a_gpu_lost_past_ten_minutes_pages_once_and_resolves(
    tmp_path: Path,
    box_factory: Callable[..., Box],
    prometheus_factory: Callable[..., Prometheus],
    alert_log: Callable[[Prometheus], AlertLog],
) -> None:
    rules = _scaled_rules(tmp_path)
    faults = tmp_path / "gpu-faults.json"
    box = box_factory(
        "gpu",
        {
            "collectors": {"gpu": {"fake_faults_file": str(faults)}},
            # No synthetic load: nothing of this test comes from runs.
            "schedule": {
                "calibrate_when_missing": False,
                "profiles": {"reference": {"run_on_ready": False, "interval_seconds": 3600}},
            },
        },
    )
    daemon = box.start()
    prom = prometheus_factory({"box1": box.exporter}, interval=SCRAPE, rule_files=[rules])

    def tail() -> str:
        return daemon.tail() + "\n--- prometheus:\n" + prom.tail()

    prom.wait(
        "two GPUs read, the server ready, scraped",
        lambda: bool(
            prom.query(
                'sentinel_gpu_visible_devices == 2 and on () sentinel_collector_success{collector="gpu"} == 1'
                ' and on () sentinel_server_state{state="ready"} == 1'
            )
        ),
        40,
    )
    log = alert_log(prom)
    _replace(faults, {"lost": [1]})
    log.wait("GpuMissing", "firing", 30, tail)
    prom.wait(
        "the gpu collector failing for 4 s of scrapes (16 minutes of the shipped rules)",
        lambda: bool(
            prom.query(f'max_over_time(sentinel_collector_success{{collector="gpu"}}[{GPU_HELD}]) == 0')
        ),
        30,
    )
    held = time.time()
    prom.wait(
        "the collector and GPU rules evaluated after that",
        lambda: min(_last_evaluation(prom, g) for g in ("sentinel-collectors", "sentinel-gpu")) > held,
        10,
    )
    assert log.current.get("GpuMissing") == "firing", log.states
    # Past its `for`, the collector alert is silent: a missing GPU is GpuMissing's page.
    for other in ("SentinelCollectorFailing", *GPU_ALERTS):
        assert "firing" not in log.states.get(other, []), log.states
        assert log.current.get(other, "inactive") == "inactive", log.states

    _replace(faults, {"lost": []})
    log.wait("GpuMissing", "inactive", 30, tail)
    prom.wait(
        "both GPUs back, the collector succeeding, scraped",
        lambda: bool(
            prom.query(
                'sentinel_gpu_visible_devices == 2 and on () sentinel_collector_success{collector="gpu"} == 1'
            )
        ),
        30,
    )
    log.wait("SentinelCollectorFailing", "inactive", 30, tail)
    assert log.went_through("GpuMissing", "pending", "firing", "inactive"), log.states
    assert log.states["GpuMissing"].count("firing") == 1, log.states
    # One page: nothing else fired during the whole outage.
    assert {name for name, states in log.states.items() if "firing" in states} == {"GpuMissing"}, log.states
    print("\nalert states seen:", log.states)
