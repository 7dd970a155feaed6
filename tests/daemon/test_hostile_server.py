"""A hostile server cannot blind sentinel: its own /metrics answers within the scrape deadline.

The real daemon (``sentinel run``, external mode) watches a loopback server that answers every
route with headers that never end, a body that never end, or a byte-at-a-time trickle; then the
same with ``/health`` answering 200, so that the daemon goes on to the reads it makes of a ready
server (the stall check's /metrics and /v1/loads, canaries, polite injection, server_info).
Throughout, two scrapers poll sentinel's /metrics at once: every answer is a 200 within the
deadline and carries every sentinel_* family of the first answer. The 5-minute figure is
benchmarks/hostile_scrape.py's.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.daemon_proc import DaemonProcess, free_port
from support.hostile_http import HostileServer
from support.loopback import HTTP

pytestmark = pytest.mark.slow

COLLECT_TIMEOUT = 1.0  # [collectors.sglang] timeout_seconds
SCRAPE_DEADLINE = 4.0  # [exporter] scrape_timeout_seconds
MODES = ("endless_headers", "endless_body", "trickle")


def hostile_config(tmp_path: Path, server_port: int, exporter_port: int) -> Path:
    cfg = tmp_path / "sentinel.toml"
    cfg.write_text(
        f"""
state_dir = "{tmp_path / "state"}"

[log]
format = "json"

[server]
mode = "external"
port = {server_port}
startup_poll_interval = 0.2

[server.checks.health]
interval = 0.5
timeout = 1.0

[server.checks.health_generate]
interval = 1.0
timeout = 1.0

[server.checks.stall]
interval = 0.5
timeout = 1.0

[server.checks.canary]
interval = 1.0
timeout = 1.0

[collectors.sglang]
timeout_seconds = {COLLECT_TIMEOUT}

[exporter]
port = {exporter_port}
scrape_timeout_seconds = {SCRAPE_DEADLINE}

[schedule]
calibrate_when_missing = false
recalibrate_cron = ""
"""
    )
    return cfg


def families(text: str) -> set[str]:
    return {f.name for f in text_string_to_metric_families(text) if f.name.startswith("sentinel_")}


class Scrapers:
    """``n`` threads scraping ``url`` back to back; every answer's status, time and families."""

    def __init__(self, url: str, n: int = 2) -> None:
        self.url = url
        self.results: list[tuple[int, float, set[str]]] = []
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(n)]

    def _run(self) -> None:
        # The client's own timeout is far past the deadline: a late answer is measured, not lost.
        with httpx.Client(timeout=SCRAPE_DEADLINE * 5) as client:
            while not self._stop.is_set():
                t0 = time.monotonic()
                try:
                    r = client.get(self.url)
                except httpx.HTTPError as exc:
                    self.errors.append(f"{type(exc).__name__}: {exc}")
                    continue
                took = time.monotonic() - t0
                got = families(r.text) if r.status_code == 200 else set()
                self.results.append((r.status_code, took, got))

    def __enter__(self) -> Scrapers:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(SCRAPE_DEADLINE * 6)


@pytest.fixture
def hostile() -> Iterator[HostileServer]:
    with HostileServer("endless_headers") as server:
        yield server


@pytest.mark.slow(seconds=50)
def test_sentinel_metrics_answer_within_the_deadline_under_a_hostile_server(
    tmp_path: Path, hostile: HostileServer, daemons: list[DaemonProcess]
) -> None:
    port = free_port()
    d = DaemonProcess(hostile_config(tmp_path, hostile.port, port), port, tmp_path / "daemon.log")
    daemons.append(d)
    d.wait("exporter up", lambda: HTTP.get(d.url + "/healthz", timeout=5).status_code in (200, 503))
    first = families(HTTP.get(d.url + "/metrics", timeout=SCRAPE_DEADLINE * 5).text)
    assert {"sentinel_build_info", "sentinel_collector_success", "sentinel_server_up"} <= first, first
    with Scrapers(d.url + "/metrics") as scrapers:
        for fine in (frozenset(), frozenset({"/health"})):
            hostile.fine = fine
            for mode in MODES:
                hostile.mode = mode
                seen = sum(hostile.hits.values())
                # Each mode until the daemon has made several more reads of it, and scrapes went on.
                answered = len(scrapers.results)

                def moved_on(s: int = seen, a: int = answered) -> bool:
                    return sum(hostile.hits.values()) >= s + 8 and len(scrapers.results) >= a + 4

                d.wait(f"{mode} reads (fine={sorted(fine)})", moved_on, timeout=120)
        # With /health fine the daemon went on to the checks of a ready server.
        d.wait("the ready checks' routes", lambda: "/metrics" in hostile.hits and len(hostile.hits) >= 3)
    assert not scrapers.errors, scrapers.errors[:5]
    assert len(scrapers.results) >= 24
    for status, took, got in scrapers.results:
        assert status == 200, (status, took)
        # The deadline plus slack for a busy 2-core box; what matters is that no scrape waits on
        # the server (an unbounded read waits for ever, the test's client 20 s).
        assert took < SCRAPE_DEADLINE + 2.0, took
        assert first <= got, first - got
    assert d.proc.poll() is None
