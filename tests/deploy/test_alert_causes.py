"""deploy/alerts.yml's one-page-per-cause labels, the inhibit-rule example of docs/alerting.md that
relies on them, and the runbook every alert with a ``runbook_url`` points at."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
RULES: list[dict[str, Any]] = [
    r for g in yaml.safe_load((ROOT / "deploy" / "alerts.yml").read_text())["groups"] for r in g["rules"]
]
# The alerts the one-page-per-cause work wrote or changed: each says what it means and links a runbook.
DOCUMENTED = {
    "SentinelDown",
    "SglangServerDown",
    "SglangCrashLoop",
    "SglangRestartsFrequent",
    "SglangCanaryFailing",
    "SglangGenerationFailing",
    "ReferenceRunsStale",
    "SentinelCollectorFailing",
    "GpuMissing",
    "SglangRouterRetriesExhausted",
    "SglangRouterNoRoutableWorker",
    "SglangRouterPoolDegraded",
    "SglangRouterGatewayErrors",
    "SentinelEnergyPerTokenRise",
}


def _label_values(label: str) -> set[str]:
    return {r["labels"][label] for r in RULES if label in r.get("labels", {})}


def test_every_cause_and_touched_alert_has_a_description_and_a_runbook() -> None:
    names = {r["alert"] for r in RULES}
    assert names >= DOCUMENTED
    for rule in RULES:
        if rule["alert"] in DOCUMENTED or "cause" in rule.get("labels", {}):
            assert rule["annotations"].get("description"), rule["alert"]
            assert rule["annotations"].get("runbook_url") == f"docs/runbooks/{rule['alert']}.md"


def test_every_runbook_url_is_a_page_with_its_three_sections() -> None:
    for rule in RULES:
        url = rule["annotations"].get("runbook_url")
        if url is None:
            continue
        page = (ROOT / url).read_text()
        assert page.startswith(f"# {rule['alert']}\n"), url
        for heading in ("## What it means", "## How to confirm", "## What to do"):
            assert heading in page, (url, heading)


def test_the_causes_are_the_documented_ones() -> None:
    assert _label_values("cause") == {"sentinel_down", "crash_loop", "gpu_lost", "no_routable_worker"}
    # One alert per cause: the source of an inhibit rule is one page.
    causes = [r["labels"]["cause"] for r in RULES if "cause" in r.get("labels", {})]
    assert len(causes) == len(set(causes))


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
    names = {r["alert"] for r in RULES}
    for inhibit in rules:
        assert inhibit["equal"] == ["job", "instance"]
        for label, op, value in _matchers(inhibit["source_matchers"] + inhibit["target_matchers"]):
            if label == "alertname":
                assert value in names
                continue
            have = _label_values(label)
            wanted = value.split("|") if op == "=~" else [value]
            assert set(wanted) <= have, (label, wanted, have)
        # A rule never inhibits its own source.
        (src,) = _matchers(inhibit["source_matchers"])
        source = [r for r in RULES if r.get("labels", {}).get(src[0]) == src[2]]
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
