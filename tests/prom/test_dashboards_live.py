"""Every dashboard panel, evaluated by a real Prometheus scraping a real daemon on the simulator.

A sentinel daemon runs the simulator as its child (fast launch profile), calibrates (tiny sweep)
and runs reference loads; Prometheus scrapes it every second, with the ``namespace``/``pod`` labels
the Operator's PodMonitor gives it, and a dcgm-exporter exposition (tests/support/samples) twice:
as dcgm-exporter's ServiceMonitor with ``honorLabels: true`` (the GPU's pod as ``pod``) and with
its chart's default ``false`` (as ``exported_pod``, the exporter's own pod as ``pod``). Each
panel's queries are then run as Grafana runs them: template variables resolved through their own
queries, ``$__rate_interval`` and ``$__range`` computed the way Grafana does, over the time the
daemon ran.
"""

from __future__ import annotations

import json
import math
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.daemon_proc import DaemonProcess
from support.live_prometheus import Box, Prometheus, has_data, requires_prometheus

# One worker for the module: `live` (a daemon, reference runs, a calibration and Prometheus, about
# 25 s and 7 CPU-s to set up) is module-scoped, and each worker that ran one of these tests set up
# its own.
pytestmark = [pytest.mark.slow, requires_prometheus, pytest.mark.xdist_group("dashboards_live")]

DASHBOARDS = Path(__file__).resolve().parents[2] / "grafana" / "dashboards"
DCGM_SAMPLE = Path(__file__).resolve().parents[1] / "support" / "samples" / "dcgm-exporter-h200.txt"
SCRAPE_S = 1.0
# The sentinel sidecar's pod as the PodMonitor labels it: the pod dcgm-exporter's sample maps
# GPUs 0 and 1 to (GPU 2 belongs to another pod, GPU 3 to none).
SGLANG_POD = {"namespace": "llm", "pod": "sentinel-sglang-sentinel-6c9f7d8b5-x2k4q"}


DCGM_OWN_POD = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-7xk2p"}


class Exposition:
    """Serves a fixed exposition text on 127.0.0.1 (a dcgm-exporter stand-in)."""

    def __init__(self, text: str) -> None:
        body = text.encode()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/plain; version=0.0.4")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.address = f"127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _dcgm_jobs(address: str) -> list[dict[str, Any]]:
    interval = f"{SCRAPE_S:g}s"
    return [
        {
            "job_name": "dcgm-exporter",
            "honor_labels": True,
            "scrape_interval": interval,
            "scrape_timeout": interval,
            "static_configs": [{"targets": [address]}],
        },
        {
            "job_name": "dcgm-exporter-plain",
            "honor_labels": False,
            "scrape_interval": interval,
            "scrape_timeout": interval,
            # What the Operator sets for dcgm-exporter's own pod.
            "static_configs": [
                {
                    "targets": [address],
                    "labels": {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-7xk2p"},
                }
            ],
        },
    ]


class Live:
    def __init__(self, box: Box, daemon: DaemonProcess, prom: Prometheus, started: float) -> None:
        self.box, self.daemon, self.prom, self.started = box, daemon, prom, started


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir = tmp_path_factory.mktemp("live")
    # The initial calibration is queued once, 5 s after the first reference run, and skipped for
    # good if a run holds the load slot then: runs 10 s apart leave it free.
    # [cost] and a short idle-baseline gap: the energy row's cost and marginal panels have data.
    box = Box(
        workdir,
        {
            "schedule": {"profiles": {"reference": {"interval_seconds": 10}}},
            "energy": {"baseline_min_gap_seconds": 2},
            "cost": {"price_per_kwh": 0.25, "currency": "EUR"},
        },
    )
    started = time.time()
    daemon = box.start()
    prom = None
    dcgm = Exposition(DCGM_SAMPLE.read_text(encoding="utf-8"))
    try:
        prom = Prometheus(
            workdir / "prometheus",
            {"box1": box.exporter},
            interval=f"{SCRAPE_S:g}s",
            target_labels=SGLANG_POD,
            extra_scrape_configs=_dcgm_jobs(dcgm.address),
        )

        def ready() -> bool:
            # A run Prometheus saw happen: rates need the counters to move between two scrapes
            # (the run at ready may finish before the first one).
            ran = prom.query('increase(sentinel_load_runs_total{outcome="completed"}[5m]) > 0')
            # The latency panels' rates need a reference run's histograms to move between scrapes,
            # and the marginal-energy panel an idle baseline measured between two runs.
            observed = prom.query("increase(sentinel_request_ttft_seconds_count[5m]) > 0")
            marginal = prom.query("sentinel_load_marginal_energy_joules_per_output_token")
            capacity = prom.query("sentinel_capacity_knee_concurrency")
            return bool(ran and observed and marginal and capacity)

        try:
            daemon.wait("a calibration and a completed reference run, scraped", ready, 120)
        except AssertionError as exc:
            raise AssertionError(f"{exc}\n--- prometheus:\n{prom.tail()}") from None
        # A few more scrapes after both, so that rates over the last seconds have two samples.
        time.sleep(5 * SCRAPE_S)
        yield Live(box, daemon, prom, started)
    finally:
        if prom is not None:
            prom.stop()
        dcgm.close()
        box.close()


def _variables(dashboard: dict[str, Any], prom: Prometheus, range_s: float) -> dict[str, str]:
    """Template variables as Grafana substitutes them (multi-value: a regex alternation)."""
    # Grafana: $__interval = range / max data points (at least the datasource's scrape interval),
    # $__rate_interval = max($__interval + scrape interval, 4 * scrape interval).
    interval = max(SCRAPE_S, range_s / 1000)
    values = {
        "__interval": f"{math.ceil(interval)}s",
        "__rate_interval": f"{math.ceil(max(interval + SCRAPE_S, 4 * SCRAPE_S))}s",
        "__range": f"{math.ceil(range_s)}s",
    }
    for var in dashboard["templating"]["list"]:
        if var["type"] == "datasource":
            continue
        if var["type"] == "interval":
            values[var["name"]] = var["current"]["value"]
            continue
        assert var["type"] == "query", var
        m = re.fullmatch(r"label_values\((.+), (\w+)\)", var["definition"])
        assert m, var["definition"]
        # A variable's query may use the variables before it (chained, as Grafana resolves them).
        found = prom.label_values(m.group(2), _substitute(m.group(1), values))
        if not found and var.get("hide") == 2:
            # An opt-in variable whose label nobody sets (cluster on a single Prometheus): All.
            values[var["name"]] = var["allValue"]
            continue
        assert found, f"variable {var['name']}: {var['definition']} has no values"
        # A regex inside a PromQL string: its backslashes doubled, as Grafana escapes them.
        escaped = (re.escape(v).replace("\\", "\\\\") for v in found)
        values[var["name"]] = "(" + "|".join(escaped) + ")"
    return values


def _substitute(expr: str, values: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        assert name in values, f"unknown variable ${name} in {expr}"
        return values[name]

    # $1 in label_replace is a regex group, not a variable (Grafana leaves unknown names alone).
    out = re.sub(r"\$\{([A-Za-z_]\w*)\}|\$([A-Za-z_]\w*)", one, expr)
    assert not re.search(r"\$[A-Za-z_{]", out), out
    return out


def test_every_panel_query_returns_data(live: Live) -> None:
    end = time.time()
    with_data: list[str] = []
    without: list[str] = []
    for path in sorted(DASHBOARDS.glob("*.json")):
        dashboard = json.loads(path.read_text())
        values = _variables(dashboard, live.prom, end - live.started)
        for panel in dashboard["panels"]:
            if panel["type"] == "row":
                continue
            for target in panel["targets"]:
                expr = _substitute(target["expr"], values)
                result = live.prom.query_range(expr, live.started, end, step=SCRAPE_S)
                where = f"{path.stem}: {panel['title']} [{target['refId']}]"
                (with_data if has_data(result) else without).append(where)
        # Annotations run too (a server start is one only after a restart: no data asserted).
        for annotation in dashboard["annotations"]["list"]:
            live.prom.query_range(_substitute(annotation["expr"], values), live.started, end, step=60)
    print("\npanels with data:\n  " + "\n  ".join(with_data))
    if without:
        print("panels WITHOUT data:\n  " + "\n  ".join(without))
    # The fake GPU backend replays a real H200's readings: GPU panels have data as well, and the
    # dcgm-exporter sample feeds the sentinel-dcgm dashboard through its pod join.
    assert not without, without
    assert len(with_data) >= 50
    assert any(w.startswith("sentinel-dcgm:") for w in with_data)


def test_the_dcgm_dashboard_joins_the_sglang_pods_gpus(live: Live) -> None:
    """Only the GPUs dcgm-exporter maps to the watched pod, with sentinel's instance label, read
    whether dcgm-exporter's pod labels were honoured or renamed to exported_*."""
    dashboard = json.loads((DASHBOARDS / "sentinel-dcgm.json").read_text())
    values = _variables(dashboard, live.prom, time.time() - live.started)
    (panel,) = [p for p in dashboard["panels"] if p["title"] == "Memory used"]
    expr = _substitute(panel["targets"][0]["expr"], values)

    def joined() -> list[dict[str, Any]]:
        result = live.prom.query(expr)
        jobs = {s["metric"]["job"] for s in result}
        return result if jobs == {"dcgm-exporter", "dcgm-exporter-plain"} else []

    live.prom.wait("both dcgm-exporter jobs scraped and joined", lambda: bool(joined()), 60)
    result = joined()
    got = sorted((s["metric"]["job"], s["metric"]["instance"], s["metric"]["gpu"]) for s in result)
    assert got == [
        ("dcgm-exporter", "box1", "0"),
        ("dcgm-exporter", "box1", "1"),
        ("dcgm-exporter-plain", "box1", "0"),
        ("dcgm-exporter-plain", "box1", "1"),
    ]
    # DCGM_FI_DEV_FB_USED is MiB: the panel shows bytes (GPU 0 of the sample: 130942 MiB).
    by_gpu = {s["metric"]["gpu"]: float(s["value"][1]) for s in result}
    assert by_gpu["0"] == 130942 * 1048576
    (count,) = [p for p in dashboard["panels"] if p["title"] == "GPUs per SGLang pod"]
    counted = live.prom.query(_substitute(count["targets"][0]["expr"], values))
    assert [(s["metric"]["instance"], float(s["value"][1])) for s in counted] == [("box1", 4.0)]


def test_every_own_family_has_help_text(live: Live) -> None:
    text = live.daemon.metrics_text()
    families = [f for f in text_string_to_metric_families(text) if f.name.startswith("sentinel_")]
    assert len(families) >= 60, [f.name for f in families]
    undocumented = [f.name for f in families if not f.documentation.strip()]
    assert not undocumented, undocumented
    # The exposition itself: one HELP line with text ahead of each TYPE line.
    typed = re.findall(r"^# TYPE (sentinel_\w+) ", text, re.MULTILINE)
    helped = set(re.findall(r"^# HELP (sentinel_\w+) \S", text, re.MULTILINE))
    assert typed
    assert set(typed) <= helped, sorted(set(typed) - helped)
