"""Smoke set for an installed sglang-sentinel (a wheel in a fresh venv), run by that venv's python.

    <venv>/bin/python tests/release/smoke.py

Uses only the standard library and the package's own runtime dependencies, so it proves what the
venv holds: every module imports; ``sentinel run`` on the embedded default (the simulator as its
child) reaches a passed probe; a scrape with Prometheus' default Accept header gets OpenMetrics that
prometheus_client's OpenMetrics parser reads; ``sentinel bench`` completes a few requests against
the daemon's simulator. Exit 0 when all pass, 1 with the failing step and the daemon's log tail.
scripts/release-check runs it at the newest and at the lowest allowed dependency versions.
"""

from __future__ import annotations

import contextlib
import importlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

# What Prometheus sends when scrape_protocols is left at its default: 2.x (measured from Debian's
# 2.42 scraping a loopback listener) and 3.x (its OpenMetrics 1.0.0 first, with UTF-8 escaping).
ACCEPT_HEADERS = (
    "application/openmetrics-text;version=1.0.0,application/openmetrics-text;version=0.0.1;q=0.75,"
    "text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
    "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,"
    "application/openmetrics-text;version=0.0.1;escaping=allow-utf-8;q=0.4,"
    "text/plain;version=1.0.0;escaping=allow-utf-8;q=0.3,"
    "text/plain;version=0.0.4;escaping=allow-utf-8;q=0.2,*/*;q=0.1",
)
PACKAGES = ("sglang_sentinel", "sglang_sentinel_sim")
READY_TIMEOUT = 180.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def import_all() -> int:
    """Import every module of both packages; return how many there were."""
    count = 0
    for top in PACKAGES:
        root = Path(importlib.import_module(top).__file__ or "").parent
        for path in sorted(root.rglob("*.py")):
            name = ".".join(path.relative_to(root.parent).with_suffix("").parts).removesuffix(".__init__")
            if name.endswith("__main__"):  # runs the CLI when imported
                continue
            importlib.import_module(name)
            count += 1
    return count


def scrape(url: str, accept: str) -> tuple[str, str]:
    req = urllib.request.Request(url, headers={"Accept": accept})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers.get("Content-Type", ""), resp.read().decode()


def probe_passed(body: str) -> bool:
    from prometheus_client.openmetrics.parser import text_string_to_metric_families

    for family in text_string_to_metric_families(body):
        if family.name == "sentinel_probe_success":
            return any(s.value == 1 for s in family.samples)
    return False


def main() -> int:
    bindir = Path(sys.executable).parent
    modules = import_all()
    print(f"smoke: imported {modules} modules")
    metrics_port, server_port = free_port(), free_port()
    state = Path(tempfile.mkdtemp(prefix="sentinel-smoke-"))
    log = state / "daemon.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    env["SENTINEL_STATE_DIR"] = str(state / "state")
    listen = f"127.0.0.1:{metrics_port}"
    with log.open("wb") as out:
        daemon = subprocess.Popen(
            [bindir / "sentinel", "run", "--listen", listen, "--server-port", str(server_port)],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            start_new_session=True,
        )
    try:
        url = f"http://127.0.0.1:{metrics_port}/metrics"
        deadline = time.monotonic() + READY_TIMEOUT
        ready = False
        while not ready and time.monotonic() < deadline:
            if daemon.poll() is not None:
                tail = log.read_text()[-4000:]
                raise SystemExit(f"smoke: sentinel run exited {daemon.returncode}:\n{tail}")
            with contextlib.suppress(OSError, ValueError):
                ctype, body = scrape(url, ACCEPT_HEADERS[0])
                ready = ctype.startswith("application/openmetrics-text") and probe_passed(body)
            if not ready:
                time.sleep(0.5)
        if not ready:
            raise SystemExit(f"smoke: no passed probe in {READY_TIMEOUT:.0f} s:\n{log.read_text()[-4000:]}")
        print("smoke: sentinel run reached a passed probe")
        for accept in ACCEPT_HEADERS:
            ctype, body = scrape(url, accept)
            if not ctype.startswith("application/openmetrics-text") or not body.endswith("# EOF\n"):
                raise SystemExit(f"smoke: Accept {accept!r} got {ctype!r}")
            probe_passed(body)  # the parser reads all of it
        print("smoke: OpenMetrics scrape with Prometheus' default Accept headers")
        result = state / "bench.json"
        bench = subprocess.run(
            [bindir / "sentinel", "bench", "--backend", "sglang", "--port", str(server_port),
             "--num-prompts", "4", "--random-input-len", "32", "--random-output-len", "8",
             "--output-file", str(result)],
            capture_output=True, text=True, timeout=300, env=env, check=False,
        )  # fmt: skip
        if bench.returncode != 0:
            text = bench.stdout + bench.stderr
            raise SystemExit(f"smoke: sentinel bench exited {bench.returncode}:\n{text}")
        completed = json.loads(result.read_text().splitlines()[-1])["completed"]
        if completed != 4:
            raise SystemExit(f"smoke: sentinel bench completed {completed} of 4 requests")
        print("smoke: sentinel bench completed 4 requests")
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(daemon.pid, signal.SIGTERM)
        try:
            daemon.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(daemon.pid, signal.SIGKILL)
            daemon.wait()
    shutil.rmtree(state, ignore_errors=True)  # kept only when the smoke failed: its log tells why
    return 0


if __name__ == "__main__":
    sys.exit(main())
