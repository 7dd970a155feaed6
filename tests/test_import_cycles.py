"""No import circle in the two packages; and the check finds one planted in a package of its own."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from support.import_cycles import import_cycles

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("package", ["sglang_sentinel", "sglang_sentinel_sim"])
def test_no_import_circle(package: str) -> None:
    assert import_cycles(package) == []


def _package(root: Path, name: str, modules: dict[str, str]) -> None:
    pkg = root / name
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    for mod, text in modules.items():
        (pkg / f"{mod}.py").write_text(text)


def test_a_planted_circle_is_found_deferred_and_type_checking_imports_included(tmp_path: Path) -> None:
    _package(
        tmp_path,
        "planted_circle_pkg",
        {
            "a": "from planted_circle_pkg import b\n",
            # The two ways a circle hides: a function-level import and a typing-only one.
            "b": "def f() -> None:\n    from planted_circle_pkg import c\n",
            "c": (
                "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from planted_circle_pkg import a\n"
            ),
            "d": "from planted_circle_pkg import a\n",  # imports into the circle, not part of it
        },
    )
    code = (
        f"import sys; sys.path[:0] = [{str(tmp_path)!r}, {str(REPO / 'tests')!r}]\n"
        "from support.import_cycles import import_cycles, main\n"
        "print(import_cycles('planted_circle_pkg'))\n"
        "sys.exit(main(['planted_circle_pkg']))\n"
    )
    # A child process: the planted package must not stay importable in this (xdist) worker.
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert run.returncode == 1, run.stderr
    assert run.stdout.strip() == (
        "[['planted_circle_pkg.a', 'planted_circle_pkg.b', 'planted_circle_pkg.c']]"
    )
    assert "import circle in planted_circle_pkg: planted_circle_pkg.a <-> planted_circle_pkg.b" in run.stderr


def test_a_package_without_circle_passes(tmp_path: Path) -> None:
    _package(tmp_path, "acyclic_pkg", {"a": "from acyclic_pkg import b\n", "b": "import json\n"})
    run = subprocess.run(
        [sys.executable, str(REPO / "tests/support/import_cycles.py"), "acyclic_pkg"],
        capture_output=True,
        text=True,
        timeout=120,
        env={"PYTHONPATH": str(tmp_path), "PATH": "/usr/bin:/bin"},
    )
    assert (run.returncode, run.stderr) == (0, "")
