"""Render a local HTML page in headless Chromium: its DOM after scripts ran, and a screenshot.

Shared by the tests of every page sentinel writes (calibration report, status page). Import as
``from support.headless_chromium import ...``: ``tests/`` is on ``sys.path`` through the rootdir
conftest. Chromium is optional on a developer machine, so tests mark themselves with
:data:`requires_chromium`; scripts/test installs it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

__all__ = ["CHROMIUM", "dump_dom", "requires_chromium", "screenshot"]

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")

# No network, no first-run UI, no sandbox (containers lack the namespaces it needs).
_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
)
_TIMEOUT_SECONDS = 90

requires_chromium = pytest.mark.skipif(
    CHROMIUM is None, reason="chromium is not installed (scripts/test installs it)"
)


def _run(extra: list[str], page: Path, profile: Path, virtual_time_ms: int) -> str:
    assert CHROMIUM is not None
    # A profile per test: parallel runs never share one, and the virtual-time budget lets the
    # page's load handlers run before the DOM is dumped or the picture taken.
    argv = [CHROMIUM, *_FLAGS, f"--user-data-dir={profile}", f"--virtual-time-budget={virtual_time_ms}"]
    run = subprocess.run(
        [*argv, *extra, page.as_uri()],
        capture_output=True,
        text=True,
        timeout=_TIMEOUT_SECONDS,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


def dump_dom(page: Path, *, profile: Path, virtual_time_ms: int) -> str:
    """The serialized DOM of ``page`` once loaded."""
    return _run(["--dump-dom"], page, profile, virtual_time_ms)


def screenshot(page: Path, shot: Path, *, profile: Path, virtual_time_ms: int, window: str) -> Path:
    """Write a PNG of ``page`` to ``shot``, the window ``window`` ("WIDTH,HEIGHT") pixels large."""
    _run([f"--window-size={window}", f"--screenshot={shot}"], page, profile, virtual_time_ms)
    assert shot.is_file()
    return shot
