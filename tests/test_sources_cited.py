"""The product cites only what its users have: a file in the repository or a public thing.

No line of daemon/, docs/ or README.md names a path of the machine it was written on (``/work/``,
``/root/``, ``/home/``, a pytest or job temp directory; in the code any ``/tmp/`` path), a
reference document that is not in the repository (``reference §1.1``, ``monitoring.md §1.2``), or
a bare issue/PR number: an upstream issue is written ``owner/repo#N`` or as its URL, so a reader
can open it.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]

_MACHINE_PATH = re.compile(r"/work/|/root/|/home/\w|/tmp/(?:pytest-|bash_jobs|tmp\w{4})")
_CODE_TMP = re.compile(r"/tmp/")
_PRIVATE_DOC = re.compile(r"\breference (?:\w+\.md )?§|\bshared reference\b|\bmonitoring\.md\b")
# "#N" not preceded by a word, a path or a colon (owner/repo#N, a URL's fragment, a CSS colour).
_BARE_NUMBER = re.compile(r"(?<![\w/.:-])#\d+\b|\b(?:issue|PR|pull request)s? \d+\b", re.IGNORECASE)


def _files() -> list[Path]:
    found = [REPO / "README.md"]
    for top, exts in (("daemon", (".py", ".toml", ".html", ".json", ".md")), ("docs", (".md",))):
        for path in sorted((REPO / top).rglob("*")):
            if path.suffix in exts and path.is_file() and ".egg-info" not in str(path):
                found.append(path)
    return found


def _workshop_files() -> list[Path]:
    """What is not shipped but read by whoever works on the project: the tests (their captured
    samples aside: those are real output, paths of other people's machines included), benchmarks,
    scripts, deploy files, dashboards' generator, the CHANGELOG."""
    found = [REPO / "CHANGELOG.md"]
    for top in ("tests", "benchmarks", "scripts", "deploy", "grafana", ".github", ".ci"):
        for path in sorted((REPO / top).rglob("*")):
            parts = set(path.relative_to(REPO).parts)
            if (
                path.is_file()
                and path.suffix in (".py", ".md", ".sh", ".toml", ".yml", ".yaml", ".tpl", "")
                and not parts & {"node_modules", "samples", "data", "__pycache__"}
                and path != Path(__file__).resolve()
            ):
                found.append(path)
    return found


def offending_lines(path: Path, root: Path = REPO, *, product: bool = True) -> list[str]:
    code = product and path.suffix != ".md"
    out = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        hits = [p for p in (_MACHINE_PATH, _PRIVATE_DOC, _BARE_NUMBER) if p.search(line)]
        if code and _CODE_TMP.search(line):
            hits.append(_CODE_TMP)
        if hits:
            out.append(f"{path.relative_to(root)}:{n}: {line.strip()[:160]}")
    return out


def test_every_source_is_the_repository_or_public() -> None:
    files = _files()
    assert len(files) > 100  # the walk found the code
    bad = [hit for path in files for hit in offending_lines(path)]
    assert bad == []


def test_the_workshop_cites_no_private_source_either() -> None:
    """Tests, benchmarks and scripts may write to /tmp (they run here), but cite as the product does."""
    files = _workshop_files()
    assert len(files) > 100
    bad = [hit for path in files for hit in offending_lines(path, product=False)]
    assert bad == []


@pytest.mark.parametrize(
    "line",
    [
        "# the deployment finding (issue #13)",
        "see /work/shared/reference/sglang.md",
        "# flags as in reference §1.1",
        "# measured (monitoring.md §1.2)",
        "fixed by #2716",
        "written in /tmp/pytest-of-root/x",
        "state_dir = '/tmp/sentinel'",
        "see PR 29580",
    ],
)
def test_a_private_source_is_found(tmp_path: Path, line: str) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(f"x = 1\n{line}\n")
    assert [hit.split(": ", 1)[1] for hit in offending_lines(planted, tmp_path)] == [line.strip()]


@pytest.mark.parametrize(
    "line",
    [
        "# sgl-project/sglang#26087 (v0.5.12)",
        "# https://github.com/prometheus/client_python/issues/1177",
        "body{color:#222}",
        "# else /tmp, as SGLang",
    ],
)
def test_a_public_source_passes(tmp_path: Path, line: str) -> None:
    planted = tmp_path / "planted.py"
    planted.write_text(f"{line}\n")
    assert offending_lines(planted, tmp_path) == []
