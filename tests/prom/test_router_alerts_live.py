"""The router alerts of deploy/alerts.yml against a real breaker outage: two simulators behind the
real smg router (PyPI ``smg``, tests/router/requirements.txt) with its default circuit breaker,
sentinel in front of the router, a real Prometheus evaluating the shipped rules with their
durations scaled down (as tests/prom/test_alerts_live.py). Both workers start answering 503 (their
/health stays fine): their breakers open, the router answers 503 no_available_workers itself.
SglangRouterNoRoutableWorker fires within its ``for``, stays firing until the workers recover, then
resolves; nothing else of the outage pages."""

from __future__ import annotations

import contextlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest

from prom.test_alerts_live import ALERTS, FACTOR, AlertLog
from prom.test_alerts_live import alert_log as alert_log  # the fixture
from router.test_smg_live import router_env, spawn, start_sims
from sglang_sentinel_sim.testing import SimProcess
from support.live_prometheus import Prometheus, free_port, requires_prometheus, scale_durations

pytestmark = [
    pytest.mark.slow,
    requires_prometheus,
    pytest.mark.skipif(
        importlib.util.find_spec("smg") is None, reason="smg missing (tests/router/requirements.txt)"
    ),
]

# Every 2 s: the router collector reads /workers and the metrics port of a router under client
# load within the scrape timeout on a busy 2-core box.
SCRAPE = "2s"
QUIET = (
    "SglangRouterGatewayErrors",
    "SglangRouterRetriesExhausted",
    "SglangCanaryFailing",
    "SglangGenerationFailing",
)


def _traffic(url: str, stop: threading.Event) -> None:
    # Clients keep sending: their requests open the breakers and meet the router's own 503s.
    body = {"model": "glm-5", "prompt": "hi", "max_tokens": 4}
    with httpx.Client(trust_env=False, timeout=10) as c:
        while not stop.is_set():
            with contextlib.suppress(httpx.HTTPError):
                c.post(url + "/v1/completions", json=body)
            stop.wait(0.2)


@pytest.mark.slow(seconds=25)
def test_a_breaker_outage_behind_the_router_pages_once_until_recovery(
    sim_factory: Callable[..., SimProcess],
    tmp_path: Path,
    prometheus_factory: Callable[..., Prometheus],
    alert_log: Callable[[Prometheus], AlertLog],
) -> None:
    sims = start_sims(sim_factory, *[("--enable-metrics",)] * 2)
    rport, rmetrics, exporter = free_port(), free_port(), free_port()
    router_url = f"http://127.0.0.1:{rport}"
    cmd = [
        sys.executable, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(rport),
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(rmetrics),
        "--health-check-interval-secs", "1", "--cb-timeout-duration-secs", "2", "--log-level", "warn",
        "--worker-urls", *(s.base_url for s in sims),
    ]  # fmt: skip
    config = tmp_path / "run.toml"
    config.write_text(
        f'state_dir = "{tmp_path / "state"}"\n'
        '[server]\nmode = "external"\nkind = "router"\nhost = "127.0.0.1"\n'
        f"port = {rport}\nstartup_poll_interval = 0.5\n"
        f'[server.router]\nmetrics_url = "http://127.0.0.1:{rmetrics}/metrics"\nexpected_workers = 2\n'
        "[server.checks.health]\ninterval = 1\n"
        "[server.checks.canary]\ninterval = 1\n"
        f'[exporter]\nport = {exporter}\n[collectors]\nenabled = ["router"]\n'
        "[schedule.profiles.reference]\ninterval_seconds = 3600\nrun_on_ready = false\n"
    )
    rules = tmp_path / "alerts.fast.yml"
    rules.write_text(scale_durations(ALERTS.read_text(), FACTOR, min_range_ms=4000))
    run_cmd = [sys.executable, "-m", "sglang_sentinel", "run", "--config", str(config)]
    with (
        spawn(cmd, tmp_path / "router.log", router_env()),
        spawn(run_cmd, tmp_path / "sentinel.log"),
    ):
        prom = prometheus_factory({"box1": f"127.0.0.1:{exporter}"}, interval=SCRAPE, rule_files=[rules])

        def tail() -> str:
            return (tmp_path / "sentinel.log").read_text()[-3000:] + "\n--- prometheus:\n" + prom.tail()

        prom.wait(
            "two routable workers, scraped",
            lambda: bool(prom.query('sentinel_router_workers{state="routable"} == 2')),
            90,
        )
        log = alert_log(prom)
        stop = threading.Event()
        client = threading.Thread(target=_traffic, args=(router_url, stop), daemon=True)
        client.start()
        try:
            for s in sims:
                s.control("/faults", "POST", {"name": "http_503", "params": {"rate": 1.0}})
            log.wait("SglangRouterNoRoutableWorker", "firing", 60, tail)
            # Held for 10 s (40 minutes of the shipped rules): firing all along.
            prom.wait(
                "the outage held",
                lambda: bool(
                    prom.query(
                        'count_over_time(ALERTS{alertname="SglangRouterNoRoutableWorker",'
                        'alertstate="firing"}[10s]) >= 5'
                    )
                ),
                60,
            )
            assert log.states["SglangRouterNoRoutableWorker"].count("firing") == 1, log.states
            for s in sims:
                s.control("/faults", "DELETE")
            log.wait("SglangRouterNoRoutableWorker", "inactive", 60, tail)
        finally:
            stop.set()
            client.join(10)
        assert log.went_through("SglangRouterNoRoutableWorker", "pending", "firing", "inactive"), log.states
        assert log.states["SglangRouterNoRoutableWorker"].count("firing") == 1, log.states
        for name in QUIET:
            assert "firing" not in log.states.get(name, []), log.states
        print("\nalert states seen:", log.states)
