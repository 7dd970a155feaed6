"""The restart history on disk: the crash-loop limit survives a restart of sentinel itself.

A daemon that is itself restarted over and over (systemd ``Restart=``) would otherwise start
every server with a clean slate and never reach ``failed``. The history is kept per launch
config: a different config hash starts clean.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from sglang_sentinel.atomic import atomic_write_bytes
from sglang_sentinel.log import get_logger
from sglang_sentinel.supervise.backoff import RestartPolicy

__all__ = ["HISTORY_FILE", "RestartHistory"]

_log = get_logger(__name__)

HISTORY_FILE = "supervisor-restarts.json"


class RestartHistory:
    """Reads and writes one policy's history; ``path`` None keeps it in memory only."""

    def __init__(self, path: Path | None, policy: RestartPolicy) -> None:
        self.path = path
        self._policy = policy

    def restore(self, config_hash: str) -> None:
        path = self.path
        if path is None:
            return
        try:
            data = json.loads(path.read_text())
        except FileNotFoundError:
            return
        except (OSError, ValueError) as exc:
            _log.warning("restart_history_unreadable", path=str(path), error=str(exc))
            return
        if not isinstance(data, dict) or data.get("config_hash") != config_hash:
            return  # a different launch config starts with a clean slate
        self._policy.restore(data, time.monotonic(), time.time())
        _log.info(
            "restart_history_restored",
            restarts_in_window=self._policy.restarts_in_window(time.monotonic()),
        )

    def save(self, config_hash: str) -> None:
        path = self.path
        if path is None:
            return
        data = {"config_hash": config_hash, **self._policy.snapshot(time.monotonic(), time.time())}
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(path, json.dumps(data).encode())
        except OSError as exc:
            _log.warning("restart_history_save_failed", path=str(path), error=str(exc))
