"""A real ``sentinel run`` on the simulator in every SGLang version and launch variant.

tests/sim/test_simulator_versions_e2e.py checks the daemon's *readers* against each variant; this
module checks the daemon as a whole: its ``/metrics``, ``sentinel status --json`` and (for the
variants whose ``sglang:*`` series a naive query would double or multiply by 8) a real
Prometheus evaluating the overview dashboard's "Running and queued requests" panel.

Per variant one daemon supervises the simulator as its child (a ``kind = "sim"`` launch profile
with the variant's flags). The test holds ``SUBMITTED`` never-ending streams open against a
``--max-running-requests`` of ``RUNNING_CAP``: the simulator's control API (``GET /state``) is the
ground truth, ``RUNNING_CAP`` running and the rest queued, and it does not move while held (the
daemon's own probes that would enter the scheduler, health_generate and the canary, are off; its
reference runs are skipped as polite, because the held streams are foreign traffic). Then:

- ``sentinel_sglang_version_known == 1`` and ``sentinel_sglang_version_info{reported=V}``;
- the stall probe's detail names its live source: ``loads_aggregate`` (0.5.9's ``/v1/loads``
  aggregate) or ``loads_ranks`` (0.5.23 has none: summed over ranks);
- ``Decode batch`` lines are parsed (``sentinel_sglang_log_batch_lines_total{kind="decode"}``
  rises while the load runs) and no line of any kind is unparsed (hisparse's Decode line included);
- the parsed Decode line's running/queued are the truth;
- the polite check's figures (the ``load_skipped`` record in ``sentinel status --json`` and
  ``sentinel_load_foreign_requests``) are the true running + queued: not doubled by priority's
  ``priority=""`` total beside the per-priority series, not ×8 by every rank's copy.

Crash texts: one per version, the restart reason on ``/metrics`` and in the status document is
the classification of tests/sim/test_simulator_versions_e2e.py.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.daemon_proc import DaemonProcess, free_port
from support.dashboard_vars import at_all
from support.live_prometheus import PROMETHEUS, Box, Prometheus
from support.loopback import HTTP

pytestmark = pytest.mark.slow

RUNNING_CAP = 4
SUBMITTED = 7  # 4 running, 3 queued
SPEED = 20
WARMUP_S = 10.0  # the held load must be steady before it ends: 4 s was short on a box with busy loops
OVERVIEW = Path(__file__).resolve().parents[2] / "grafana" / "dashboards" / "sentinel-overview.json"


@dataclass(frozen=True)
class Variant:
    name: str
    version: str
    flags: tuple[str, ...] = ()
    # Request priorities cycled over the held streams (None: no priority field).
    priorities: tuple[int | None, ...] = (None,)
    # The polite reader's source: "metrics" is where priority doubles and all-schedulers multiplies.
    polite_source: str = "metrics"
    prometheus: bool = False


VARIANTS = [
    Variant("0.5.9", "0.5.9", polite_source="auto"),
    Variant("0.5.23", "0.5.23", polite_source="auto"),
    Variant("0.5.23-priority", "0.5.23", ("--enable-priority-scheduling",), (0, 1, 2), prometheus=True),
    Variant(
        "0.5.23-all-schedulers-tp8",
        "0.5.23",
        ("--enable-metrics-for-all-schedulers", "--tp-size", "8"),
        prometheus=True,
    ),
    Variant("0.5.23-hisparse", "0.5.23", ("--enable-hisparse",)),
]


def _box(workdir: Path, sim_args: list[str], *, faults: tuple[str, ...] = (), polite: str = "metrics") -> Box:
    profile: dict[str, Any] = {"kind": "sim", "sim_speed": SPEED, "extra_args": sim_args}
    if faults:
        profile["sim_faults"] = list(faults)
    return Box(
        workdir,
        {
            "server": {
                "profile": "variant",
                "profiles": {"variant": profile},
                # Both put a request into the scheduler: the held load would not be the truth.
                "checks": {"health_generate": {"enabled": False}, "canary": {"enabled": False}},
                "restart": {"backoff_initial": 0.2, "jitter": 0},
            },
            "schedule": {
                "calibrate_when_missing": False,
                # No reference run before the test's load is held (its requests would queue behind
                # the never-ending streams and stay): by then every firing is a polite skip.
                "warmup_seconds": WARMUP_S,
                # Every second a reference run is considered; with the streams held it is skipped
                # as polite, and the skip records the figures it read.
                "polite": {
                    "source": polite,
                    "tolerance": 0,
                    "skip_above": 1,
                    "gauge_max_age_seconds": 0,
                    "check_interval_seconds": 0.2,
                },
                "profiles": {"reference": {"interval_seconds": 1, "run_on_ready": False}},
            },
        },
    )


def _metrics(daemon: DaemonProcess) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for family in text_string_to_metric_families(daemon.metrics_text()):
        for s in family.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def _value(samples: dict[str, list[tuple[dict[str, str], float]]], name: str, **labels: str) -> float:
    return sum(v for have, v in samples.get(name, []) if labels.items() <= have.items())


def _status(daemon: DaemonProcess) -> dict[str, Any]:
    """``sentinel status --json``: the operator's command, not only the exporter's route."""
    done = subprocess.run(
        [sys.executable, "-m", "sglang_sentinel", "status", "--json", "--url", daemon.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.stdout, f"sentinel status --json: exit {done.returncode}: {done.stderr}"
    doc: dict[str, Any] = json.loads(done.stdout)
    return doc


def _status_json(daemon: DaemonProcess) -> dict[str, Any]:
    doc: dict[str, Any] = HTTP.get(daemon.url + "/status.json", timeout=5).json()
    return doc


class _HeldLoad:
    """``count`` streams that never end (ignore_eos, a huge budget), held until :meth:`close`."""

    def __init__(self, base_url: str, count: int, priorities: tuple[int | None, ...]) -> None:
        self._stop = threading.Event()
        self._clients: list[httpx.Client] = []
        self.errors: list[str] = []
        self._threads = [
            threading.Thread(
                target=self._hold, args=(base_url, i, priorities[i % len(priorities)]), daemon=True
            )
            for i in range(count)
        ]
        for t in self._threads:
            t.start()

    def _hold(self, base_url: str, i: int, priority: int | None) -> None:
        body: dict[str, Any] = {
            "text": f"held request {i}",
            "sampling_params": {"max_new_tokens": 150_000, "ignore_eos": True},
            "stream": True,
        }
        if priority is not None:
            body["priority"] = priority
        client = httpx.Client(base_url=base_url, timeout=httpx.Timeout(30, read=None))
        self._clients.append(client)
        try:
            with client.stream("POST", "/generate", json=body) as resp:
                if resp.status_code != 200:
                    self.errors.append(f"{i}: HTTP {resp.status_code}")
                    return
                for _ in resp.iter_bytes():
                    if self._stop.is_set():
                        return
        except httpx.HTTPError as exc:
            if not self._stop.is_set():
                self.errors.append(f"{i}: {type(exc).__name__}: {exc}")

    def close(self) -> None:
        self._stop.set()
        for client in list(self._clients):
            with contextlib.suppress(Exception):
                client.close()
        for t in self._threads:
            t.join(5)


@pytest.fixture
def boxes() -> Iterator[list[Box]]:
    made: list[Box] = []
    yield made
    for box in made:
        box.close()


def _wait_ready(daemon: DaemonProcess, timeout: float = 40) -> None:
    daemon.wait("server ready", lambda: _status_json(daemon)["server"]["state"] == "ready", timeout)


def _panel_exprs() -> list[str]:
    doc = json.loads(OVERVIEW.read_text())
    panels = [p for p in doc["panels"] if p.get("title") == "Running and queued requests"]
    assert len(panels) == 1, "the overview dashboard's running/queued panel"
    return [at_all(str(t["expr"])) for t in panels[0]["targets"]]


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
def test_daemon_reports_the_true_load(variant: Variant, tmp_path: Path, boxes: list[Box]) -> None:
    control_port = free_port()
    sim_args = [
        "--sglang-version",
        variant.version,
        *variant.flags,
        "--max-running-requests",
        str(RUNNING_CAP),
        "--decode-log-interval",
        "5",
        "--control-port",
        str(control_port),
    ]
    box = _box(tmp_path, sim_args, polite=variant.polite_source)
    boxes.append(box)
    daemon = box.start()
    prom = (
        Prometheus(tmp_path / "prom", {"sentinel": box.exporter}, interval="500ms")
        if variant.prometheus and PROMETHEUS is not None
        else None
    )
    try:
        _wait_ready(daemon)
        control = httpx.Client(base_url=f"http://127.0.0.1:{control_port}", timeout=5)

        def truth() -> tuple[int, int]:
            engine = control.get("/state").json()["engine"]
            return int(engine["running"]), int(engine["waiting"])

        decode_before = _value(_metrics(daemon), "sentinel_sglang_log_batch_lines_total", kind="decode")
        held = _HeldLoad(f"http://127.0.0.1:{box.server_port}", SUBMITTED, variant.priorities)
        steady = (RUNNING_CAP, SUBMITTED - RUNNING_CAP)
        try:
            daemon.wait("the held load to be steady", lambda: truth() == steady, 30)
            ready_at = float(_status_json(daemon)["server"]["ready_at"])
            assert time.time() < ready_at + WARMUP_S, (
                "the load was held only after the warm-up: a run may have started"
            )
            skipped_since = time.time()

            def polite_record(doc: dict[str, Any]) -> tuple[object, ...] | None:
                for rec in reversed(doc["schedule"]["recent"]):
                    if rec.get("reason") == "foreign_traffic" and rec["at"] > skipped_since + 0.5:
                        return tuple(
                            rec[k]
                            for k in ("server_running", "server_queued", "foreign", "own_in_flight", "source")
                        )
                return None

            def agree(what: str, read: Callable[[], object], expected: object, timeout: float = 20) -> None:
                # The daemon's /health is a 1-token generate (SGLang's /health runs health_generate):
                # while one is in flight it is one more queued request, in the truth and in every
                # figure sampled then. So a figure counts only when read between two readings of
                # the steady truth; a figure that is wrong (doubled, x8) never agrees.
                seen: list[object] = []

                def check() -> bool:
                    before = truth()
                    got = read()
                    seen.append(got)
                    return before == truth() == steady and got == expected

                try:
                    daemon.wait(what, check, timeout)
                except AssertionError as exc:
                    raise AssertionError(f"{what}: expected {expected!r}, last read {seen[-3:]!r}") from exc

            polite_source = "metrics" if variant.polite_source == "metrics" else "loads"
            polite_truth = (float(RUNNING_CAP), float(SUBMITTED - RUNNING_CAP), SUBMITTED, 0, polite_source)
            # The polite check's figures: the true running + queued, once (not doubled, not x8).
            agree("the polite check's figures", lambda: polite_record(_status_json(daemon)), polite_truth)

            def figures() -> tuple[float, ...]:
                samples = _metrics(daemon)
                return tuple(
                    _value(samples, name)
                    for name in (
                        "sentinel_load_foreign_requests",
                        "sentinel_sglang_log_running_requests",
                        "sentinel_sglang_log_queued_requests",
                    )
                )

            # The foreign gauge, and the last Decode line's running/queued, on /metrics.
            agree("/metrics figures", figures, (SUBMITTED, RUNNING_CAP, SUBMITTED - RUNNING_CAP))

            source = "loads_aggregate" if variant.version == "0.5.9" else "loads_ranks"

            def cli_view() -> tuple[object, ...]:
                doc = _status(daemon)
                stall = [p for p in doc["probes"] if p["name"] == "stall"]
                detail = stall[0]["detail"] if stall else ""
                return (
                    bool(stall) and stall[0]["success"],
                    f"running from {source}" in detail,
                    polite_record(doc),
                )

            # `sentinel status --json`: the stall probe passes and names its live source; the
            # polite figures are the truth there too.
            agree("sentinel status --json", cli_view, (True, True, polite_truth), timeout=30)

            if prom is not None:
                running_expr, queued_expr = _panel_exprs()

                def panel() -> tuple[float, float] | None:
                    r, q = prom.query(running_expr), prom.query(queued_expr)
                    if len(r) != 1 or len(q) != 1:
                        return None
                    return float(r[0]["value"][1]), float(q[0]["value"][1])

                # The overview dashboard's "Running and queued requests" panel in a real Prometheus.
                agree(
                    "the overview panel's running/queued",
                    panel,
                    (float(RUNNING_CAP), float(SUBMITTED - RUNNING_CAP)),
                )

            def decode_rose() -> bool:
                now = _value(_metrics(daemon), "sentinel_sglang_log_batch_lines_total", kind="decode")
                return now >= decode_before + 3

            daemon.wait("Decode batch lines parsed", decode_rose, 15)
            samples = _metrics(daemon)
            assert held.errors == []
        finally:
            held.close()
            control.close()

        # version
        assert _value(samples, "sentinel_sglang_version_known") == 1
        info = [labels for labels, v in samples["sentinel_sglang_version_info"] if v == 1]
        assert [labels["reported"] for labels in info] == [variant.version], info

        # log parsing: nothing unparsed in any variant (hisparse's Decode line included)
        unparsed = {
            tuple(sorted(labels.items())): v
            for labels, v in samples["sentinel_sglang_log_lines_unparsed_total"]
            if v != 0
        }
        assert unparsed == {}
        assert _value(samples, "sentinel_sglang_log_batch_lines_total", kind="decode") >= decode_before + 3
    finally:
        if prom is not None:
            prom.stop()


# ---- crash texts -------------------------------------------------------------------------------

CRASHES = [
    # (version, fault, restart reason, detail fragment) as classified in
    # tests/sim/test_simulator_versions_e2e.py::CRASHES
    ("0.5.9", "crash:text=tokenizer,after=20", "unknown", "tokenizer_exception"),
    ("0.5.23", "crash:text=nan,after=20", "nan_in_sampler", "nan_detected"),
]


@pytest.mark.parametrize(
    ("version", "fault", "reason", "detail"), CRASHES, ids=[f"{v}-{f}" for v, f, *_ in CRASHES]
)
def test_crash_text_is_the_restart_reason(
    version: str, fault: str, reason: str, detail: str, tmp_path: Path, boxes: list[Box]
) -> None:
    box = _box(tmp_path, ["--sglang-version", version], faults=(fault,))
    boxes.append(box)
    daemon = box.start()

    def crashed() -> bool:
        return _value(_metrics(daemon), "sentinel_server_crashes_total", reason=reason) >= 1

    daemon.wait(f"a crash counted as {reason}", crashed, 40)
    samples = _metrics(daemon)
    others = {
        labels["reason"]: v
        for labels, v in samples["sentinel_server_crashes_total"]
        if labels["reason"] != reason and v != 0
    }
    assert others == {}
    status = _status(daemon)
    last = status["server"]["last_crash"]
    assert last is not None
    assert last["reason"] == reason
    assert detail in last["detail"]
    # and it was restarted (the fault re-arms at every launch: a crash loop, counted each time)
    daemon.wait("a restart", lambda: _status_json(daemon)["server"]["restarts"] >= 1, 30)
