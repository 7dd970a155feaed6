"""Render the chart (helm-python-sdk, offline) and write what is generated from it.

Generated, and kept equal by tests/k8s/test_chart.py:

- the chart's ``files/alerts.yml``, ``files/alerts-dcgm.yml`` and ``files/dashboards/*.json``:
  copies of deploy/alerts.yml, deploy/alerts-dcgm.yml and grafana/dashboards (a chart can only
  read files inside itself);
- ``deploy/k8s/<variant>/sentinel.yaml``: plain manifests for kustomize users, the chart rendered
  with each variant's values, Helm's own labels removed;
- the values table of the chart's README.md, from the ``# --`` comments of values.yaml.

After changing the chart, the alerts or the dashboards::

    .venv/bin/python tests/k8s/chart.py --write
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from pathlib import Path
from typing import Any

import yaml

REPO = Path(__file__).resolve().parents[2]
CHART = REPO / "deploy" / "helm" / "sglang-sentinel"
K8S = REPO / "deploy" / "k8s"

_FLEET_TARGETS = [
    {"name": "glm5-a", "url": "http://glm5-a.inference.svc:30000", "labels": {"deployment": "glm5-a"}},
    {"name": "glm5-b", "url": "http://glm5-b.inference.svc:30000", "servedModelName": "glm-5"},
]

# deploy/k8s/<variant>: what a kustomize user starts from. With the Operator objects: a kustomize
# user copies the manifests and keeps what their cluster has (README, "Kubernetes").
_OPERATOR = {"podMonitor": {"enabled": True}, "prometheusRule": {"enabled": True}}
VARIANTS: dict[str, dict[str, Any]] = {
    "sidecar": _OPERATOR,
    "lws": {**_OPERATOR, "sidecar": {"workload": "LeaderWorkerSet", "lws": {"size": 2}}},
    "fleet": {
        "mode": "fleet",
        "fleet": {"targets": _FLEET_TARGETS},
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True},
    },
}


def ci_values() -> dict[str, dict[str, Any]]:
    """The chart's ci/*-values.yaml (chart-testing's convention), by file stem."""
    return {
        f"ci-{p.name.removesuffix('-values.yaml')}": yaml.safe_load(p.read_text(encoding="utf-8"))
        for p in sorted((CHART / "ci").glob("*-values.yaml"))
    }


# The values matrix CI renders and validates (every object of every case).
MATRIX: dict[str, dict[str, Any]] = {
    **VARIANTS,
    # The chart's defaults: what `helm install` gives on a bare cluster (no Operator CRDs).
    "defaults": {},
    "fleet-defaults": {"mode": "fleet", "fleet": {"targets": _FLEET_TARGETS}},
    **ci_values(),
    "sidecar-secured": {
        **_OPERATOR,
        "existingSecret": "sentinel-secrets",
        "exporter": {"basicAuth": True, "tls": {"secretName": "sentinel-tls"}},
        "networkPolicy": {"enabled": True, "apiFrom": [{"podSelector": {"matchLabels": {"app": "gateway"}}}]},
        "sglang": {
            "env": [{"name": "HF_HOME", "value": "/models/.cache"}],
            "volumes": [{"name": "models", "persistentVolumeClaim": {"claimName": "models"}}],
            "volumeMounts": [{"name": "models", "mountPath": "/models", "readOnly": True}],
        },
        "nodeSelector": {"nvidia.com/gpu.product": "NVIDIA-H200"},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
    },
    "sidecar-no-operator": {
        "podMonitor": {"enabled": False},
        "prometheusRule": {"enabled": False},
        "dashboards": {"enabled": False},
        "networkPolicy": {"enabled": False},
        "podAnnotations": {"prometheus.io/scrape": "true", "prometheus.io/port": "9480"},
    },
    "lws-secured": {
        **_OPERATOR,
        "sidecar": {
            "workload": "LeaderWorkerSet",
            "replicas": 2,
            "lws": {"size": 4, "startupPolicy": "LeaderReady"},
        },
        "existingSecret": "sentinel-secrets",
    },
    # The alert overrides (chart README, "Alerts"): the dcgm-exporter rules on, alerts dropped,
    # thresholds, `for`, severity, labels and annotations changed, every alert labelled, the
    # runbooks hosted elsewhere.
    "sidecar-alerts": {
        **_OPERATOR,
        "prometheusRule": {
            "enabled": True,
            "runbookBaseUrl": "https://git.example.com/ops/sglang-sentinel/-/blob/main/docs/runbooks/",
            "additionalRuleLabels": {"team": "llm-serving", "severity": "none"},
            "dcgm": {"enabled": True},
            "rules": {
                "LoadClientBound": {"enabled": False},
                "DcgmGpuPcieReplays": {"enabled": False},
                "SglangQueueBacklog": {"threshold": 64, "for": "10m"},
                "GpuTemperatureHigh": {
                    "threshold": 90.5,
                    "severity": "critical",
                    "labels": {"pager": "hardware"},
                },
                "DcgmGpuTemperatureHigh": {"threshold": 90.5},
                "SglangStartTooLong": {
                    "for": "90m",
                    "annotations": {"dashboard": "https://grafana.example.com/d/sentinel-overview"},
                },
                # An alert without `for` gains one.
                "GpuRowRemapFailure": {"for": "5m"},
            },
        },
    },
    "fleet-file-sd": {
        "mode": "fleet",
        "fleet": {"targets": _FLEET_TARGETS, "fileSd": True},
        "serviceMonitor": {"enabled": True},
        "prometheusRule": {"enabled": True, "labels": {}},
        "jobLabel": "sglang-sentinel",
    },
}

# The rule files the chart's PrometheusRule is made of (templates/prometheusrule.yaml), as shipped
# for plain Prometheus in deploy/.
ALERT_FILES = ("alerts.yml", "alerts-dcgm.yml")

DEFAULTS: dict[str, Any] = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))

HEADER = (
    "# Generated from deploy/helm/sglang-sentinel by tests/k8s/chart.py --write (values: {variant});\n"
    "# edit the chart, not this file. Plain manifests for `kubectl apply -k`; no live-cluster test.\n"
)
_HELM_LABELS = ("helm.sh/chart", "app.kubernetes.io/managed-by")


def render(
    values: dict[str, Any], *, name: str = "sentinel", namespace: str = "sentinel"
) -> list[dict[str, Any]]:
    """Every object the chart renders with ``values``, in template order."""

    manifests = _render(values, name=name, namespace=namespace)
    objects: list[dict[str, Any]] = []
    for path in sorted(manifests):
        if path.endswith("NOTES.txt"):
            continue
        for doc in yaml.safe_load_all(manifests[path]):
            if doc:
                objects.append(doc)
    return objects


def _render(values: dict[str, Any], *, name: str, namespace: str) -> dict[str, str]:
    import helm_python

    chart = helm_python.Chart.load(str(CHART))
    manifests: dict[str, str] = chart.render(values, name=name, namespace=namespace, is_install=True)
    return manifests


def notes(values: dict[str, Any], *, name: str = "sentinel", namespace: str = "sentinel") -> str:
    """The chart's NOTES.txt as `helm install` prints it."""
    manifests = _render(values, name=name, namespace=namespace)
    return next(text for path, text in manifests.items() if path.endswith("NOTES.txt"))


def _strip_helm(obj: Any) -> Any:
    if isinstance(obj, dict):
        return {k: _strip_helm(v) for k, v in obj.items() if not (k in _HELM_LABELS and isinstance(v, str))}
    if isinstance(obj, list):
        return [_strip_helm(v) for v in obj]
    return obj


class _Dumper(yaml.SafeDumper):
    pass


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    # Multi-line values (config.toml, dashboards) as literal blocks, readable and diffable.
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def plain(variant: str) -> str:
    objects = [_strip_helm(o) for o in render(VARIANTS[variant])]
    body = yaml.dump_all(objects, Dumper=_Dumper, sort_keys=False, width=120, explicit_start=True)
    return HEADER.format(variant=variant) + body


_KEY = re.compile(r"^(\s*)([A-Za-z0-9_.\-/]+):(?:\s|$)")
_DOC = re.compile(r"^(\s*)# -- (.*)$")
_MORE = re.compile(r"^(\s*)#(?: (.*))?$")
README_BEGIN = "<!-- values table: generated by tests/k8s/chart.py --write from values.yaml -->"
README_END = "<!-- end of values table -->"


def value_docs(text: str | None = None) -> dict[str, str]:
    """``dotted.key -> description`` from the ``# --`` comments of values.yaml (helm-docs' style:
    the comment block right above a key, continued by the ``#`` lines after it)."""
    text = (CHART / "values.yaml").read_text(encoding="utf-8") if text is None else text
    docs: dict[str, str] = {}
    stack: list[tuple[int, str]] = []
    pending: tuple[int, list[str]] | None = None
    for line in text.splitlines():
        doc, more, key = _DOC.match(line), _MORE.match(line), _KEY.match(line)
        if doc:
            pending = (len(doc.group(1)), [doc.group(2).strip()])
        elif more and pending is not None and len(more.group(1)) == pending[0]:
            pending[1].append((more.group(2) or "").strip())
        elif key:
            indent = len(key.group(1))
            while stack and stack[-1][0] >= indent:
                stack.pop()
            stack.append((indent, key.group(2)))
            if pending is not None and pending[0] == indent:
                docs[".".join(k for _, k in stack)] = " ".join(w for w in pending[1] if w)
            pending = None
        else:
            pending = None
    return docs


def _lookup(values: Any, dotted: str) -> Any:
    for part in dotted.split("."):
        values = values[part]
    return values


def _type(value: Any) -> str:
    for kind, name in ((bool, "bool"), (int, "int"), (str, "string"), (list, "list"), (dict, "object")):
        if isinstance(value, kind):
            return name
    return type(value).__name__


_PIPE = "\\|"  # a literal | inside a Markdown table cell


def values_table() -> str:
    values = yaml.safe_load((CHART / "values.yaml").read_text(encoding="utf-8"))
    rows = ["| Key | Type | Default | Description |", "| --- | --- | --- | --- |"]
    for key, text in value_docs().items():
        value = _lookup(values, key)
        default = json.dumps(value, separators=(", ", ": ")).replace("|", _PIPE)
        rows.append(f"| `{key}` | {_type(value)} | `{default}` | {text.replace('|', _PIPE)} |")
    return "\n".join(rows) + "\n"


def readme() -> str:
    """The chart's README.md with its values table regenerated (the prose is edited in place)."""
    text = (CHART / "README.md").read_text(encoding="utf-8")
    head, rest = text.split(README_BEGIN + "\n", 1)
    _, tail = rest.split(README_END, 1)
    return f"{head}{README_BEGIN}\n{values_table()}{README_END}{tail}"


def generated() -> dict[Path, bytes]:
    """Every generated file and its content."""
    out: dict[Path, bytes] = {
        CHART / "files" / name: (REPO / "deploy" / name).read_bytes() for name in ALERT_FILES
    }
    out[CHART / "README.md"] = readme().encode()
    for board in sorted((REPO / "grafana" / "dashboards").glob("*.json")):
        out[CHART / "files" / "dashboards" / board.name] = board.read_bytes()
    for variant in VARIANTS:
        out[K8S / variant / "sentinel.yaml"] = plain(variant).encode()
    return out


def stale() -> list[Path]:
    """Generated files that differ from (or are missing next to) what generation gives."""
    want = generated()
    wrong = [p for p, data in want.items() if not p.is_file() or p.read_bytes() != data]
    board_dir = CHART / "files" / "dashboards"
    wrong += [p for p in board_dir.glob("*.json") if p not in want]
    return wrong


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="write the generated files (default: check)")
    args = parser.parse_args(argv)
    if not args.write:
        wrong = stale()
        for p in wrong:
            print(f"stale: {p.relative_to(REPO)}", file=sys.stderr)
        return 1 if wrong else 0
    for p in (CHART / "files" / "dashboards").glob("*.json"):
        p.unlink()
    # The chart's copies first: the plain manifests are rendered from them.
    for _ in range(2):
        for p, data in generated().items():
            p.parent.mkdir(parents=True, exist_ok=True)
            p.write_bytes(data)
    return 0 if not stale() else 1


if __name__ == "__main__":
    sys.exit(main())
