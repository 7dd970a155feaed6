"""Render a local HTML page in headless Chromium: its DOM after scripts ran, and a screenshot.

Shared by the tests of every page sentinel writes (calibration report, status page). Import as
``from support.headless_chromium import ...``: ``tests/`` is on ``sys.path`` through the rootdir
conftest. Chromium is optional on a developer machine, so tests mark themselves with
:data:`requires_chromium`; scripts/test installs it.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

__all__ = [
    "CHROMIUM",
    "PageCheck",
    "check_report_page",
    "dump_dom",
    "dump_dom_and_screenshot",
    "requires_chromium",
    "screenshot",
]

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
    return _run_full(extra, page, profile, virtual_time_ms).stdout


def _run_full(
    extra: list[str], page: Path, profile: Path, virtual_time_ms: int
) -> subprocess.CompletedProcess[str]:
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
    return run


def dump_dom(page: Path, *, profile: Path, virtual_time_ms: int) -> str:
    """The serialized DOM of ``page`` once loaded."""
    return _run(["--dump-dom"], page, profile, virtual_time_ms)


def screenshot(page: Path, shot: Path, *, profile: Path, virtual_time_ms: int, window: str) -> Path:
    """Write a PNG of ``page`` to ``shot``, the window ``window`` ("WIDTH,HEIGHT") pixels large."""
    _run([f"--window-size={window}", f"--screenshot={shot}"], page, profile, virtual_time_ms)
    assert shot.is_file()
    return shot


def dump_dom_and_screenshot(
    page: Path, shot: Path, *, profile: Path, virtual_time_ms: int, window: str
) -> str:
    """Both of the above from one Chromium run (a start costs a second or more on a busy box):
    the serialized DOM of ``page`` once loaded, and its PNG written to ``shot``."""
    dom = _run(
        [f"--window-size={window}", f"--screenshot={shot}", "--dump-dom"], page, profile, virtual_time_ms
    )
    assert shot.is_file()
    return dom


# Appended to a copy of a report: once everything has loaded, record in the DOM how many images
# there are, how many decoded, and every error event (a resource that failed, a script error).
_PROBE = """<script>
const errors = [];
window.addEventListener("error", e => errors.push(e.message || (e.target && e.target.src) || "error"), true);
window.addEventListener("load", () => {
  const imgs = [...document.images];
  document.body.setAttribute("data-images", imgs.length);
  document.body.setAttribute("data-loaded", imgs.filter(i => i.complete && i.naturalWidth > 0).length);
  document.body.setAttribute("data-errors", errors.length);
});
</script>"""
_CONSOLE = re.compile(r":CONSOLE[:(]\d*\)?\]? ?(.*)")


@dataclass(frozen=True)
class PageCheck:
    dom: str
    images: int  # <img> elements
    loaded: int  # of them, decoded with a size
    errors: int  # error events (failed resources, script errors)
    console: list[str]  # console messages Chromium logged (a report has no script: none expected)


def check_report_page(page: Path, *, profile: Path, virtual_time_ms: int = 5000) -> PageCheck:
    """Load a copy of ``page`` with the probe in headless Chromium and read back what it saw."""
    probe = page.with_name(page.stem + ".probe.html")
    probe.write_text(
        page.read_text(encoding="utf-8").replace("</body>", _PROBE + "</body>"), encoding="utf-8"
    )
    run = _run_full(["--dump-dom", "--enable-logging=stderr", "--v=0"], probe, profile, virtual_time_ms)
    m = re.search(r'data-images="(\d+)" data-loaded="(\d+)" data-errors="(\d+)"', run.stdout)
    assert m is not None, run.stdout[:500]
    console = [c.group(1) for line in run.stderr.splitlines() if (c := _CONSOLE.search(line))]
    return PageCheck(run.stdout, int(m.group(1)), int(m.group(2)), int(m.group(3)), console)
