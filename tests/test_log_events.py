"""Every structured log event is one snake_case literal (``server_process_started``), so a log
query or an alert on an event name matches it exactly, and the name never carries values (they go
in key-value fields)."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

DAEMON = Path(__file__).resolve().parent.parent / "daemon"
PACKAGES = ("sglang_sentinel", "sglang_sentinel_sim")
LEVELS = frozenset({"debug", "info", "warning", "warn", "error", "exception", "critical", "fatal", "msg"})
SNAKE = re.compile(r"[a-z][a-z0-9]*(?:_[a-z0-9]+)*")


def _logger_names(tree: ast.Module) -> set[str]:
    """Names bound to ``get_logger(...)`` (``_log = get_logger(__name__)``) anywhere in a module."""
    names = {"_log", "log", "logger"}
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Call):
            func = node.value.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            if called in ("get_logger", "getLogger"):
                names.update(t.id for t in node.targets if isinstance(t, ast.Name))
    return names


def _is_logger(node: ast.expr, names: set[str]) -> bool:
    if isinstance(node, ast.Name):
        return node.id in names
    if isinstance(node, ast.Attribute):  # self._log
        return node.attr in names
    if isinstance(node, ast.Call):  # get_logger(__name__).info(...), _log.bind(...).info(...)
        func = node.func
        if isinstance(func, ast.Name):
            return func.id in ("get_logger", "getLogger")
        if isinstance(func, ast.Attribute):
            return func.attr in ("get_logger", "getLogger") or (
                func.attr in ("bind", "new") and _is_logger(func.value, names)
            )
    return False


def log_calls(source: str) -> list[tuple[int, ast.expr | None]]:
    """(line, first argument) of every logger call in ``source``."""
    tree = ast.parse(source)
    names = _logger_names(tree)
    found: list[tuple[int, ast.expr | None]] = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Call)
            and isinstance(node.func, ast.Attribute)
            and node.func.attr in LEVELS
            and _is_logger(node.func.value, names)
        ):
            found.append((node.lineno, node.args[0] if node.args else None))
    return found


def bad_events(source: str) -> list[str]:
    bad = []
    for line, arg in log_calls(source):
        if not (isinstance(arg, ast.Constant) and isinstance(arg.value, str) and SNAKE.fullmatch(arg.value)):
            bad.append(f"{line}: {ast.unparse(arg) if arg is not None else '(no event)'}")
    return bad


@pytest.mark.slow
def test_every_log_event_is_a_snake_case_literal() -> None:
    problems = []
    calls = 0
    for package in PACKAGES:
        for path in sorted((DAEMON / package).rglob("*.py")):
            source = path.read_text(encoding="utf-8")
            calls += len(log_calls(source))
            problems += [f"{path.relative_to(DAEMON)}:{p}" for p in bad_events(source)]
    assert problems == []
    assert calls > 50  # the walk found the daemon's log calls (it would pass vacuously otherwise)


def test_the_walk_rejects_what_the_rule_forbids() -> None:
    source = """
from sglang_sentinel.log import get_logger
_log = get_logger(__name__)
other = get_logger("x")
def f(self, name):
    _log.info("server_process_started", pid=1)
    _log.warning("server process started")
    _log.error(f"crash {name}")
    other.exception("Launch_Failed")
    get_logger(__name__).info("bench.flush_cache_failed")
    _log.bind(a=1).info("two words")
    self._log.debug("ok_name")
    self.log.main("SGLang line, not an event")
"""
    assert len(log_calls(source)) == 7
    assert [b.split(":", 1)[0] for b in bad_events(source)] == ["7", "8", "9", "10", "11"]
