"""Legitimate /metrics scrapes with basic auth, without and with a flood of bad passwords.

Issue 15: 24 clients sending bad passwords let only 2 legitimate scrapes through in 12 s, because
every bad password paid a bcrypt check in the thread pool that renders /metrics. Usage:

    .venv/bin/python benchmarks/auth_flood.py [--seconds 12] [--flooders 24] [--cost 10]

Set-up: the exporter (this process) with a users file of one user hashed at bcrypt cost ``--cost``
(htpasswd -nBC 10 is the documented default) and 2 fake GPUs to render; a scraper process that
scrapes sequentially with the right password, 10 times a second (like a Prometheus with a short
interval, HTTP keep-alive); a flooder process with ``--flooders`` threads that each send bad
passwords back to back on their own connection. Both clients use http.client so that the client's
own cost is not what is measured. All on loopback. Prints one table row per phase.
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
from pathlib import Path

import bcrypt

from sglang_sentinel.collect import CollectorSet
from sglang_sentinel.collect.gpu import FakeNvml, GpuCollector, GpuPoller
from sglang_sentinel.export import Exporter, ExporterSettings

PASSWORD = "prometheus-scrape-password"

SCRAPER = textwrap.dedent(
    """
    import http.client, json, sys, time
    port, header, seconds = int(sys.argv[1]), sys.argv[2], float(sys.argv[3])
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
    out, end = [], time.monotonic() + seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        try:
            conn.request("GET", "/metrics", headers={"Authorization": header})
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
    counts, lock, end = {}, threading.Lock(), time.monotonic() + seconds
    def run(k):
        conn, i = http.client.HTTPConnection("127.0.0.1", port, timeout=30), 0
        while time.monotonic() < end:
            i += 1
            header = "Basic " + base64.b64encode(f"prometheus:guess-{k}-{i}".encode()).decode()
            try:
                conn.request("GET", "/metrics", headers={"Authorization": header})
                r = conn.getresponse(); r.read(); status = str(r.status)
            except Exception as exc:
                status = type(exc).__name__
                conn.close(); conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
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


async def _phase(port: int, seconds: float, flooders: int) -> dict[str, object]:
    header = "Basic " + base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode()
    py = sys.executable
    flood = None
    if flooders:
        flood = await asyncio.create_subprocess_exec(
            py, "-c", FLOODER, str(port), str(flooders), str(seconds), stdout=subprocess.PIPE
        )
        await asyncio.sleep(0.5)  # the flood is under way before the first measured scrape
    scraper = await asyncio.create_subprocess_exec(
        py,
        "-c",
        SCRAPER,
        str(port),
        header,
        str(seconds - 0.5 if flooders else seconds),
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
        users.write_text(
            f"prometheus:{bcrypt.hashpw(PASSWORD.encode(), bcrypt.gensalt(args.cost)).decode()}\n"
        )
        nvml = FakeNvml(2, "busy")
        poller = GpuPoller(lambda: nvml, interval=5.0, timeout=3.0, xid_events=False)
        poller.run_cycle()
        collectors = CollectorSet([("gpu", GpuCollector(poller))])
        exporter = Exporter(collectors, ExporterSettings(port=0, basic_auth_users_file=users))
        await exporter.start()
        try:
            rows = [await _phase(exporter.port or 0, args.seconds, n) for n in (0, args.flooders)]
        finally:
            await exporter.stop()
    print(f"bcrypt cost {args.cost}, {args.seconds:g} s per phase, {os.cpu_count()} CPUs")
    print(
        f"{'flooders':>8} {'scrapes':>7} {'ok':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8}  flood answers"
    )
    for r in rows:
        print(
            f"{r['flooders']:>8} {r['scrapes']:>7} {r['ok']:>5} {r['p50_ms']:>8.1f} {r['p99_ms']:>8.1f} "
            f"{r['max_ms']:>8.1f}  {json.dumps(r['flood'], sort_keys=True)}"
        )


if __name__ == "__main__":
    asyncio.run(main())
