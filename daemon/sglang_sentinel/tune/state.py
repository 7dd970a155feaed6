"""The tune's document on disk: ``<state_dir>/tune/<id>/state.json``, replaced atomically.

The document is the ``sentinel.tune/v1`` result (docs/tune.md, the report renders it) plus two
keys of the tune's own: ``fingerprint`` (what the tune measures: base argv, space and the
settings that shape the figures; the same config finds its unfinished tune by it) and
``progress`` (the stage, the round, the trials still queued for it). It is written after every
phase of every trial, so a SIGKILL loses at most the server life in progress.
"""

from __future__ import annotations

import hashlib
import json
import os
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from sglang_sentinel.atomic import atomic_write_bytes

__all__ = [
    "SCHEMA",
    "StateFileError",
    "find_unfinished",
    "fingerprint",
    "load_doc",
    "new_tune_id",
    "now_iso",
    "save_doc",
    "tune_root",
]

SCHEMA = "sentinel.tune/v1"
STATE_FILE = "state.json"


class StateFileError(Exception):
    """A state file that cannot be read or written (the message names it)."""


def now_iso(ts: float | None = None) -> str:
    t = datetime.fromtimestamp(time.time() if ts is None else ts, UTC)
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def new_tune_id() -> str:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{os.urandom(2).hex()}"


def tune_root(state_dir: Path) -> Path:
    return state_dir / "tune"


def fingerprint(parts: dict[str, Any]) -> str:
    blob = json.dumps(parts, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:16]


def save_doc(directory: Path, doc: dict[str, Any]) -> Path:
    path = directory / STATE_FILE
    try:
        directory.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, json.dumps(doc, indent=1).encode() + b"\n")
    except OSError as exc:
        raise StateFileError(f"cannot write {path}: {exc.strerror or exc}") from None
    return path


def load_doc(directory: Path) -> dict[str, Any]:
    path = directory / STATE_FILE
    try:
        doc = json.loads(path.read_text())
    except FileNotFoundError:
        raise StateFileError(f"no tune state at {path}") from None
    except (OSError, ValueError) as exc:
        raise StateFileError(f"cannot read {path}: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA or not isinstance(doc.get("trials"), list):
        raise StateFileError(f"{path} is not a {SCHEMA} document")
    return doc


def find_unfinished(state_dir: Path, fp: str) -> str | None:
    """The newest unfinished tune with this fingerprint (its id), if any."""
    root = tune_root(state_dir)
    if not root.is_dir():
        return None
    for entry in sorted(root.iterdir(), reverse=True):  # ids start with a UTC stamp
        try:
            doc = load_doc(entry)
        except StateFileError:
            continue
        if doc.get("fingerprint") == fp and doc.get("finished_at") is None:
            return entry.name
    return None
