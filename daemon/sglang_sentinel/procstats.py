"""The daemon's own footprint: resident memory, open descriptors, threads, asyncio tasks.

Shown in ``/status.json`` (``daemon.process``) so a leak is visible while it grows; the soak
benchmark (benchmarks/soak.py) samples the same figures from outside through that document.
"""

from __future__ import annotations

import asyncio
import os
import threading
from pathlib import Path

__all__ = ["process_stats"]

_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def _rss_bytes() -> int | None:
    try:
        return int(Path("/proc/self/statm").read_text().split()[1]) * _PAGE
    except (OSError, ValueError, IndexError):
        return None


def _fds() -> int | None:
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # minus the descriptor listdir itself holds
    except OSError:
        return None


def _threads() -> int:
    # The kernel's count includes native threads (NVML, the uvloop resolver) that threading misses.
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Threads:"):
                return int(line.split()[1])
    except (OSError, ValueError):
        pass
    return threading.active_count()


def process_stats() -> dict[str, int | None]:
    """Figures of this process; ``asyncio_tasks`` only when called on a running event loop."""
    try:
        tasks: int | None = len(asyncio.all_tasks())
    except RuntimeError:
        tasks = None
    return {"rss_bytes": _rss_bytes(), "fds": _fds(), "threads": _threads(), "asyncio_tasks": tasks}
