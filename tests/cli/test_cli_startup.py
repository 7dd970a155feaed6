"""`sentinel --help` and every subcommand's parser stay cheap to build: no engine, no HTTP stack.

`sglang_sentinel.cli` imports every subcommand module to build its parser (the built-in ones and those of
the ``sentinel.commands`` entry points, such as ``sglang_sentinel_sim.command``), which runs each
package's ``__init__``; those export their public names lazily (`sglang_sentinel.lazy`). These tests keep
it so, and check that each lazy table still names every exported name.
"""

from __future__ import annotations

import ast
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

import sglang_sentinel
import sglang_sentinel_sim

PACKAGE_DIR = Path(sglang_sentinel.__file__).parent
# The simulator is a top-level package of its own, with the same lazy __init__.
LAZY_PACKAGES = [
    *sorted(
        f"sglang_sentinel.{init.parent.name}"
        for init in PACKAGE_DIR.glob("*/__init__.py")
        if "lazy_exports(" in init.read_text(encoding="utf-8")
    ),
    "sglang_sentinel_sim",
]
# What a parser must not import: the HTTP clients and servers, the load engine and the simulator
# (each a few hundred milliseconds on the target hosts), NVML and the plotting stack.
HEAVY = (
    "aiohttp",
    "httptools",
    "httpx",
    "uvloop",
    "prometheus_client",
    "pynvml",
    "matplotlib",
    "numpy",
    "sglang_sentinel.load.engine",
    "sglang_sentinel.load.transport",
    "sglang_sentinel_sim.server",
    "sglang_sentinel_sim.engine",
)


def _clean_env() -> dict[str, str]:
    return {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}


def test_building_the_parser_imports_nothing_heavy() -> None:
    code = (
        "import sys, sglang_sentinel.cli; sglang_sentinel.cli.build_parser();"
        f"print(sorted(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=_clean_env()
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_help_lists_every_subcommand() -> None:
    from importlib.metadata import entry_points

    from sglang_sentinel.cli import COMMANDS, ENTRY_POINT_GROUP

    out = subprocess.run(
        [sys.executable, "-m", "sglang_sentinel", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        env=_clean_env(),
    )
    assert out.returncode == 0, out.stderr
    assert out.stderr == ""
    for name in ("sim", "bench", "run"):
        assert f"    {name} " in out.stdout
    assert len(COMMANDS) >= 7
    # `sentinel sim` comes from the simulator's entry point, not from a name in COMMANDS.
    assert [ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)] == ["sglang_sentinel_sim.command"]
    assert "sglang_sentinel_sim.command" not in COMMANDS


@pytest.mark.parametrize(
    "argv",
    [["-m", "sglang_sentinel", "sim", "--help"], ["-m", "sglang_sentinel_sim", "--help"]],
    ids=" ".join,
)
def test_the_simulator_runs_as_a_sentinel_subcommand_and_on_its_own(argv: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, *argv], capture_output=True, text=True, timeout=60, env=_clean_env()
    )
    assert out.returncode == 0, out.stderr
    assert "--ready-file" in out.stdout
    assert "--fault SPEC" in out.stdout


def test_lazy_packages_are_found() -> None:
    assert {"sglang_sentinel.load", "sglang_sentinel.calibrate"} <= set(LAZY_PACKAGES)
    assert "lazy_exports(" in Path(sglang_sentinel_sim.__file__).read_text(encoding="utf-8")


def _type_checking_imports(package: str) -> dict[str, str]:
    """Name -> module, from the package's ``if TYPE_CHECKING:`` imports (what type checkers see)."""
    init = Path(importlib.import_module(package).__file__ or "")
    tree = ast.parse(init.read_text(encoding="utf-8"))
    names: dict[str, str] = {}
    for node in tree.body:
        if isinstance(node, ast.If) and ast.unparse(node.test) == "TYPE_CHECKING":
            for stmt in node.body:
                if isinstance(stmt, ast.ImportFrom) and stmt.module:
                    names.update({alias.asname or alias.name: stmt.module for alias in stmt.names})
    return names


@pytest.mark.parametrize("package", LAZY_PACKAGES)
def test_every_exported_name_resolves_to_what_type_checkers_see(package: str) -> None:
    module = importlib.import_module(package)
    exported = list(module.__all__)
    assert len(exported) == len(set(exported))
    declared = _type_checking_imports(package)
    # The same names for type checkers (TYPE_CHECKING imports) and at run time (__all__).
    assert sorted(declared) == sorted(exported)
    for name in exported:
        value = getattr(module, name)
        assert value is getattr(importlib.import_module(declared[name]), name), name
    with pytest.raises(AttributeError, match="no attribute 'not_exported'"):
        _ = module.not_exported


@pytest.mark.slow
def test_commands_of_the_entry_point_group_are_registered_after_the_built_in_ones(tmp_path: Path) -> None:
    """A distribution on the path with a ``sentinel.commands`` entry point adds its subcommand."""
    (tmp_path / "hello_cmd.py").write_text(
        "def register(sub):\n"
        "    p = sub.add_parser('hello', help='say hello')\n"
        "    p.set_defaults(handler=lambda args: print('hello from a plugin') or 7)\n"
        "def register_config(sub):\n"
        "    raise AssertionError('a plugin must not replace a built-in command')\n"
    )
    dist = tmp_path / "hello_cmd-1.0.dist-info"
    dist.mkdir()
    (dist / "METADATA").write_text("Metadata-Version: 2.1\nName: hello-cmd\nVersion: 1.0\n")
    (dist / "entry_points.txt").write_text(
        "[sentinel.commands]\nhello = hello_cmd\nconfig = hello_cmd:register_config\n"
        "broken = no_such_module_anywhere\n"
    )
    env = {**_clean_env(), "PYTHONPATH": str(tmp_path)}
    run = [sys.executable, "-m", "sglang_sentinel"]
    out = subprocess.run([*run, "--help"], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    # Command lines are indented by four; wrapped help text by more.
    listed = [
        line.split()[0]
        for line in out.stdout.splitlines()
        if line.startswith("    ") and not line.startswith("     ")
    ]
    # Plugins (this one and the simulator's) come after every built-in command, in name order.
    assert listed[-2:] == ["hello", "sim"]
    assert listed.count("config") == 1
    assert "broken" not in listed
    # A plugin that cannot be imported is one line on stderr, not a traceback and not a dead CLI.
    assert out.stderr.startswith("sentinel: command 'broken' (no_such_module_anywhere) not loaded: ")
    assert "Traceback" not in out.stderr
    out = subprocess.run([*run, "hello"], capture_output=True, text=True, timeout=60, env=env)
    assert (out.returncode, out.stdout) == (7, "hello from a plugin\n"), out.stderr
