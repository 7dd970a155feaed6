"""Sentinel's own /metrics under a hostile server: latency percentiles and missing series.

    .venv/bin/python benchmarks/hostile_scrape.py [--seconds 300] [--switch 20]

A real ``sentinel run`` (external mode) watches the hostile loopback server of
tests/support/hostile_http.py, which cycles through headers that never end, a body that never
ends and a byte-at-a-time trickle every ``--switch`` seconds (every other cycle with /health
answering 200, so that the checks of a ready server run too). Two scrapers poll sentinel's
/metrics back to back, as an HA pair of Prometheus servers would. Prints the answers' p50, p99
and max against the scrape deadline, non-200 answers, and scrapes that lacked any sentinel_*
family of the first one. The test (tests/daemon/test_hostile_server.py) asserts the bound on a
shorter run; this prints the figures.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from daemon.test_hostile_server import MODES, SCRAPE_DEADLINE, Scrapers, families, hostile_config
from support.daemon_proc import DaemonProcess, free_port
from support.hostile_http import HostileServer


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    return s[min(len(s) - 1, round(q / 100 * (len(s) - 1)))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=300.0)
    ap.add_argument("--switch", type=float, default=20.0, help="seconds per hostile mode")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp, HostileServer(MODES[0]) as hostile:
        port = free_port()
        d = DaemonProcess(hostile_config(Path(tmp), hostile.port, port), port, Path(tmp) / "daemon.log")
        try:
            d.wait("exporter up", lambda: httpx.get(d.url + "/healthz", timeout=5).status_code in (200, 503))
            first = families(httpx.get(d.url + "/metrics", timeout=30).text)
            t0 = time.monotonic()
            step = 0
            with Scrapers(d.url + "/metrics") as scrapers:
                while time.monotonic() - t0 < args.seconds:
                    hostile.mode = MODES[step % len(MODES)]
                    hostile.fine = frozenset({"/health"}) if (step // len(MODES)) % 2 else frozenset()
                    step += 1
                    time.sleep(min(args.switch, max(0.0, args.seconds - (time.monotonic() - t0))))
            alive = d.proc.poll() is None
        finally:
            d.kill()
    times = [took for _, took, _ in scrapers.results]
    bad = [status for status, _, _ in scrapers.results if status != 200]
    missing = sum(1 for status, _, got in scrapers.results if status == 200 and not first <= got)
    print(f"hostile server, {args.seconds:g} s, modes {', '.join(MODES)} every {args.switch:g} s")
    print(f"  server reads made by sentinel: {sum(hostile.hits.values())} over {sorted(hostile.hits)}")
    print(f"  scrapes: {len(times)}  non-200: {len(bad)}  transport errors: {len(scrapers.errors)}")
    if times:
        print(
            f"  sentinel /metrics latency: p50 {statistics.median(times) * 1000:.0f} ms  "
            f"p99 {_pct(times, 99) * 1000:.0f} ms  max {max(times) * 1000:.0f} ms  "
            f"(scrape deadline {SCRAPE_DEADLINE:g} s)"
        )
    print(f"  scrapes missing a sentinel_* family of the first ({len(first)} families): {missing}")
    print(f"  daemon alive at the end: {alive}")


if __name__ == "__main__":
    main()
