"""deploy/alerts-dcgm.yml's unit tests are built from the dcgm-exporter exposition sample: every
dcgm-exporter series they feed carries the label set of tests/support/samples/dcgm-exporter-h200.txt
(as Prometheus stores it scraped with honorLabels true or false), and the rules read only fields
that sample has. promtool runs the tests themselves (tests/deploy/test_deploy.py)."""

from __future__ import annotations

import re
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
SAMPLE = ROOT / "tests" / "support" / "samples" / "dcgm-exporter-h200.txt"
RULES = ROOT / "deploy" / "alerts-dcgm.yml"
TESTS = ROOT / "deploy" / "alerts-dcgm.test.yml"
# What a scrape adds (the target's own labels) and, with honorLabels false, the dcgm-exporter pod's
# namespace/pod that push the exposition's into exported_* (the live dashboard test's two jobs).
SCRAPE = {"job", "instance"}
DCGM_OWN_POD = {"namespace": "gpu-operator", "pod": "nvidia-dcgm-exporter-7xk2p"}


def _selector(series: str) -> tuple[str, dict[str, str]]:
    m = re.fullmatch(r"(\w+)\{(.*)\}", series)
    assert m is not None, series
    return m.group(1), dict(re.findall(r'(\w+)="([^"]*)"', m.group(2)))


def _sample() -> dict[str, list[dict[str, str]]]:
    """Each series name of the sample with its label sets, as written (empty values included)."""
    out: dict[str, list[dict[str, str]]] = {}
    for line in SAMPLE.read_text().splitlines():
        if line and not line.startswith("#"):
            name, labels = _selector(line.rsplit(" ", 1)[0])
            out.setdefault(name, []).append(labels)
    return out


def _as_exposed(labels: dict[str, str]) -> dict[str, str]:
    """The labels dcgm-exporter wrote, from the series Prometheus stored."""
    labels = {k: v for k, v in labels.items() if k not in SCRAPE}
    if "exported_pod" in labels:
        assert {k: labels[k] for k in DCGM_OWN_POD} == DCGM_OWN_POD, labels
        labels["namespace"] = labels.pop("exported_namespace")
        labels["pod"] = labels.pop("exported_pod")
    return labels


def test_every_dcgm_series_of_the_unit_tests_is_a_series_of_the_sample() -> None:
    sample = _sample()
    doc = yaml.safe_load(TESTS.read_text())
    fed = 0
    for case in doc["tests"]:
        for item in case["input_series"]:
            name, labels = _selector(item["series"])
            if not name.startswith("DCGM_"):
                continue
            fed += 1
            assert _as_exposed(labels) in sample[name], item["series"]
    assert fed >= 20
    # Both ways of scraping dcgm-exporter are tested.
    assert "exported_pod=" in TESTS.read_text()


def test_the_rules_read_only_fields_the_sample_has() -> None:
    sample = _sample()
    exprs = [r["expr"] for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]
    used = {name for expr in exprs for name in re.findall(r"\bDCGM_FI_\w+", expr)}
    assert used
    assert used <= set(sample), sorted(used - set(sample))
