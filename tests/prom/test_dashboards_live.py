"""Every dashboard panel, evaluated by a real Prometheus scraping a real daemon on the simulator.

A sentinel daemon runs the simulator as its child (fast launch profile), calibrates (tiny sweep)
and runs reference loads; Prometheus scrapes it every second. Each panel's queries are then run
as Grafana runs them: template variables resolved through their own queries, ``$__rate_interval``
and ``$__range`` computed the way Grafana does, over the time the daemon ran.
"""

from __future__ import annotations

import json
import math
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from support.daemon_proc import DaemonProcess
from support.live_prometheus import Box, Prometheus, has_data, requires_prometheus

pytestmark = [pytest.mark.slow, requires_prometheus]

DASHBOARDS = Path(__file__).resolve().parents[2] / "grafana" / "dashboards"
SCRAPE_S = 1.0


class Live:
    def __init__(self, box: Box, daemon: DaemonProcess, prom: Prometheus, started: float) -> None:
        self.box, self.daemon, self.prom, self.started = box, daemon, prom, started


@pytest.fixture(scope="module")
def live(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Live]:
    workdir = tmp_path_factory.mktemp("live")
    # The initial calibration is queued once, 5 s after the first reference run, and skipped for
    # good if a run holds the load slot then: runs 10 s apart leave it free.
    box = Box(workdir, {"schedule": {"profiles": {"reference": {"interval_seconds": 10}}}})
    started = time.time()
    daemon = box.start()
    prom = None
    try:
        prom = Prometheus(workdir / "prometheus", {"box1": box.exporter}, interval=f"{SCRAPE_S:g}s")

        def ready() -> bool:
            # A run Prometheus saw happen: rates need the counters to move between two scrapes
            # (the run at ready may finish before the first one).
            ran = prom.query('increase(sentinel_load_runs_total{outcome="completed"}[5m]) > 0')
            capacity = prom.query("sentinel_capacity_knee_concurrency")
            return bool(ran and capacity)

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
        m = re.fullmatch(r"label_values\((\w+), (\w+)\)", var["definition"])
        assert m, var["definition"]
        found = prom.label_values(m.group(2), m.group(1))
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

    out = re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)
    assert "$" not in out, out
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
    # The fake GPU backend replays a real H200's readings: GPU panels have data as well.
    assert not without, without
    assert len(with_data) >= 40


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
