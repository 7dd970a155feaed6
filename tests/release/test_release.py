"""Release invariants checked without building: one version everywhere, import names that are the
distribution's own, the Dockerfile's pinned base, labels and user, install.sh's Python check.

The built artifacts themselves (sdist, wheel, the smoke at the dependency floors, the chart .tgz)
are scripts/release-check's (run by scripts/test)."""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
from pathlib import Path

import sglang_sentinel
from release.versions import REPO, changelog_version, chart_app_version, package_version
from sglang_sentinel.collect.build_info import BuildInfoCollector

SOURCE_ROOTS = ("daemon", "tests", "benchmarks", "grafana")


def test_one_version_everywhere() -> None:
    version = package_version()
    assert re.fullmatch(r"\d+\.\d+\.\d+", version)
    assert sglang_sentinel.__version__ == version
    assert changelog_version() == version
    assert chart_app_version() == version
    (family,) = BuildInfoCollector().collect()
    assert family.samples[0].labels["version"] == version
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert 'version = { attr = "sglang_sentinel.__version__" }' in pyproject


def test_changelog_has_keep_a_changelog_shape() -> None:
    text = (REPO / "CHANGELOG.md").read_text(encoding="utf-8")
    assert "## [Unreleased]" in text
    entry = text.split(f"## [{package_version()}]", 1)[1].split("\n## [", 1)[0]
    assert "### " in entry  # Added / Changed / Fixed / Removed sections
    assert f"[{package_version()}]: " in text  # the entry's link


def test_shipped_import_packages_are_the_distribution_names() -> None:
    """PyPI names are unique: an import package named after our own distribution (PEP 503
    normalised, `sglang-sentinel` -> `sglang_sentinel`, the simulator under it) cannot be another
    distribution's import name, as the old `sentinel` was."""
    packages = {p.name for p in (REPO / "daemon").iterdir() if (p / "__init__.py").exists()}
    assert packages == {"sglang_sentinel", "sglang_sentinel_sim"}
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    dist = re.search(r'^name = "([^"]+)"$', pyproject, re.M)
    assert dist
    own = re.sub(r"[-_.]+", "_", dist.group(1)).lower()
    assert all(p == own or p.startswith(own + "_") for p in packages)


def test_nothing_imports_the_old_package_names() -> None:
    old = {"sentinel", "sentinel_sim"}
    found = []
    for root in SOURCE_ROOTS:
        for path in (REPO / root).rglob("*.py"):
            if "node_modules" in path.parts or ".peer" in path.parts:
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                names: list[str] = []
                if not isinstance(node, ast.Import | ast.ImportFrom):
                    continue
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                found += [f"{path.relative_to(REPO)}:{node.lineno}" for n in names if n.split(".")[0] in old]
    assert not found


def _dockerfile() -> str:
    return (REPO / "Dockerfile").read_text(encoding="utf-8")


def test_dockerfile_base_is_pinned_by_tag_and_digest() -> None:
    text = _dockerfile()
    base = re.search(r"^ARG BASE=(\S+)$", text, re.M)
    assert base
    assert re.fullmatch(r"python:3\.11\.\d+-slim-bookworm@sha256:[0-9a-f]{64}", base.group(1))
    froms = re.findall(r"^FROM (\S+)", text, re.M)
    assert froms
    assert all(f == "${BASE}" for f in froms)


def test_dockerfile_labels_and_non_root_user() -> None:
    text = _dockerfile()
    final = text.rsplit("\nFROM ", 1)[1]
    for key in ("source", "version", "licenses", "revision"):
        assert f"org.opencontainers.image.{key}=" in final
    assert 'org.opencontainers.image.licenses="Apache-2.0"' in final
    assert 'org.opencontainers.image.version="${VERSION}"' in final
    users = re.findall(r"^USER (\S+)$", final, re.M)
    assert users == ["10001:10001"]
    assert "--uid 10001 --gid 10001" in final
    build = (REPO / "scripts" / "build-image").read_text(encoding="utf-8")
    assert "--build-arg VERSION=" in build
    assert "--build-arg REVISION=" in build


def test_install_sh_refuses_an_old_python_before_touching_anything(tmp_path: Path) -> None:
    """Ubuntu 22.04's python3 is 3.10: a clear message, exit 2, nothing written (not even as root)."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    fake = bin_dir / "python3"
    fake.write_text(
        "#!/bin/sh\n"
        "# A Python 3.10: what the version probes of install.sh see.\n"
        'case "$*" in\n'
        '  *"print("*) echo 3.10 ;;\n'
        '  *"version_info < (3, 11)"*) exit 1 ;;\n'
        "esac\n"
        "exit 0\n"
    )
    fake.chmod(0o755)
    root = tmp_path / "root"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
    env.pop("PYTHON", None)
    result = subprocess.run(
        ["bash", str(REPO / "deploy" / "install.sh"), "--root", str(root)],
        capture_output=True, text=True, env=env, timeout=60, check=False,
    )  # fmt: skip
    assert result.returncode == 2, result.stderr
    assert "python3 is Python 3.10; sglang-sentinel needs 3.11 or newer" in result.stderr
    assert "PYTHON=python3.11" in result.stderr
    assert "container image" in result.stderr
    assert "Traceback" not in result.stderr
    assert list(root.iterdir()) == []


def test_install_sh_rejects_a_missing_wheel(tmp_path: Path) -> None:
    root = tmp_path / "root"
    result = subprocess.run(
        ["bash", str(REPO / "deploy" / "install.sh"), "--root", str(root), "--from", str(tmp_path / "x.whl")],
        capture_output=True, text=True, timeout=60, check=False,
        env={**os.environ, "PYTHON": sys.executable},
    )  # fmt: skip
    assert result.returncode == 2
    assert "no such wheel" in result.stderr
    assert list(root.iterdir()) == []


WORKFLOW = REPO / ".github" / "workflows" / "release.yml"


def _lint_workflow(path: Path) -> subprocess.CompletedProcess[str]:
    """GitHub's workflow schema as check-jsonschema vendors it (offline)."""
    checker = Path(sys.executable).parent / "check-jsonschema"
    return subprocess.run(
        [str(checker), "--builtin-schema", "vendor.github-workflows", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip


def test_release_workflow_is_a_valid_workflow(tmp_path: Path) -> None:
    result = _lint_workflow(WORKFLOW)
    assert result.returncode == 0, result.stdout + result.stderr
    text = WORKFLOW.read_text(encoding="utf-8")
    assert 'tags: ["v*"]' in text
    assert "id-token: write" in text  # PyPI trusted publishing
    assert "pypa/gh-action-pypi-publish" in text
    assert "scripts/release-check" in text
    assert "scripts/build-image" in text
    assert "helm push" in text
    # The lint fails on a broken workflow (a job without runs-on or steps).
    broken = tmp_path / "broken.yml"
    broken.write_text("name: x\non: push\njobs:\n  a:\n    runs-on: ubuntu-24.04\n    step: []\n")
    assert _lint_workflow(broken).returncode != 0


def test_readme_names_the_current_wheel_and_floors() -> None:
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    assert f"dist/sglang_sentinel-{package_version()}-py3-none-any.whl" in readme
    assert "Python 3.11 or newer" in readme
    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    deps = pyproject.split("dependencies = [", 1)[1].split("]\n", 1)[0]
    for name, low in re.findall(r'^    "([a-z-]+)>=([0-9.]+)', deps, re.M):
        assert f"{name} {low}" in readme, f"README does not state the floor {name} {low}"
