"""A real Prometheus scrapes ``sentinel fleet`` with the relabelling of deploy/fleet/prometheus.yml.

The job is taken from that file as shipped; only the file_sd path, the fleet's address and the
interval are changed for loopback. Both Prometheus and the fleet read the same file_sd file.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from sglang_sentinel_sim.testing import SimProcess
from support.live_prometheus import PROMETHEUS, free_port, requires_prometheus

yaml = pytest.importorskip(
    "yaml", reason="PyYAML (tests/k8s/requirements.txt) reads deploy/fleet/prometheus.yml"
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy" / "fleet"

pytestmark = [pytest.mark.slow, requires_prometheus]


def _job(config: dict[str, Any], name: str) -> dict[str, Any]:
    return next(j for j in config["scrape_configs"] if j["job_name"] == name)


def _wait(what: str, check: Callable[[], bool], timeout: float, tail: Callable[[], str]) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, KeyError, ValueError):
            if check():
                return
        time.sleep(0.3)
    pytest.fail(f"{what}: not within {timeout:g} s\n{tail()}")


def test_prometheus_scrapes_probe_per_target_with_the_documented_relabelling(
    sim_factory: Callable[..., SimProcess], tmp_path: Path
) -> None:
    assert PROMETHEUS is not None
    sims = [sim_factory() for _ in range(2)]
    sd = tmp_path / "targets.json"
    sd.write_text(
        json.dumps(
            [{"targets": [f"127.0.0.1:{s.port}"], "labels": {"name": f"w{i}"}} for i, s in enumerate(sims)]
        )
    )
    fleet_port = free_port()
    cfg = tmp_path / "fleet.toml"
    cfg.write_text(
        f'[fleet]\ninterval = 1\nfile_sd = "{sd}"\n[fleet.canary]\nenabled = false\n'
        f"[exporter]\nport = {fleet_port}\n"
    )
    shipped = yaml.safe_load((DEPLOY / "prometheus.yml").read_text())
    probe = _job(shipped, "sentinel-fleet-probe")
    probe["file_sd_configs"] = [{"files": [str(sd)]}]
    address = next(r for r in probe["relabel_configs"] if r.get("target_label") == "__address__")
    address["replacement"] = f"127.0.0.1:{fleet_port}"
    own = _job(shipped, "sentinel-fleet")
    own["static_configs"] = [{"targets": [f"127.0.0.1:{fleet_port}"]}]
    prom_port = free_port()
    (tmp_path / "prometheus.yml").write_text(
        json.dumps(
            {"global": {"scrape_interval": "1s", "evaluation_interval": "1s"}, "scrape_configs": [probe, own]}
        )
    )
    log = (tmp_path / "out.log").open("wb")
    fleet = subprocess.Popen(
        [sys.executable, "-m", "sglang_sentinel", "fleet", "--config", str(cfg)],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    prom = subprocess.Popen(
        [
            PROMETHEUS,
            f"--config.file={tmp_path / 'prometheus.yml'}",
            f"--storage.tsdb.path={tmp_path / 'data'}",
            f"--web.listen-address=127.0.0.1:{prom_port}",
            "--log.level=warn",
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    client = httpx.Client(base_url=f"http://127.0.0.1:{prom_port}", timeout=10, trust_env=False)

    def query(expr: str) -> dict[str, float]:
        data = client.get("/api/v1/query", params={"query": expr}).json()["data"]["result"]
        return {r["metric"].get("instance", ""): float(r["value"][1]) for r in data}

    def tail() -> str:
        return (tmp_path / "out.log").read_text(errors="replace")[-3000:]

    try:
        _wait(
            "both targets' readiness in Prometheus",
            lambda: (
                query('sentinel_probe_success{job="sentinel-fleet-probe",probe="readiness"}')
                == {"w0": 1, "w1": 1}
            ),
            60,
            tail,
        )
        # The prober's own job is scraped on its own schedule: its first sample may land after the
        # probe job's, so it is waited for, not read once.
        _wait(
            "the prober's own /metrics in Prometheus",
            lambda: query('sentinel_fleet_targets{job="sentinel-fleet"}') == {f"127.0.0.1:{fleet_port}": 2},
            30,
            tail,
        )
    finally:
        client.close()
        for proc in (prom, fleet):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
        log.close()
