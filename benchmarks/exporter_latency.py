"""/metrics latency with 8 fake GPUs, the log collector, and a realistic SGLang payload fetched over HTTP.

Target: p99 ≤ 10 ms. Usage:

    .venv/bin/python benchmarks/exporter_latency.py [--requests 300]

Set-up, as in production: the exporter (aiohttp, this process) renders in its thread pool; the GPU
collector serves snapshots of 8 fake H200s (busy readings); SGLang's /metrics is a 114 KB TP=8
payload (``tests/collect/samples/sglang-0.5.9-tp8-synthetic.txt``, 747 samples) served by a
separate process on loopback and fetched at every scrape; the scraping client is another
process (sequential requests, like Prometheus). Prints one row per variant.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import textwrap
import time
from pathlib import Path

from sglang_sentinel.collect import CollectorSet, SGLangLogCollector, SGLangMetricsCollector
from sglang_sentinel.collect.gpu import FakeNvml, GpuCollector, GpuPoller
from sglang_sentinel.collect.render import render
from sglang_sentinel.collect.source import Source
from sglang_sentinel.export import Exporter, ExporterSettings

ROOT = Path(__file__).resolve().parents[1]
PAYLOAD = ROOT / "tests" / "collect" / "samples" / "sglang-0.5.9-tp8-synthetic.txt"
LOG = ROOT / "tests" / "collect" / "samples" / "sglang-mixed-log-pr22166.txt"

SERVER = textwrap.dedent(
    """
    import sys
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    body = open(sys.argv[1], "rb").read()
    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)
        def log_message(self, *a):
            pass
    s = ThreadingHTTPServer(("127.0.0.1", 0), H)
    print(s.server_address[1], flush=True)
    s.serve_forever()
    """
)

# http.client, not httpx: the client's own parsing must not be what is measured (Prometheus' Go
# client reads 180 KB in well under a millisecond; h11 in pure Python takes several here).
CLIENT = textwrap.dedent(
    """
    import json, sys, time, http.client, urllib.parse
    url, n, accept, enc = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    u = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port)
    headers = {"Accept": accept, "Accept-Encoding": enc}
    out = []
    for i in range(n + 20):
        t = time.perf_counter()
        conn.request("GET", u.path, headers=headers)
        r = conn.getresponse()
        body = r.read()
        dt = time.perf_counter() - t
        assert r.status == 200, r.status
        if i >= 20:  # warm-up: connection set-up, first-time code paths
            out.append(dt)
    print(json.dumps({"lat": out, "bytes": len(body)}))
    """
)


def quantile(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(q * len(values)))]


def build(sglang_url: str | None, gpus: int, nvml: bool = False) -> CollectorSet:
    sources: list[tuple[str, Source]] = []
    if sglang_url is not None:
        sources.append(("sglang", SGLangMetricsCollector(sglang_url, timeout=2.0)))
    log = SGLangLogCollector()
    for line in LOG.read_text().splitlines():
        log.feed(line)
    sources.append(("sglang_log", log))
    if nvml:
        import pynvml

        poller = GpuPoller(lambda: pynvml, interval=5.0, timeout=3.0)
        poller.run_cycle()
        sources.append(("gpu", GpuCollector(poller)))
    elif gpus:
        fake = FakeNvml(gpus, "busy")
        poller = GpuPoller(lambda: fake, interval=5.0, timeout=3.0, xid_events=False)
        poller.run_cycle()
        sources.append(("gpu", GpuCollector(poller)))  # started with the set, as in the daemon
    return CollectorSet(sources)


async def client(url: str, n: int, accept: str, encoding: str) -> tuple[list[float], int]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", CLIENT, url, str(n), accept, encoding, stdout=asyncio.subprocess.PIPE
    )
    out, _ = await proc.communicate()
    data = json.loads(out)
    return data["lat"], data["bytes"]


async def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--requests", type=int, default=300)
    ap.add_argument("--gpus", type=int, default=8)
    ap.add_argument("--nvml", action="store_true", help="add a row with the real GPUs through NVML")
    args = ap.parse_args()

    server = await asyncio.create_subprocess_exec(
        sys.executable, "-c", SERVER, str(PAYLOAD), stdout=asyncio.subprocess.PIPE
    )
    assert server.stdout is not None
    port = int((await server.stdout.readline()).decode())
    sglang_url = f"http://127.0.0.1:{port}/metrics"
    text = "text/plain;version=0.0.4"
    om = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    variants = [
        ("text, 8 GPUs + SGLang (114 KB) + log", sglang_url, args.gpus, text, "identity", False),
        ("OpenMetrics (Prometheus' default)", sglang_url, args.gpus, om, "identity", False),
        ("OpenMetrics + gzip", sglang_url, args.gpus, om, "gzip", False),
        ("text, without SGLang", None, args.gpus, text, "identity", False),
        ("text, SGLang only (no GPUs)", sglang_url, 0, text, "identity", False),
    ]
    if args.nvml:
        variants.append(("OpenMetrics + gzip, real GPUs + SGLang", sglang_url, 0, om, "gzip", True))
    rows = []
    try:
        for name, url, gpus, accept, encoding, nvml in variants:
            collectors = build(url, gpus, nvml)
            await collectors.start()
            # In-process render cost, no HTTP: what the thread pool spends per scrape.
            registry = collectors.registry()
            renders = []
            fmt = "openmetrics" if accept.startswith("application/openmetrics") else "text"
            for _ in range(100):
                t = time.perf_counter()
                render(registry, fmt)  # type: ignore[arg-type]
                renders.append(time.perf_counter() - t)
            exporter = Exporter(registry, ExporterSettings(port=0))
            await exporter.start()
            try:
                lat, size = await client(exporter.url + "/metrics", args.requests, accept, encoding)
            finally:
                await exporter.stop()
            await collectors.stop()
            rows.append((name, size, statistics.median(renders), lat))
        # The noise floor: the same server and client on a route that does no work.
        exporter = Exporter(build(None, 0).registry(), ExporterSettings(port=0))
        await exporter.start()
        try:
            lat, size = await client(exporter.url + "/healthz", args.requests, text, "identity")
        finally:
            await exporter.stop()
        rows.append(("/healthz (noise floor: HTTP + processes)", size, 0.0, lat))
    finally:
        server.terminate()
        await server.wait()

    print(
        f"/metrics latency, {args.requests} sequential scrapes per row (client in its own process); "
        f"{os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.2f}"
    )
    print(f"{'variant':40} {'bytes':>8} {'render p50':>11} {'p50':>7} {'p90':>7} {'p99':>7} {'max':>7}")
    for name, size, render_s, lat in rows:
        print(
            f"{name:40} {size:8d} {render_s * 1e3:9.2f}ms {quantile(lat, 0.5) * 1e3:5.2f}ms "
            f"{quantile(lat, 0.9) * 1e3:5.2f}ms {quantile(lat, 0.99) * 1e3:5.2f}ms {max(lat) * 1e3:5.2f}ms"
        )
    # Prometheus' default request: OpenMetrics, gzip (the third row); the first two without gzip.
    worst = max(quantile(lat, 0.99) for _, _, _, lat in rows[:3])
    print(
        f"target p99 <= 10 ms: {'met' if worst <= 0.010 else 'NOT met'} (worst of the first three rows: "
        f"{worst * 1e3:.2f} ms)"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(asyncio.run(main()))
