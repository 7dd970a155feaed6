"""The places a release names its version, read without importing the package (stdlib only)."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def package_version() -> str:
    """``sglang_sentinel.__version__``: the one source (pyproject reads it too)."""
    text = (REPO / "daemon" / "sglang_sentinel" / "__init__.py").read_text(encoding="utf-8")
    match = re.search(r'^__version__ = "([^"]+)"$', text, re.M)
    assert match, "no __version__ in sglang_sentinel/__init__.py"
    return match.group(1)


def changelog_version() -> str:
    """The newest released entry of CHANGELOG.md (``## [X.Y.Z] - YYYY-MM-DD``; Unreleased skipped)."""
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    match = re.search(r"^## \[(\d+\.\d+\.\d+)\] - \d{4}-\d{2}-\d{2}$", text, re.M)
    return match.group(1) if match else ""


def chart_app_version() -> str:
    text = (REPO / "deploy" / "helm" / "sglang-sentinel" / "Chart.yaml").read_text(encoding="utf-8")
    match = re.search(r'^appVersion: "([^"]+)"$', text, re.M)
    return match.group(1) if match else ""
