"""What the in-process supervisor tests read of a Supervisor and its state dir: one series and the
known-good records (tests/supervise/test_fallback_*.py, test_supervisor_modes.py); and the
known-good record the fallback tests seed. (Their waits: support/waits.py.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry

from sglang_sentinel.supervise import Supervisor
from sglang_sentinel.supervise.knowngood import KNOWN_GOOD_FILE


def value(sup: Supervisor, name: str, **labels: str) -> float | None:
    reg = CollectorRegistry()
    reg.register(sup.collector())
    return reg.get_sample_value(name, labels)


def records(state: Path) -> list[dict[str, Any]]:
    """The known-good records of ``state`` (none while the file is not there or half-written)."""
    try:
        out: list[dict[str, Any]] = json.loads((state / KNOWN_GOOD_FILE).read_text())["records"]
    except (FileNotFoundError, ValueError):
        return []
    return out


def known_good_record(flags: list[list[Any]], good_at: float, *, profile: str = "fastsim") -> dict[str, Any]:
    """A known-good record as the daemon writes it (supervise/knowngood.py): the simulator launched
    with ``flags`` (``[[flag, [values]], ...]``, an SGLang 0.5.9 one), good at ``good_at``."""
    return {
        "argv_hash": "0123456789abcdef",
        "flags": flags,
        "argv": ["python", "-m", "sglang_sentinel_sim", *(t for f, v in flags for t in (f, *v))],
        "sglang_version": "0.5.9",
        "driver_version": None,
        "gpu_model": None,
        "first_good": good_at,
        "last_good": good_at,
        "profile": profile,
    }
