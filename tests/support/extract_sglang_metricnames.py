"""Regenerate ``tests/support/sglang_metricnames.py`` from unpacked SGLang wheels (0.5.9 and 0.5.23).

Reads the source statically (``ast``): the metrics modules import torch, so they cannot be
imported here. Every ``Counter/Gauge/Histogram/Summary/GaugeHistogram(name="sglang:…")`` call is
evaluated with the label set its caller passes and the literal bucket lists assigned earlier in
the same function. The two layouts differ: 0.5.9 keeps the collectors in ``srt/metrics/collector.py``
(HTTP metrics in ``srt/utils/common.py``), 0.5.23 in ``srt/observability/`` (``metrics_collector.py``,
``http_request_metrics.py``), with label sets built by other callers (``LAYOUTS`` below says which).
A family defined the same way (name, type, documentation, labels, component, condition, buckets,
multiprocess mode) in both is listed once with ``versions = {"0.5.9", "0.5.23"}``; one that differs
is listed once per version.

Usage: ``python tests/support/extract_sglang_metricnames.py WHEELS > OUT.py`` where ``WHEELS`` holds
``s59/sglang`` and ``s23/sglang`` (each an unpacked wheel), then ``ruff format``.
``tests/sglang/test_metricnames.py`` runs it and compares with the committed module when
``$SGLANG_WHEEL_DIR`` (default: the repository's ``.cache/sglang-wheels``, filled by scripts/test) has both.
"""

from __future__ import annotations

import ast
import contextlib
import math
import sys
import warnings
from pathlib import Path
from typing import Any

# Label sets the callers pass, without the optional dp_rank / priority / --extra-metric-labels /
# custom labels. 0.5.9: scheduler_metrics_mixin.py L114-123, tokenizer_manager.py L433-441.
# 0.5.23: metrics_collector.py SchedulerMetricsCollector.init_new (L1382), tokenizer_metric_labels
# (L1804), radix_cache_metric_labels (L2416), mem_cache/unified_cache/storage_attachment.py L330,
# disaggregation/encoder/runtime.py L1590.
SCHEDULER_LABELS = {"model_name": "", "engine_type": "", "tp_rank": "", "pp_rank": "", "moe_ep_rank": ""}
STORAGE_LABELS_023 = (
    "storage_backend",
    "tp_rank",
    "dp_rank",
    "pp_rank",
    "pp_size",
    "attn_cp_rank",
    "attn_cp_size",
)
RADIX_LABELS_023 = ("cache_type", "tp_rank", "pp_rank", "dp_rank")
Layout = tuple[dict[str, tuple[str, dict[str, str] | None]], dict[str, tuple[str, dict[str, str]]]]
LAYOUTS: dict[str, Layout] = {
    "0.5.9": (
        {  # file: (component, labels dict bound to `labels` / `self.labels`; None = per class)
            "srt/metrics/collector.py": ("", None),
            "srt/utils/common.py": ("http", {}),
            "srt/metrics/func_timer.py": ("tokenizer", {}),
            "srt/metrics/cpu_monitor.py": ("process", {}),
            "srt/metrics/startup_func_log_and_timer.py": ("startup", {}),
        },
        {
            "SchedulerMetricsCollector": ("scheduler", SCHEDULER_LABELS),
            "TokenizerMetricsCollector": ("tokenizer", {"model_name": ""}),
            "StorageMetricsCollector": ("storage", SCHEDULER_LABELS),
            "ExpertDispatchCollector": ("expert_dispatch", {}),
            "RadixCacheMetricsCollector": ("radix_cache", SCHEDULER_LABELS),
        },
    ),
    "0.5.23": (
        {
            "srt/observability/metrics_collector.py": ("", None),
            "srt/observability/http_request_metrics.py": ("http", {}),
            "srt/observability/func_timer.py": ("tokenizer", {}),
            "srt/observability/cpu_monitor.py": ("process", {}),
            "srt/observability/startup_func_log_and_timer.py": ("startup", {}),
            # --encoder-only dispatcher: its own labels (none by default) + dp_rank
            "srt/disaggregation/encoder/runtime.py": ("encoder", {}),
        },
        {
            "SchedulerMetricsCollector": ("scheduler", SCHEDULER_LABELS),
            "TokenizerMetricsCollector": ("tokenizer", {"model_name": "", "engine_type": ""}),
            "StorageMetricsCollector": ("storage", dict.fromkeys(STORAGE_LABELS_023, "")),
            "ExpertDispatchCollector": ("expert_dispatch", {}),
            "RadixCacheMetricsCollector": ("radix_cache", dict.fromkeys(RADIX_LABELS_023, "")),
            "EncoderMetricsCollector": ("encoder", {"model_name": "", "dp_rank": ""}),
        },
    ),
}  # fmt: skip
WHEEL_DIRS = {"0.5.9": "s59/sglang", "0.5.23": "s23/sglang"}
KINDS = {"Counter": "counter", "Gauge": "gauge", "Histogram": "histogram", "Summary": "summary",
         "GaugeHistogram": "gaugehistogram"}  # fmt: skip


def exponential_buckets(start: float, width: float, length: int) -> list[float]:
    return [start * (width**i) for i in range(length)]


def generate_buckets(rule: Any, default: list[float]) -> list[float]:
    return sorted(set(default))  # the default rule: what a server started without bucket flags uses


class _Walker(ast.NodeVisitor):
    def __init__(self, path: str, text: str, layout: Layout, constants: dict[str, Any]) -> None:
        self.path = path
        self.text = text
        self.constants = constants
        self.out: list[dict[str, Any]] = []
        self.component, self.labels = layout[0][path]
        self.classes = layout[1]
        self.env: dict[str, Any] = {}
        self.conditions: list[str] = []

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        saved = (self.component, self.labels)
        if node.name in self.classes:
            self.component, self.labels = self.classes[node.name]
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
                 "set": set, "range": range, "float": float, "dict": dict, **self.constants,
                 **self.env}  # fmt: skip
        return eval(compile(ast.Expression(node), self.path, "eval"), {"__builtins__": {}}, scope)

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
                    "documentation": self._eval(doc_node) if doc_node is not None else "",
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


def _parse(text: str) -> ast.Module:
    # SGLang's own source has e.g. invalid escape sequences in regex strings: its warnings, not ours.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", (SyntaxWarning, DeprecationWarning))
        return ast.parse(text)


_PLAIN = (ast.Constant, ast.Name, ast.Tuple, ast.List, ast.Load)


def _module_constants(root: Path, dirs: set[str]) -> dict[str, Any]:
    """Module-level literal constants of the metrics packages (0.5.23 formats help strings with
    e.g. scheduler_stage_metrics.FORWARD_OVERLAP_CATEGORIES)."""
    found: dict[str, Any] = {}
    for rel in sorted(dirs):
        for path in sorted((root / rel).glob("*.py")):
            for node in _parse(path.read_text()).body:
                if isinstance(node, ast.Assign) and len(node.targets) == 1:
                    target = node.targets[0]
                    if isinstance(target, ast.Name) and target.id.isupper():
                        # literals, and tuples/lists of names of earlier constants
                        plain = all(isinstance(n, _PLAIN) for n in ast.walk(node.value))
                        with contextlib.suppress(Exception):
                            if plain:
                                code = compile(ast.Expression(node.value), str(path), "eval")
                                found[target.id] = eval(code, {"__builtins__": {}}, dict(found))
    return found


def extract_version(root: Path, version: str) -> list[dict[str, Any]]:
    """The families of one unpacked wheel (``root`` = its ``sglang/`` directory)."""
    layout = LAYOUTS[version]
    entries: list[dict[str, Any]] = []
    constants = _module_constants(root, {str(Path(rel).parent) for rel in layout[0]})
    for rel in layout[0]:
        text = (root / rel).read_text()
        walker = _Walker(rel, text, layout, constants)
        walker.visit(_parse(text))
        entries.extend(walker.out)
    return entries


_SAME = ("name", "type", "documentation", "labels", "component", "condition", "buckets", "multiprocess_mode")


def extract(wheels: Path) -> list[dict[str, Any]]:
    """Both versions merged: a definition identical in both is one entry with both versions."""
    merged: list[dict[str, Any]] = []
    index: dict[tuple[Any, ...], dict[str, Any]] = {}
    for version, rel in WHEEL_DIRS.items():
        for e in extract_version(wheels / rel, version):
            key = tuple(repr(e.get(k)) for k in _SAME)
            if key in index and version not in index[key]["versions"]:
                index[key]["versions"].add(version)
                index[key]["source"] += f"; {version}: {e['source']}"
                continue
            e = {**e, "versions": {version}, "source": f"{version}: {e['source']}"}
            index.setdefault(key, e)
            merged.append(e)
    return merged


def render(entries: list[dict[str, Any]]) -> str:
    lines = [
        "# ruff: noqa: E501  (generated: SGLang's help strings are kept verbatim)",
        '"""The ``sglang:*`` metric families of SGLang 0.5.9 and 0.5.23 — GENERATED, do not edit by hand.',
        "",
        "Regenerate with ``python tests/support/extract_sglang_metricnames.py <dir with s59/sglang and",
        "s23/sglang, unpacked wheels>`` (then ``ruff format``). ``versions``: the wheels that define the",
        "family exactly so (a family changed between them appears once per version).",
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
        '__all__ = ["FAMILIES", "VERSIONS", "MetricFamily", "by_name", "of_version"]',
        "",
        f"VERSIONS: tuple[str, ...] = {tuple(WHEEL_DIRS)!r}",
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
        "    #: Where in each wheel (``version: path:line``; paths inside ``sglang/``).",
        "    source: str",
        "    #: The SGLang versions (of VERSIONS) that define it like this.",
        "    versions: frozenset[str]",
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
        ordered = [v for v in WHEEL_DIRS if v in e["versions"]]
        lines.append(f"        versions=frozenset({ordered!r}),")
        lines.append("    ),")
    lines += [
        ")",
        "",
        "",
        'def by_name(name: str, version: str = "0.5.9") -> tuple[MetricFamily, ...]:',
        '    """Every definition of ``name`` (``sglang:…``; counters with ``_total``) in ``version``."""',
        "    return tuple(f for f in FAMILIES if f.name == name and version in f.versions)",
        "",
        "",
        "def of_version(version: str) -> tuple[MetricFamily, ...]:",
        '    """The families ``version`` defines."""',
        "    return tuple(f for f in FAMILIES if version in f.versions)",
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    sys.stdout.write(render(extract(Path(sys.argv[1]))))
