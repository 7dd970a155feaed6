"""deploy/alerts.yml's and deploy/alerts-dcgm.yml's one-page-per-cause labels, the inhibit-rule
example of docs/alerting.md that relies on them, and the runbook page every alert links."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = ("alerts.yml", "alerts-dcgm.yml")
RULES_BY_FILE: dict[str, list[dict[str, Any]]] = {
    name: [r for g in yaml.safe_load((ROOT / "deploy" / name).read_text())["groups"] for r in g["rules"]]
    for name in RULE_FILES
}
RULES = RULES_BY_FILE["alerts.yml"]
ALL_RULES = [r for rules in RULES_BY_FILE.values() for r in rules]
# Where every runbook_url points (deploy/alerts.yml's header says why this host): the page is
# <base><AlertName>.md, and the part after the base is the page's path under docs/runbooks/.
RUNBOOK_BASE = "https://sglang-sentinel.invalid/docs/runbooks/"
RUNBOOKS = ROOT / "docs" / "runbooks"


def _label_values(label: str, rules: list[dict[str, Any]] = RULES) -> set[str]:
    return {r["labels"][label] for r in rules if label in r.get("labels", {})}


def test_every_alert_has_a_description_and_a_runbook_url_on_the_one_base() -> None:
    assert len(RULES) >= 33
    assert len(RULES_BY_FILE["alerts-dcgm.yml"]) >= 4
    for rule in ALL_RULES:
        annotations = rule["annotations"]
        for key in ("summary", "description", "action", "runbook_url"):
            assert annotations.get(key), (rule["alert"], key)
        assert annotations["runbook_url"] == f"{RUNBOOK_BASE}{rule['alert']}.md", rule["alert"]


def test_every_runbook_url_is_a_page_with_its_three_sections() -> None:
    for rule in ALL_RULES:
        name = rule["annotations"]["runbook_url"].removeprefix(RUNBOOK_BASE)
        page = (RUNBOOKS / name).read_text()
        assert page.startswith(f"# {rule['alert']}\n"), name
        for heading in ("## What it means", "## How to confirm", "## What to do"):
            assert heading in page, (name, heading)


def test_every_runbook_page_belongs_to_an_alert() -> None:
    # A page whose alert was renamed or removed would be a runbook nothing links to.
    assert {p.stem for p in RUNBOOKS.glob("*.md")} == {r["alert"] for r in ALL_RULES}


def test_the_charts_runbook_base_is_the_rules_own() -> None:
    values = yaml.safe_load((ROOT / "deploy" / "helm" / "sglang-sentinel" / "values.yaml").read_text())
    assert values["prometheusRule"]["runbookBaseUrl"] == RUNBOOK_BASE


def test_the_causes_are_the_documented_ones() -> None:
    assert _label_values("cause") == {"sentinel_down", "crash_loop", "gpu_lost", "no_routable_worker"}
    # One alert per cause in each rule file: the source of an inhibit rule is one page. The dcgm
    # file's lost GPU is the same cause as GpuMissing, read where sentinel's NVML is off.
    for rules in RULES_BY_FILE.values():
        causes = [r["labels"]["cause"] for r in rules if "cause" in r.get("labels", {})]
        assert len(causes) == len(set(causes))
    assert _label_values("cause", RULES_BY_FILE["alerts-dcgm.yml"]) == {"gpu_lost"}


def test_gpu_alerts_carry_the_gpu_component() -> None:
    # Routing a hardware page by `component` reaches every GPU alert, whichever exporter it reads.
    gpu = [r for r in ALL_RULES if r["alert"].startswith(("Gpu", "DcgmGpu"))]
    assert len(gpu) >= 13
    assert {r["alert"]: r["labels"].get("component") for r in gpu} == {r["alert"]: "gpu" for r in gpu}


def _matchers(items: list[str]) -> list[tuple[str, str, str]]:
    out = []
    for item in items:
        m = re.fullmatch(r'(\w+)(=~|!=|=)"([^"]*)"', item)
        assert m is not None, item
        out.append((m.group(1), m.group(2), m.group(3)))
    return out


def test_the_inhibit_rule_example_matches_what_the_rules_carry() -> None:
    text = (ROOT / "docs" / "alerting.md").read_text()
    (block,) = re.findall(r"```yaml\n(inhibit_rules:.*?)```", text, re.S)
    rules = yaml.safe_load(block)["inhibit_rules"]
    assert len(rules) == 3
    names = {r["alert"] for r in ALL_RULES}
    for inhibit in rules:
        assert inhibit["equal"] == ["job", "instance"]
        for label, op, value in _matchers(inhibit["source_matchers"] + inhibit["target_matchers"]):
            if label == "alertname":
                assert value in names
                continue
            have = _label_values(label, ALL_RULES)
            wanted = value.split("|") if op == "=~" else [value]
            assert set(wanted) <= have, (label, wanted, have)
        # A rule never inhibits its own source.
        (src,) = _matchers(inhibit["source_matchers"])
        source = [r for r in ALL_RULES if r.get("labels", {}).get(src[0]) == src[2]]
        targets = _matchers(inhibit["target_matchers"])
        for rule in source:
            labels = {"alertname": rule["alert"], **rule["labels"]}
            hit = all(
                (re.fullmatch(v, labels.get(k, "")) is not None)
                if op == "=~"
                else (labels.get(k, "") != v if op == "!=" else labels.get(k, "") == v)
                for k, op, v in targets
            )
            assert not hit, (rule["alert"], inhibit)


def test_a_lost_gpu_silences_its_xid_alert_in_the_rules_themselves() -> None:
    # The XID alert pages first (no long `for`), before GpuMissing's 5 minutes are up: an inhibit
    # rule could only silence it once GpuMissing fires, so the rule is written `unless` the lost
    # GPU (alerts.test.yml has the XID 79 case) and dcgm's XID alert leaves 79 to DcgmGpuMissing.
    (xid,) = [r for r in RULES if r["alert"] == "GpuXidCritical"]
    (missing,) = [r for r in RULES if r["alert"] == "GpuMissing"]
    assert "sentinel_gpu_visible_devices < sentinel_gpu_expected_devices" in missing["expr"]
    assert (
        "unless on (job, instance) sentinel_gpu_visible_devices < sentinel_gpu_expected_devices"
        in xid["expr"]
    )
    (dcgm_xid,) = [r for r in RULES_BY_FILE["alerts-dcgm.yml"] if r["alert"] == "DcgmGpuXidCritical"]
    (dcgm_missing,) = [r for r in RULES_BY_FILE["alerts-dcgm.yml"] if r["alert"] == "DcgmGpuMissing"]
    assert "== 79" not in dcgm_xid["expr"]
    assert "DCGM_FI_DEV_XID_ERRORS == 79" in dcgm_missing["expr"]
