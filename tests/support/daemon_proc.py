"""``sentinel run`` as a subprocess, and the little a test needs to talk to it.

One helper for every test that starts the real daemon (tests/daemon, tests/prom through
:mod:`support.live_prometheus`). Import as ``from support.daemon_proc import ...``.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import httpx
from prometheus_client.parser import text_string_to_metric_families

from support.loopback import HTTP
from support.ports import free_port  # (re-exported: the daemon tests' ports)

__all__ = [
    "TOLERATED",
    "DaemonProcess",
    "Samples",
    "alive",
    "clean_env",
    "descendants",
    "free_port",
]

# What a check may raise while the daemon is still coming up: it is tried again, not failed.
TOLERATED: tuple[type[BaseException], ...] = (httpx.HTTPError, KeyError, TypeError, ValueError)

Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def clean_env(**extra: str) -> dict[str, str]:
    """This process's environment without ``SENTINEL_*`` (a developer's own settings), plus ``extra``."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    env.update(extra)
    return env


def descendants(pid: int) -> set[int]:
    """Every process below ``pid`` (the server child runs in a session of its own)."""
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def alive(pid: int) -> bool:
    """``pid`` exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


class DaemonProcess:
    """``sentinel run --config <config>`` in its own process group (the simulator is its child).

    ``port``: the exporter's (``/metrics``, ``/status.json``). ``env``: variables set on top of
    :func:`clean_env`. ``append``: add to ``log`` rather than truncate it (several daemons of one
    box share a log). ``tolerate`` and ``poll``: what :meth:`wait` retries on, and how often it
    tries; the tests differ in both and each keeps its own.
    """

    def __init__(
        self,
        config: Path,
        port: int,
        log: Path,
        *,
        env: Mapping[str, str] | None = None,
        append: bool = False,
        tolerate: tuple[type[BaseException], ...] = TOLERATED,
        poll: float = 0.2,
    ) -> None:
        self.config = config
        self.url = f"http://127.0.0.1:{port}"
        self.log = log
        self.tolerate = tolerate
        self.poll = poll
        self._out = log.open("ab" if append else "wb")
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sglang_sentinel", "run", "--config", str(config)],
            stdout=self._out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=clean_env(**dict(env or {})),
            start_new_session=True,
        )

    # -- talking to it ---------------------------------------------------------------------------

    def status(self, auth: tuple[str, str] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = HTTP.get(self.url + "/status.json", timeout=5, auth=auth).json()
        return result

    def metrics_text(self) -> str:
        return HTTP.get(self.url + "/metrics", timeout=5).text

    def metrics(self) -> Samples:
        """Every sample of ``/metrics``: (name, sorted labels) -> value."""
        out: Samples = {}
        for family in text_string_to_metric_families(self.metrics_text()):
            for s in family.samples:
                out[(s.name, tuple(sorted(s.labels.items())))] = s.value
        return out

    @staticmethod
    def value(metrics: Samples, name: str, **labels: str) -> float | None:
        return metrics.get((name, tuple(sorted(labels.items()))))

    def wait(self, what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
        """Until ``check()``; fails at once if the daemon exits, with the log's tail."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise AssertionError(
                    f"sentinel exited ({self.proc.returncode}) waiting for {what}:\n{self.tail()}"
                )
            with contextlib.suppress(*self.tolerate):
                if check():
                    return
            time.sleep(self.poll)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}:\n{self.tail()}")

    def wait_ready(self, timeout: float = 60) -> None:
        self.wait("server ready", lambda: self.status()["server"]["state"] == "ready", timeout)

    # -- its log ---------------------------------------------------------------------------------

    def text(self) -> str:
        return self.log.read_text(errors="replace")

    def tail(self) -> str:
        return "\n".join(self.text().splitlines()[-40:])

    def events(self, name: str) -> list[dict[str, Any]]:
        """The JSON log records of event ``name`` (``[log] format = "json"``)."""
        out = []
        for line in self.text().splitlines():
            start = line.find("{")
            if start < 0:
                continue
            try:
                record = json.loads(line[start:])
            except ValueError:
                continue
            if record.get("event") == name:
                out.append(record)
        return out

    # -- ending it -------------------------------------------------------------------------------

    def stop(self, timeout: float = 30) -> int:
        """SIGTERM, as systemd stops it; the daemon stops its server child. Its exit status."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            return self.proc.wait(timeout)
        finally:
            self.kill()

    def kill(self) -> None:
        """Teardown: whatever is left, the server child included, is SIGKILLed.

        SIGCONT first: a test may have left the group SIGSTOPped.
        """
        left = descendants(self.proc.pid) if self.proc.poll() is None else set()
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGCONT)
                os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=10)
        for pid in left:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        if not self._out.closed:
            self._out.close()
