"""What the in-process fallback tests read of a Supervisor and its state dir: one series, the
known-good records, and a wait for a condition (tests/supervise/test_fallback_*.py)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from sglang_sentinel.supervise import Supervisor
from sglang_sentinel.supervise.knowngood import KNOWN_GOOD_FILE


def value(sup: Supervisor, name: str, **labels: str) -> float | None:
    reg = CollectorRegistry()
    reg.register(sup.collector())
    return reg.get_sample_value(name, labels)


async def until(cond: Callable[[], bool], timeout_s: float = 60.0, what: str = "") -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what or cond}")
        await asyncio.sleep(0.05)


def records(state: Path) -> list[dict[str, Any]]:
    """The known-good records of ``state`` (none while the file is not there or half-written)."""
    try:
        out: list[dict[str, Any]] = json.loads((state / KNOWN_GOOD_FILE).read_text())["records"]
    except (FileNotFoundError, ValueError):
        return []
    return out
