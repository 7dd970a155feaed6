"""docs/architecture.md is the map of the code: it names every package and module of both packages,
every command, and quotes the layer contract as pyproject.toml has it."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MAP = REPO / "docs" / "architecture.md"


def _named(text: str) -> set[str]:
    return set(re.findall(r"`([^`\s]+)`", text))


def missing_from_map(text: str, root: Path) -> list[str]:
    """Packages (``name/``) and modules (``name.py``, in a package's table by their path in it)."""
    named = _named(text)
    missing = []
    for top in ("sglang_sentinel", "sglang_sentinel_sim"):
        base = root / "daemon" / top
        for path in sorted(base.rglob("*.py")):
            rel = path.relative_to(base)
            if rel.parts[0] == "__init__.py":
                continue
            if path.name == "__init__.py":
                package = "/".join(rel.parts[:-1]) + "/"
                if f"{rel.parts[-2]}/" not in named and package not in named:
                    missing.append(f"{top}/{package}")
                continue
            inner = "/".join(rel.parts[1:]) if len(rel.parts) > 1 else rel.name
            if inner not in named:
                missing.append(f"{top}/{rel}")
    return missing


def test_every_package_and_module_is_on_the_map() -> None:
    assert missing_from_map(MAP.read_text(encoding="utf-8"), REPO) == []


def test_a_new_module_missing_from_the_map_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "daemon" / "sglang_sentinel" / "newpkg"
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "part.py").write_text("")
    (tmp_path / "daemon" / "sglang_sentinel_sim").mkdir()
    assert missing_from_map("", tmp_path) == ["sglang_sentinel/newpkg/", "sglang_sentinel/newpkg/part.py"]
    assert missing_from_map("`newpkg/` `part.py`", tmp_path) == []


def test_every_command_is_on_the_map() -> None:
    from sglang_sentinel.cli import COMMANDS

    text = MAP.read_text(encoding="utf-8")
    for module in COMMANDS:
        name = module.rsplit(".", 1)[1]
        assert f"`sentinel {name}`" in text, name
    assert "`sentinel sim`" in text


@pytest.mark.parametrize(
    "layer",
    tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"][1]["layers"],
)
def test_the_layer_contract_is_quoted_from_pyproject(layer: str) -> None:
    assert f'"{layer}"' in MAP.read_text(encoding="utf-8")


def test_the_quoted_contract_is_pyprojects_importlinter_section_verbatim() -> None:
    """The map's toml block is [tool.importlinter] and its contracts as pyproject.toml has them,
    nothing more (no neighbouring sections) and nothing less."""
    lines = (REPO / "pyproject.toml").read_text(encoding="utf-8").splitlines()
    start = lines.index("[tool.importlinter]")
    later = range(start + 1, len(lines))
    end = next((i for i in later if lines[i].startswith("[") and "importlinter" not in lines[i]), len(lines))
    section = "\n".join(lines[start:end]).rstrip() + "\n"
    text = MAP.read_text(encoding="utf-8")
    body = text.split("## Layer contract", 1)[1].split("```toml\n", 1)[1].split("```\n", 1)[0]
    assert body == section
