"""Dashboards and alerts read SGLang's true figures whatever its launch flags and version.

The expositions are real: SGLang 0.5.23's own metric code run with priority scheduling, with
``--enable-metrics-for-all-schedulers`` at TP 4, and with DP 2 x all schedulers x priority
(tests/sglang/fixtures/versions, see its README), and a 0.5.9 TP 8 payload (tests/collect/samples).
A naive ``sum`` over them counts requests twice (priority totals) or once per TP rank.
"""

from __future__ import annotations

import functools
import http.server
import json
import subprocess
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.sglang.series import server_total
from support.dashboard_vars import at_all
from support.live_prometheus import PROMTOOL, Prometheus, requires_prometheus

ROOT = Path(__file__).resolve().parents[2]
VERSIONS = ROOT / "tests" / "sglang" / "fixtures" / "versions"
EXPOSITIONS = {
    "v0.5.9-tp8": ROOT / "tests" / "collect" / "samples" / "sglang-0.5.9-tp8-synthetic.txt",
    "v0.5.23-priority": VERSIONS / "metrics_0.5.23_priority.txt",
    "v0.5.23-all-schedulers-tp4": VERSIONS / "metrics_0.5.23_all_schedulers_tp4.txt",
    "v0.5.23-dp2-priority-all": VERSIONS / "metrics_0.5.23_dp2_priority_all.txt",
}
# (running, queued) as SGLang's scheduler holds them (the fixtures' README and generator).
TRUTH = {
    "v0.5.9-tp8": (64.767, 7.499),
    "v0.5.23-priority": (6.0, 3.0),
    "v0.5.23-all-schedulers-tp4": (5.0, 2.0),
    "v0.5.23-dp2-priority-all": (7.0, 1.0),
}
ACTION_QUEUE = "The server is past its capacity (see sentinel_capacity_*); shed or route load."
(QUEUE_RULE,) = [
    rule
    for group in yaml.safe_load((ROOT / "deploy" / "alerts.yml").read_text())["groups"]
    for rule in group["rules"]
    if rule["alert"] == "SglangQueueBacklog"
]
OVERVIEW = ROOT / "grafana" / "dashboards" / "sentinel-overview.json"


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    return [
        (dict(s.labels), s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if s.name == name
    ]


def test_truth_is_what_sentinel_computes_and_not_the_naive_sum() -> None:
    for variant, path in EXPOSITIONS.items():
        text = path.read_text()
        for name, truth in zip(
            ("sglang:num_running_reqs", "sglang:num_queue_reqs"), TRUTH[variant], strict=True
        ):
            samples = _samples(text, name)
            assert server_total(samples) == pytest.approx(truth), (variant, name)
            if variant.startswith("v0.5.23"):
                assert sum(v for _, v in samples) >= 2 * truth, (variant, name)


def _panel_targets(title: str) -> list[dict[str, Any]]:
    panels = [p for p in json.loads(OVERVIEW.read_text())["panels"] if p.get("title") == title]
    assert len(panels) == 1, title
    targets: list[dict[str, Any]] = panels[0]["targets"]
    return targets


def _for_instance(expr: str, instance: str) -> str:
    """The query as Grafana sends it with one instance picked and the other variables at All."""
    return at_all(expr, instance=instance)


@pytest.fixture
def exposition_server() -> Iterator[str]:
    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(ROOT)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.1:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


@pytest.mark.slow
@requires_prometheus
def test_dashboard_queries_read_true_totals_on_every_variant(
    exposition_server: str, prometheus_factory: Callable[..., Prometheus]
) -> None:
    targets = {
        variant: f"{exposition_server}/{path.relative_to(ROOT)}" for variant, path in EXPOSITIONS.items()
    }
    prom = prometheus_factory(targets, interval="1s")
    prom.wait("every exposition scraped", lambda: len(prom.query("up == 1")) == len(targets), 30)
    running_queued = _panel_targets("Running and queued requests")
    assert [t["legendFormat"] for t in running_queued] == ["{{instance}} running", "{{instance}} queued"]
    text_059 = EXPOSITIONS["v0.5.9-tp8"].read_text()
    single: dict[str, float | None] = {
        # KV usage and generation throughput: one series per TP-0 scheduler in 0.5.9.
        "KV-cache usage": server_total(_samples(text_059, "sglang:token_usage"), "max"),
        "Generation throughput": server_total(_samples(text_059, "sglang:gen_throughput")),
    }
    read: dict[str, tuple[float, ...]] = {}
    for variant, truth in TRUTH.items():
        values = []
        for target in running_queued:
            result = prom.query(_for_instance(target["expr"], variant))
            assert len(result) == 1, (variant, target["expr"], result)
            assert result[0]["metric"] == {"instance": variant}
            values.append(float(result[0]["value"][1]))
        read[variant] = tuple(values)
        assert values == pytest.approx(truth), (variant, target["expr"])
    for title, expected in single.items():
        (target,) = _panel_targets(title)
        result = prom.query(_for_instance(target["expr"], "v0.5.9-tp8"))
        assert float(result[0]["value"][1]) == pytest.approx(expected), title
    print("\n(running, queued) read by the dashboard:", read)


def _promtool_series(text: str, name: str, instance: str, factor: float) -> list[dict[str, str]]:
    out = []
    for labels, value in _samples(text, name):
        labels = {"job": "sentinel", "instance": instance, **labels}
        selector = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
        out.append({"series": f"{name}{{{selector}}}", "values": f"{value * factor:g}x40"})
    return out


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing (Debian package prometheus)")
def test_queue_alert_fires_at_the_true_queue_of_every_variant(tmp_path: Path) -> None:
    # Each exposition twice, its queue gauges scaled: once to a true queue of 40 (fires, the
    # summary says 40), once to 20 (silent, although the naive sum of a 0.5.23 one is >= 40).
    series = []
    expected = []
    for variant, path in EXPOSITIONS.items():
        text = path.read_text()
        queued = TRUTH[variant][1]
        series += _promtool_series(text, "sglang:num_queue_reqs", f"{variant}-busy", 40 / queued)
        series += _promtool_series(text, "sglang:num_queue_reqs", f"{variant}-ok", 20 / queued)
        expected.append(
            {
                "exp_labels": {
                    "severity": "warning",
                    "component": "server",
                    "job": "sentinel",
                    "instance": f"{variant}-busy",
                },
                "exp_annotations": {
                    "summary": f"40 requests queued at SGLang on {variant}-busy (5-minute mean)",
                    "action": ACTION_QUEUE,
                    "description": QUEUE_RULE["annotations"]["description"].replace(
                        "{{ $labels.instance }}", f"{variant}-busy"
                    ),
                    "runbook_url": QUEUE_RULE["annotations"]["runbook_url"],
                },
            }
        )
    test = {
        "rule_files": [str(ROOT / "deploy" / "alerts.yml")],
        "evaluation_interval": "1m",
        "tests": [
            {
                "interval": "15s",
                "input_series": series,
                "alert_rule_test": [
                    {"eval_time": "4m", "alertname": "SglangQueueBacklog", "exp_alerts": []},
                    {"eval_time": "9m", "alertname": "SglangQueueBacklog", "exp_alerts": expected},
                ],
            }
        ],
    }
    (tmp_path / "variants.test.yml").write_text(json.dumps(test, indent=1))
    assert PROMTOOL is not None
    result = subprocess.run(
        [PROMTOOL, "test", "rules", "variants.test.yml"],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert result.returncode == 0, result.stdout + result.stderr
