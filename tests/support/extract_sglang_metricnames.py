"""Regenerate ``tests/support/sglang_metricnames.py`` from an unpacked SGLang 0.5.9 wheel
(and ``sglang_metricnames_0523.py`` from a 0.5.23 one: ``--version 0.5.23``).

Reads the source statically (``ast``): the metrics modules import torch, so they cannot be
imported here. Every ``Counter/Gauge/Histogram/Summary/GaugeHistogram(name="sglang:…")`` call is
evaluated with the label set its caller passes (read from scheduler_metrics_mixin.py and
tokenizer_manager.py) and the literal bucket lists assigned earlier in the same function.

Usage: ``python tests/support/extract_sglang_metricnames.py /work/notes/sglang-0.5.9/sglang > OUT.py``,
``python tests/support/extract_sglang_metricnames.py --version 0.5.23 /tmp/sgl/s23/sglang > OUT.py``
(``tests/sglang/test_metricnames.py`` runs it and compares with the committed module when the source
is present).
"""

from __future__ import annotations

import ast
import contextlib
import math
import sys
from pathlib import Path
from typing import Any

# Label sets the 0.5.9 callers pass (scheduler_metrics_mixin.py L114-123, tokenizer_manager.py L433-441),
# without the optional dp_rank / --extra-metric-labels / custom labels.
SCHEDULER_LABELS = {"model_name": "", "engine_type": "", "tp_rank": "", "pp_rank": "", "moe_ep_rank": ""}
TOKENIZER_LABELS = {"model_name": ""}
SOURCES: dict[str, tuple[str, dict[str, str] | None]] = {
    # file: (component, labels dict bound to `labels` / `self.labels`)
    "srt/metrics/collector.py": ("", None),  # component per class, below
    "srt/utils/common.py": ("http", {}),
    "srt/metrics/func_timer.py": ("tokenizer", {}),
    "srt/metrics/cpu_monitor.py": ("process", {}),
    "srt/metrics/startup_func_log_and_timer.py": ("startup", {}),
}
# 0.5.23: the collectors moved to srt/observability/; scheduler labels from init_new
# (metrics_collector.py L1382), tokenizer labels from tokenizer_metric_labels (L1804).
SOURCES_0523: dict[str, tuple[str, dict[str, str] | None]] = {
    "srt/observability/metrics_collector.py": ("", None),
    "srt/observability/http_request_metrics.py": ("http", {}),
    "srt/observability/func_timer.py": ("tokenizer", {}),
    "srt/observability/cpu_monitor.py": ("process", {}),
    "srt/observability/startup_func_log_and_timer.py": ("startup", {}),
}
TOKENIZER_LABELS_0523 = {"model_name": "", "engine_type": ""}
CLASS_COMPONENT = {
    "SchedulerMetricsCollector": ("scheduler", SCHEDULER_LABELS),
    "TokenizerMetricsCollector": ("tokenizer", TOKENIZER_LABELS),
    "StorageMetricsCollector": ("storage", SCHEDULER_LABELS),
    "ExpertDispatchCollector": ("expert_dispatch", {}),
    "RadixCacheMetricsCollector": ("radix_cache", SCHEDULER_LABELS),
    "EncoderMetricsCollector": ("encoder", {}),  # 0.5.23 only (EPD encoder servers)
}
KINDS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary",
         "GaugeHistogram": "gaugehistogram"}  # fmt: skip


def exponential_buckets(start: float, width: float, length: int) -> list[float]:
    return [start * (width**i) for i in range(length)]


def generate_buckets(rule: Any, default: list[float]) -> list[float]:
    return sorted(set(default))  # the default rule: what a server started without bucket flags uses


class _Walker(ast.NodeVisitor):
    def __init__(self, path: str, text: str) -> None:
        self.path = path
        self.text = text
        self.out: list[dict[str, Any]] = []
        self.component, self.labels = _sources[path]
        self.env: dict[str, Any] = {}
        self.conditions: list[str] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        saved = (self.component, self.labels)
        if node.name in _class_component:
            self.component, self.labels = _class_component[node.name]
        self.generic_visit(node)
        self.component, self.labels = saved

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        saved = self.env
        self.env = {}
        self.generic_visit(node)
        self.env = saved

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        self.conditions.append(ast.unparse(node.test))
        for child in node.body:
            self.visit(child)
        self.conditions.pop()
        if node.orelse:
            self.conditions.append(f"not ({ast.unparse(node.test)})")
            for child in node.orelse:
                self.visit(child)
            self.conditions.pop()

    def visit_Assign(self, node: ast.Assign) -> None:
        if len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            with contextlib.suppress(Exception):  # not a literal: buckets then come from flags
                self.env[node.targets[0].id] = self._eval(node.value)
        self.generic_visit(node)

    def _eval(self, node: ast.expr) -> Any:
        class _Self:
            labels = self.labels

        scope = {"labels": self.labels, "self": _Self, "exponential_buckets": exponential_buckets,
                 "generate_buckets": generate_buckets, "math": math, "list": list, "sorted": sorted,
                 "set": set, "range": range, "float": float, **self.env}  # fmt: skip
        return eval(compile(ast.Expression(node), self.path, "eval"), {"__builtins__": {}}, scope)

    def _doc(self, node: ast.expr | None) -> Any:
        if node is None:
            return ""
        try:
            return self._eval(node)
        except NameError:
            # An f-string over an imported constant (0.5.23 scheduler_stage_seconds_total): its source.
            return ast.unparse(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        fname = func.id if isinstance(func, ast.Name) else ""
        if isinstance(func, ast.Attribute):
            fname = func.attr
        if fname in KINDS:
            kw = {k.arg: k.value for k in node.keywords if k.arg}
            pos = list(node.args)
            name_node = kw.get("name") or (pos[0] if pos else None)
            if isinstance(name_node, ast.Constant) and str(name_node.value).startswith("sglang:"):
                doc_node = kw.get("documentation") or (pos[1] if len(pos) > 1 else None)
                labels_node = kw.get("labelnames") or (pos[2] if len(pos) > 2 else None)
                entry: dict[str, Any] = {
                    "name": name_node.value,
                    "type": KINDS[fname],
                    "documentation": self._doc(doc_node),
                    "labels": tuple(self._eval(labels_node)) if labels_node is not None else (),
                    "component": self.component,
                    "condition": " and ".join(self.conditions) or None,
                    "source": f"{self.path}:{node.lineno}",
                }
                if "buckets" in kw:
                    try:
                        entry["buckets"] = tuple(float(b) for b in self._eval(kw["buckets"]))
                    except Exception:
                        entry["buckets"] = None  # computed at run time from flags
                elif fname == "Histogram":
                    entry["buckets"] = "prometheus_client default"
                mode = kw.get("multiprocess_mode")
                entry["multiprocess_mode"] = self._eval(mode) if mode is not None else None
                self.out.append(entry)
        self.generic_visit(node)


_sources = SOURCES
_class_component = CLASS_COMPONENT


def extract(root: Path, version: str = "0.5.9") -> list[dict[str, Any]]:
    global _sources, _class_component
    if version == "0.5.9":
        _sources, _class_component = SOURCES, CLASS_COMPONENT
    else:
        _sources = SOURCES_0523
        _class_component = {
            **CLASS_COMPONENT,
            "TokenizerMetricsCollector": ("tokenizer", TOKENIZER_LABELS_0523),
        }
    entries: list[dict[str, Any]] = []
    for rel in _sources:
        text = (root / rel).read_text()
        walker = _Walker(rel, text)
        walker.visit(ast.parse(text))
        entries.extend(walker.out)
    return entries


def render(entries: list[dict[str, Any]], version: str = "0.5.9") -> str:
    version_args = "" if version == "0.5.9" else f"--version {version} "
    lines = [
        "# ruff: noqa: E501  (generated: SGLang's help strings are kept verbatim)",
        f'"""The ``sglang:*`` metric families of SGLang {version} — GENERATED, do not edit by hand.',
        "",
        f"Regenerate with ``python tests/support/extract_sglang_metricnames.py {version_args}"
        f"<sglang-{version} wheel>/sglang``",
        "(then ``ruff format``).",
        "One ``MetricFamily`` per constructor call in the wheel's source (a family created in two",
        "branches appears twice with each branch's ``condition``). ``labels`` are the label names for a",
        "default launch (no DP, no ``--extra-metric-labels``); ``buckets`` are the upper bounds without",
        "``+Inf`` (``None``: chosen at run time from flags). Counters are named here with their",
        "``_total`` suffix exactly as SGLang passes it to prometheus_client (and as ``# TYPE`` shows it).",
        '"""',
        "",
        "from __future__ import annotations",
        "",
        "from dataclasses import dataclass",
        "",
        '__all__ = ["FAMILIES", "MetricFamily", "by_name"]',
        "",
        "",
        "@dataclass(frozen=True, slots=True)",
        "class MetricFamily:",
        "    name: str",
        "    #: counter | gauge | histogram | summary | gaugehistogram",
        "    type: str",
        "    documentation: str",
        "    labels: tuple[str, ...]",
        "    #: scheduler | tokenizer | http | process | startup | storage | radix_cache | expert_dispatch",
        "    component: str",
        "    #: Source condition under which SGLang creates it (``None`` = always, with --enable-metrics).",
        "    condition: str | None",
        "    buckets: tuple[float, ...] | None",
        "    multiprocess_mode: str | None",
        f"    #: Where in the {version} wheel (path:line).",
        "    source: str",
        "",
        "",
        "FAMILIES: tuple[MetricFamily, ...] = (",
    ]
    for e in entries:
        buckets = e.get("buckets")
        if buckets == "prometheus_client default":
            buckets = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0)
        lines.append("    MetricFamily(")
        for key in ("name", "type", "documentation", "labels", "component", "condition"):
            lines.append(f"        {key}={e[key]!r},")
        lines.append(f"        buckets={tuple(buckets) if buckets else None!r},")
        lines.append(f"        multiprocess_mode={e['multiprocess_mode']!r},")
        lines.append(f"        source={e['source']!r},")
        lines.append("    ),")
    lines += [
        ")",
        "",
        "",
        "def by_name(name: str) -> tuple[MetricFamily, ...]:",
        '    """Every definition of ``name`` (``sglang:…``; counters with their ``_total`` suffix)."""',
        "    return tuple(f for f in FAMILIES if f.name == name)",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    args = sys.argv[1:]
    version = "0.5.9"
    if args[:1] == ["--version"]:
        version, args = args[1], args[2:]
    sys.stdout.write(render(extract(Path(args[0]), version), version))
