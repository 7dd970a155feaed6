"""grafana/: dashboards are what generate.py writes, structurally sound, parse as PromQL, and name
only metrics sentinel (or SGLang through it) really exposes. The alert rules get the same name check."""

from __future__ import annotations

import importlib.util
import json
import re
import shutil
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "grafana"
PROMTOOL = shutil.which("promtool")
# PromQL functions, keywords and label names that the name regex also matches.
_NOT_METRICS = {
    "sum", "max", "min", "avg", "by", "rate", "increase", "irate", "time", "histogram_quantile",
    "quantile_over_time", "and", "unless", "on", "le", "count", "without", "offset", "bool", "or",
    "label_replace", "group_left",
}  # fmt: skip


def _generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location("grafana_generate", GRAFANA / "generate.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _dashboards() -> dict[str, dict[str, Any]]:
    return {p.name: json.loads(p.read_text()) for p in sorted((GRAFANA / "dashboards").glob("*.json"))}


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in dashboard["panels"] if p["type"] != "row"]


def _exprs() -> list[tuple[str, str, str]]:
    panels = [
        (name, panel["title"], target["expr"])
        for name, d in _dashboards().items()
        for panel in _panels(d)
        for target in panel["targets"]
    ]
    annotations = [
        (name, a["name"], a["expr"]) for name, d in _dashboards().items() for a in d["annotations"]["list"]
    ]
    return panels + annotations


def _substitute(expr: str) -> str:
    return (
        expr.replace("$__rate_interval", "5m")
        .replace("$__range", "1d")
        .replace("$window", "1h")
        .replace("$instance", ".+")
        .replace("$profile", ".+")
        .replace("$cluster", ".*")
        .replace("$job", ".+")
        .replace("$model_name", ".+")
        .replace("$gpu", ".+")
    )


def test_files_are_what_the_generator_writes() -> None:
    rendered = _generator().render()
    assert set(rendered) == set(_dashboards())
    for name, text in rendered.items():
        assert (GRAFANA / "dashboards" / name).read_text() == text, f"{name}: run python3 grafana/generate.py"


def test_dashboard_structure() -> None:
    uids = set()
    for name, d in _dashboards().items():
        assert 8 <= len(d["uid"]) <= 40, name
        assert d["uid"] not in uids
        uids.add(d["uid"])
        assert "__inputs" not in d
        assert d.get("id") is None
        variables = d["templating"]["list"]
        ds = [v for v in variables if v["type"] == "datasource"]
        assert len(ds) == 1
        assert ds[0]["name"] == "datasource"
        assert ds[0]["query"] == "prometheus"
        for v in variables:
            if v["type"] == "query":
                assert v["datasource"]["uid"] == "${datasource}"
        grid: set[tuple[int, int]] = set()
        for panel in _panels(d):
            where = f"{name}: {panel['title']}"
            assert panel["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, where
            assert panel["description"], where
            assert panel["fieldConfig"]["defaults"]["unit"], where
            assert panel["targets"], where
            for target in panel["targets"]:
                assert target["datasource"]["uid"] == "${datasource}", where
                for call in re.findall(r"\b(?:rate|irate|increase)\([^\[]*\[([^\]]+)\]", target["expr"]):
                    assert call in ("$__rate_interval", "$window", "$__range"), where
            pos = panel["gridPos"]
            assert pos["x"] + pos["w"] <= 24, where
            cells = {
                (x, y)
                for x in range(pos["x"], pos["x"] + pos["w"])
                for y in range(pos["y"], pos["y"] + pos["h"])
            }
            assert not cells & grid, f"{where} overlaps another panel"
            grid |= cells


@pytest.mark.skipif(PROMTOOL is None, reason="promtool missing (Debian package prometheus)")
def test_every_expression_parses(tmp_path: Path) -> None:
    assert PROMTOOL is not None
    lines = ["groups:", "  - name: dashboards", "    rules:"]
    for i, (_, _, expr) in enumerate(_exprs()):
        lines.append(f"      - record: dashboard_check_{i}")
        lines.append(f"        expr: {json.dumps(_substitute(expr))}")
    rules = tmp_path / "dashboards.rules.yml"
    rules.write_text("\n".join(lines) + "\n")
    result = subprocess.run(
        [PROMTOOL, "check", "rules", str(rules)], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stdout + result.stderr


def _metric_names(expr: str) -> set[str]:
    expr = re.sub(r'"[^"]*"', '""', expr)  # label values and strings
    expr = re.sub(r"#[^\n]*", "", expr)  # PromQL comments (the alerts' `# threshold` markers)
    expr = re.sub(r"\{[^}]*\}", "{}", expr)  # label matchers
    expr = re.sub(r"\[[^\]]*\]", "[]", expr)  # ranges
    expr = re.sub(r"\boffset\s+\d+[smhdwy]", "", expr)  # offsets
    expr = re.sub(r"\b(?:by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", "", expr)  # label lists
    # An identifier followed by "(" is a function or an aggregation, not a series.
    names = set(re.findall(r"[a-zA-Z_:][a-zA-Z0-9_:]*(?![a-zA-Z0-9_:]|\s*\()", expr))
    return {n for n in names if n not in _NOT_METRICS and not re.fullmatch(r"[0-9e]+", n)}


# One worker for both readers of `known_metrics` (session-scoped: a registry filled by every
# collector once per worker that needs it).
@pytest.mark.xdist_group("known_metrics")
def test_dashboards_name_only_existing_metrics(known_metrics: set[str]) -> None:
    unknown = {
        (name, title, metric)
        for name, title, expr in _exprs()
        for metric in _metric_names(expr)
        if metric not in known_metrics
    }
    assert not unknown, sorted(unknown)
    used = {m for _, _, e in _exprs() for m in _metric_names(e)}
    assert {
        "sentinel_load_output_throughput_tokens_per_second",
        "sentinel_request_ttft_seconds_bucket",
    } <= used


@pytest.mark.xdist_group("known_metrics")
def test_alert_rules_name_only_existing_metrics(known_metrics: set[str]) -> None:
    exprs = []
    for name in ("alerts.yml", "alerts-dcgm.yml"):
        text = (ROOT / "deploy" / name).read_text()
        for block in re.findall(r"expr: (\|\n(?:\s{10,}.*\n)+|.*\n)", text):
            exprs.append(block.lstrip("|"))
    assert len(exprs) >= 35
    # `up` comes from Prometheus itself, not from the exporter; the GPUs a pod requests from
    # kube-state-metrics (alerts-dcgm.yml's lost GPU), as its documentation names the series.
    others = {"up", "printf", "kube_pod_container_resource_requests"}
    used = {m for e in exprs for m in _metric_names(e)}
    assert "threshold" not in used
    unknown = used - known_metrics - others
    assert not unknown, sorted(unknown)


def test_stat_panels_state_their_colours_and_down_is_red() -> None:
    grafana_default = [{"color": "green", "value": None}, {"color": "red", "value": 80}]
    for name, d in _dashboards().items():
        for panel in _panels(d):
            if panel["type"] != "stat":
                continue
            steps = panel["fieldConfig"]["defaults"].get("thresholds", {}).get("steps")
            assert steps, f"{name}: {panel['title']}"
            assert steps != grafana_default, f"{name}: {panel['title']}"
    overview = _dashboards()["sentinel-overview.json"]
    by_title = {p["title"]: p for p in _panels(overview)}
    up = by_title["Server up"]["fieldConfig"]["defaults"]
    assert up["mappings"][0]["options"]["0"] == {"text": "DOWN", "color": "red", "index": 0}
    state = by_title["Server state"]["fieldConfig"]["overrides"]
    colours = {o["matcher"]["options"]: o["properties"][0]["value"]["fixedColor"] for o in state}
    assert colours[".* failed$"] == "red"
    assert colours[".* ready$"] == "green"


def test_every_series_is_one_line_per_instance() -> None:
    # With $instance = All, a legend without the instance merges boxes into one name, and an
    # aggregation without `instance` merges them into one line.
    for name, d in _dashboards().items():
        for panel in _panels(d):
            for target in panel["targets"]:
                where = f"{name}: {panel['title']}: {target['expr']}"
                assert "{{instance}}" in target["legendFormat"], where
                for grouping in re.findall(r"\b(?:sum|max|min|avg) by \(([^)]*)\)", target["expr"]):
                    assert "instance" in grouping, where
                assert not re.search(r"\b(?:sum|max|min|avg)\s*\(", target["expr"]), where


def test_every_query_has_the_fleet_matchers() -> None:
    """job and (opt-in) cluster in every query; model_name on SGLang's series; gpu on GPU panels."""
    for name, d in _dashboards().items():
        variables = {v["name"]: v for v in d["templating"]["list"]}
        assert variables["cluster"]["hide"] == 2, name  # opt-in
        assert variables["cluster"]["allValue"] == ".*", name  # All matches series without it
        assert {"job", "instance"} <= set(variables), name
        assert d["__requires"] == [
            {"type": "grafana", "id": "grafana", "name": "Grafana", "version": "10.4.0"}
        ]
        for panel in _panels(d):
            for target in panel["targets"]:
                where = f"{name}: {panel['title']}: {target['expr']}"
                assert 'job=~"$job"' in target["expr"], where
                assert 'cluster=~"$cluster"' in target["expr"], where
                if "sglang:" in target["expr"]:
                    assert 'model_name=~"$model_name"' in target["expr"], where
                if "gpu" in name or "dcgm" in name:
                    metrics = _metric_names(target["expr"])
                    if any(m.startswith(("DCGM_", "sentinel_gpu_")) and "devices" not in m for m in metrics):
                        assert 'gpu=~"$gpu"' in target["expr"], where
    assert "model_name" in {v["name"] for v in _dashboards()["sentinel-overview.json"]["templating"]["list"]}


def test_every_panel_has_a_stable_id_from_its_row_and_title() -> None:
    gen = _generator()
    for name, d in _dashboards().items():
        ids: list[int] = []
        row = ""
        for panel in d["panels"]:
            if panel["type"] == "row":
                row = panel["title"]
            key = f"{row}/" + ("" if panel["type"] == "row" else panel["title"])
            # The id depends on the panel's row and title only: regenerating, adding or moving other
            # panels leaves it (and every viewPanel= link to it) as it is.
            assert panel["id"] == gen.stable_id(key), (name, key)
            ids.append(panel["id"])
        assert len(ids) == len(set(ids)), name
    # Deterministic across runs of the generator (no counter, no process-seeded hash).
    assert gen.render() == gen.render()
    assert gen.stable_id("Capacity/Max concurrency within SLO") == gen.stable_id(
        "Capacity/Max concurrency within SLO"
    )


def test_a_board_refuses_two_panels_with_one_id() -> None:
    board = _generator().Board()
    board.row("R")
    board.panel("stat", "Same", "", "short", [])
    with pytest.raises(ValueError, match="rename one"):
        board.panel("stat", "Same", "", "short", [])


def test_the_slo_panel_says_no_slo_is_set_instead_of_no_data() -> None:
    panels = _panels(_dashboards()["sentinel-overview.json"])
    (panel,) = [p for p in panels if p["title"] == "Max concurrency within SLO"]
    assert panel["fieldConfig"]["defaults"]["noValue"] == "no SLO set ([calibration.slo])"
