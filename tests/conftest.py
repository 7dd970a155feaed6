"""Suite-wide fixtures. ``sim_factory`` starts ``sentinel sim`` subprocesses on free ports.

Usage::

    def test_x(sim_factory):
        sim = sim_factory("--enable-metrics", "--speed", "50")
        httpx.get(sim.base_url + "/health")   # 200: sim_factory waited for readiness
        sim.control("/summary")               # ground truth from the control API

    def test_slow(sim_factory):
        sim = sim_factory("--fault", "slow_start:refuse=5", wait_ready=False)

Defaults added unless the caller passes them: ``--speed 100`` and ``--lifetime 600`` (a safety net
so that no simulator outlives a crashed test run). Every simulator runs in its own session and
its whole process group is SIGKILLed at teardown. Logs are kept in files under ``tmp_path``:
``sim.stderr_text()`` (SGLang's log lines) and ``sim.stdout_text()`` (access lines).
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import pytest

REPO_ROOT = Path(__file__).resolve().parent.parent


@dataclass
class SimProcess:
    """A running ``sentinel sim`` subprocess."""

    process: subprocess.Popen[bytes]
    args: list[str]
    info: dict[str, Any]
    stdout_path: Path
    stderr_path: Path
    _logs: list[Any] = field(default_factory=list, repr=False)

    @property
    def base_url(self) -> str:
        return str(self.info["base_url"])

    @property
    def control_url(self) -> str:
        return str(self.info["control_url"])

    @property
    def port(self) -> int:
        return int(self.info["port"])

    @property
    def pid(self) -> int:
        return self.process.pid

    def stderr_text(self) -> str:
        return self.stderr_path.read_text(encoding="utf-8", errors="replace")

    def stdout_text(self) -> str:
        return self.stdout_path.read_text(encoding="utf-8", errors="replace")

    def control(self, path: str, method: str = "GET", json_body: Any = None, timeout: float = 10.0) -> Any:
        """Call the control API; return the decoded JSON (raises on HTTP errors)."""
        resp = httpx.request(method, self.control_url + path, json=json_body, timeout=timeout)
        resp.raise_for_status()
        return resp.json()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Poll GET /health until 200 (the server is fired up and ready to roll)."""
        deadline = time.monotonic() + timeout
        last: str = "no answer"
        headers = {}
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"simulator exited with {self.process.returncode}: {self.stderr_text()[-2000:]}"
                )
            try:
                resp = httpx.get(self.base_url + "/health", timeout=5.0, headers=headers)
                if resp.status_code == 200:
                    return
                last = f"HTTP {resp.status_code}"
            except httpx.HTTPError as exc:
                last = type(exc).__name__
            time.sleep(0.02)
        raise TimeoutError(
            f"simulator not ready after {timeout} s (last: {last}): {self.stderr_text()[-2000:]}"
        )

    def wait_exit(self, timeout: float = 30.0) -> int:
        return self.process.wait(timeout=timeout)

    def kill(self) -> None:
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL cannot be ignored; bounded anyway
            self.process.wait(timeout=10)
        for f in self._logs:
            f.close()
        self._logs.clear()


def _has(args: tuple[str, ...], flag: str) -> bool:
    return any(a == flag or a.startswith(flag + "=") for a in args)


@pytest.fixture
def sim_factory(tmp_path: Path) -> Iterator[Callable[..., SimProcess]]:
    started: list[SimProcess] = []

    def start(
        *args: str, wait_ready: bool = True, timeout: float = 30.0, env: dict[str, str] | None = None
    ) -> SimProcess:
        n = len(started)
        ready_file = tmp_path / f"sim{n}.ready.json"
        extra: list[str] = []
        if not _has(args, "--speed"):
            extra += ["--speed", "100"]
        if not _has(args, "--lifetime"):
            extra += ["--lifetime", "600"]
        cmd = [
            sys.executable,
            "-m",
            "sentinel",
            "sim",
            "--port",
            "0",
            "--ready-file",
            str(ready_file),
            *extra,
            *args,
        ]
        out_path = tmp_path / f"sim{n}.stdout"
        err_path = tmp_path / f"sim{n}.stderr"
        out = out_path.open("wb")
        err = err_path.open("wb")
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            cwd=REPO_ROOT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while not ready_file.exists():
            if proc.poll() is not None:
                out.close()
                err.close()
                raise RuntimeError(
                    f"sentinel sim exited with {proc.returncode} before binding: "
                    f"{err_path.read_text(errors='replace')[-2000:]}"
                )
            if time.monotonic() > deadline:
                proc.kill()
                raise TimeoutError(f"sentinel sim did not bind within {timeout} s")
            time.sleep(0.01)
        info = json.loads(ready_file.read_text(encoding="utf-8"))
        sim = SimProcess(proc, cmd, info, out_path, err_path, [out, err])
        started.append(sim)
        if wait_ready:
            sim.wait_ready(max(1.0, deadline - time.monotonic()))
        return sim

    yield start
    for sim in started:
        sim.kill()


# --- opt-in peer tests (helper PEER): `pytest --run-peer` runs tests marked `peer` -----------------
# pytest_addoption only works in the rootdir conftest or a plugin, hence this small block here.
def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--run-peer",
        action="store_true",
        default=False,
        help="run tests marked `peer` (SGLang's bench_serving against the simulator; needs "
        "benchmarks/peer_setup.sh)",
    )


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--run-peer"):
        return
    skip = pytest.mark.skip(reason="peer test: opt in with --run-peer")
    for item in items:
        if item.get_closest_marker("peer") is not None:  # not `in keywords`: that has dir names too
            item.add_marker(skip)
