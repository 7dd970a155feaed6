"""Legitimate /metrics scrapes with basic auth, without and with a flood of bad passwords.

Before the limiter, 24 clients sending bad passwords let only 2 legitimate scrapes through in 12 s, because
every bad password paid a bcrypt check in the thread pool that renders /metrics. Usage:

    .venv/bin/python benchmarks/auth_flood.py [--seconds 12] [--flooders 24] [--cost 10]

Set-up: the exporter (this process) with a users file of one user hashed at bcrypt cost ``--cost``
(htpasswd -nBC 10 is the documented default) and 2 fake GPUs to render; a scraper process that
scrapes sequentially with the right password, 10 times a second (like a Prometheus with a short
interval, HTTP keep-alive); a flooder process with ``--flooders`` threads that each send bad
passwords back to back on their own connection. Both clients use http.client so that the client's
own cost is not what is measured. All on loopback. Prints one table row per phase: no flood; a
flood from the scraper's own address (its first login is a first-time one, as right after a
restart: it is locked out until the flood stops, which no limiter can tell apart; keep scrapers'
addresses their own); a flood from 24 other
loopback addresses (127.0.1.x) while every scrape logs in as a user not seen before (users of the
same password), without and with ``scraper_addresses``. A fresh exporter per phase.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import json
import os
import statistics
import subprocess
import sys
import tempfile
import textwrap
from collections import Counter
from pathlib import Path

import bcrypt

from sglang_sentinel.collect import CollectorSet
from sglang_sentinel.collect.gpu import FakeNvml, GpuCollector, GpuPoller
from sglang_sentinel.export import Exporter, ExporterSettings

PASSWORD = "prometheus-scrape-password"
FRESH_USERS = 1000

SCRAPER = textwrap.dedent(
    """
    import base64, http.client, json, sys, time
    port, header, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    fresh, password = sys.argv[4] == "fresh", sys.argv[5]
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        # fresh: every scrape another user of the same password (the users file has FRESH_USERS),
        # a credential the checker has not cached: each one a first-time login, as after a restart.
        user = "prometheus%d" % len(out)
        sent = "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode() if fresh else header
        try:
            conn.request("GET", "/metrics", headers={"Authorization": sent})
            r = conn.getresponse(); r.read(); status = r.status
        except Exception as exc:
            status = type(exc).__name__
            conn.close(); conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        out.append((time.perf_counter() - t0, status))
        time.sleep(0.1)
    print(json.dumps(out))
    """
)

FLOODER = textwrap.dedent(
    """
    import base64, http.client, json, sys, threading, time
    port, n, seconds = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
    spread = sys.argv[4] == "spread"
    counts, lock, end = {}, threading.Lock(), time.monotonic() + seconds
    def connect(k):
        # spread: each thread from its own loopback address (127.0.1.k...), a flood from many hosts.
        src = (f"127.0.{1 + k // 250}.{1 + k % 250}", 0) if spread else None
        return http.client.HTTPConnection("127.0.0.1", port, timeout=30, source_address=src)
    def run(k):
        conn, i = connect(k), 0
        while time.monotonic() < end:
            i += 1
            header = "Basic " + base64.b64encode(f"prometheus:guess-{k}-{i}".encode()).decode()
            try:
                conn.request("GET", "/metrics", headers={"Authorization": header})
                r = conn.getresponse(); r.read(); status = str(r.status)
            except Exception as exc:
                status = type(exc).__name__
                conn.close(); conn = connect(k)
            with lock:
                counts[status] = counts.get(status, 0) + 1
    threads = [threading.Thread(target=run, args=(k,)) for k in range(n)]
    for t in threads: t.start()
    for t in threads: t.join()
    print(json.dumps(counts))
    """
)


def _pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def _phase(
    port: int, seconds: float, flooders: int, *, spread: bool = False, fresh: bool = False
) -> dict[str, object]:
    header = "Basic " + base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
    py = sys.executable
    flood = None
    if flooders:
        flood = await asyncio.create_subprocess_exec(
            *(py, "-c", FLOODER, str(port), str(flooders), str(seconds)),
            "spread" if spread else "one",
            stdout=subprocess.PIPE,
        )
        await asyncio.sleep(0.5)  # the flood is under way before the first measured scrape
    scraper = await asyncio.create_subprocess_exec(
        py,
        "-c",
        SCRAPER,
        str(port),
        header,
        str(seconds - 0.5 if flooders else seconds),
        "fresh" if fresh else "same",
        PASSWORD,
        stdout=subprocess.PIPE,
    )
    out, _ = await scraper.communicate()
    samples = json.loads(out)
    counts: dict[str, int] = {}
    if flood is not None:
        fout, _ = await flood.communicate()
        counts = json.loads(fout)
    ok = [t for t, status in samples if status == 200]
    return {
        "flooders": flooders,
        "scrapes": len(samples),
        "ok": len(ok),
        "p50_ms": statistics.median(ok) * 1000 if ok else float("nan"),
        "p99_ms": _pct(ok, 0.99) * 1000,
        "max_ms": max(ok) * 1000 if ok else float("nan"),
        "flood": counts,
        "scraper": dict(Counter(str(status) for _, status in samples)),
    }


async def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seconds", type=float, default=12.0)
    parser.add_argument("--flooders", type=int, default=24)
    parser.add_argument("--cost", type=int, default=10)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        users = Path(tmp) / "users"
        hashed = bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(args.cost)).decode()
        # prometheus, and FRESH_USERS more users of the same password for first-time logins.
        users.write_text(
            f"prometheus:{hashed}\n" + "".join(f"prometheus{i}:{hashed}\n" for i in range(FRESH_USERS))
        )
        nvml = FakeNvml(2, "busy")
        poller = GpuPoller(lambda: nvml, interval=5.0, timeout=3.0, xid_events=False)
        poller.run_cycle()
        collectors = CollectorSet([("gpu", GpuCollector(poller))])
        # (label, flooders, flood from many addresses, first-time logins, scraper_addresses)
        phases = [
            ("no flood", 0, False, False, ()),
            ("flood, one address", args.flooders, False, False, ()),
            ("flood, many addresses, first-time logins", args.flooders, True, True, ()),
            ("many addresses, first-time, scraper_addresses", args.flooders, True, True, ("127.0.0.1",)),
        ]
        rows = []
        for label, n, spread, fresh, scrapers in phases:
            settings = ExporterSettings(port=0, basic_auth_users_file=users, scraper_addresses=scrapers)
            exporter = Exporter(collectors, settings)  # a fresh one per phase: nothing cached
            await exporter.start()
            try:
                row = await _phase(exporter.port or 0, args.seconds, n, spread=spread, fresh=fresh)
            finally:
                await exporter.stop()
            rows.append({"label": label, **row})
    print(f"bcrypt cost {args.cost}, {args.seconds:g} s per phase, {os.cpu_count()} CPUs")
    print(
        f"{'phase':<42} {'flooders':>8} {'scrapes':>7} {'ok':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}"
        "  flood answers"
    )
    for r in rows:
        print(
            f"{r['label']!s:<42} {r['flooders']:>8} {r['scrapes']:>7} {r['ok']:>5} {r['p50_ms']:>8.1f} "
            f"{r['p99_ms']:>8.1f} {r['max_ms']:>8.1f}  {json.dumps(r['flood'], sort_keys=True)}"
            f"  scraper {json.dumps(r['scraper'], sort_keys=True)}"
        )


if __name__ == "__main__":
    asyncio.run(main())
