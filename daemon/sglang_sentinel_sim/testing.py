"""The simulator as a subprocess, for tests and benchmarks (the way ``structlog.testing`` ships helpers).

One way to start it, used by the test suite's ``sim_factory`` and by every benchmark::

    from sglang_sentinel_sim.testing import spawn_sim

    with spawn_sim("--speed", "50", "--enable-metrics") as sim:
        httpx.get(sim.base_url + "/health")    # 200: spawn_sim waited for readiness
        sim.control("/summary")                # ground truth from the control API

``python -m sglang_sentinel_sim --port 0 --ready-file PATH ARGS...`` runs in its own session (so that the
whole process group can be killed), with its stdout and stderr in files (``sim.stderr_text()`` is
SGLang's log, ``sim.stdout_text()`` the access lines). :func:`spawn_sim` waits for the ready file,
then for ``GET /health`` 200 (``wait_ready=False``: the ready file only, for tests of a slow
start), and kills and reaps the process group on exit. :func:`start_sim` is the same without the
``with``: the caller calls :meth:`SimProcess.kill`.

``spawner``: how the process is made (default: ``subprocess.Popen``). A suite that starts many
simulators can fork them from a process that has already imported the simulator (this project's
tests/support/sim_zygote.py); the result needs only the :class:`SimChild` subset of ``Popen``.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    import httpx

__all__ = ["SimChild", "SimProcess", "Spawner", "spawn_sim", "start_sim"]


class SimChild(Protocol):
    """What :class:`SimProcess` uses of its process (``subprocess.Popen`` has it all)."""

    @property
    def pid(self) -> int: ...

    @property
    def returncode(self) -> int | None: ...

    def poll(self) -> int | None: ...

    def wait(self, timeout: float | None = None) -> int: ...

    def send_signal(self, sig: int) -> None: ...


# (argv, stdout, stderr, environment, working directory) -> the started process, in its own session.
Spawner = Callable[[list[str], IO[bytes], IO[bytes], Mapping[str, str], Path | None], SimChild]


def _popen(
    argv: list[str], stdout: IO[bytes], stderr: IO[bytes], env: Mapping[str, str], cwd: Path | None
) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        argv, stdout=stdout, stderr=stderr, stdin=subprocess.DEVNULL, cwd=cwd, env=env, start_new_session=True
    )


@functools.cache
def _http() -> httpx.Client:
    """One client for this process's control calls and readiness polls.

    ``httpx.get()`` builds a client per call, and with it an SSL context that loads the CA bundle:
    about 25 ms of CPU a call, against about 1.4 ms on a kept client (measured), and
    :meth:`SimProcess.wait_ready` polls every 20 ms: a test suite starting hundreds of simulators
    on a small box spent whole CPU-seconds there. Keep-alive off (every call a new connection, as
    before); no proxy from the environment for a loopback simulator. Safe to share between threads.
    """
    import httpx

    return httpx.Client(trust_env=False, limits=httpx.Limits(max_keepalive_connections=0))


@dataclass
class SimProcess:
    """A running simulator subprocess: its addresses (from the ready file), logs and control API."""

    process: SimChild
    args: list[str]
    info: dict[str, Any]
    stdout_path: Path
    stderr_path: Path
    _logs: list[IO[bytes]] = field(default_factory=list, repr=False)
    _tmpdir: Path | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        return str(self.info["base_url"])

    @property
    def control_url(self) -> str:
        return str(self.info["control_url"])

    @property
    def host(self) -> str:
        return str(self.info["host"])

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
        resp = _http().request(method, self.control_url + path, json=json_body, timeout=timeout)
        resp.raise_for_status()
        return resp.json()

    def wait_ready(self, timeout: float = 30.0) -> None:
        """Poll ``GET /health`` until 200 (the port refuses or answers 503 while "weights load")."""
        import httpx

        deadline = time.monotonic() + timeout
        last = "no answer"
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(
                    f"simulator exited with {self.process.returncode}: {self.stderr_text()[-2000:]}"
                )
            try:
                resp = _http().get(self.base_url + "/health", timeout=5.0)
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
        """SIGKILL the process group and reap it; idempotent."""
        if self.process.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.process.pid, signal.SIGKILL)
        with contextlib.suppress(subprocess.TimeoutExpired):  # SIGKILL cannot be ignored; bounded anyway
            self.process.wait(timeout=10)
        for f in self._logs:
            f.close()
        self._logs.clear()
        if self._tmpdir is not None:
            shutil.rmtree(self._tmpdir, ignore_errors=True)
            self._tmpdir = None


def start_sim(
    *args: str,
    log_dir: Path | None = None,
    name: str = "sim",
    wait_ready: bool = True,
    timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    cpus: set[int] | None = None,
    spawner: Spawner | None = None,
) -> SimProcess:
    """Start ``python -m sglang_sentinel_sim --port 0 --ready-file ... *args``; return once it is ready.

    ``log_dir``: where ``{name}.stdout``, ``{name}.stderr`` and ``{name}.ready.json`` go (default: a
    temporary directory removed by :meth:`SimProcess.kill`). ``env`` is added to this process's
    environment. ``cpus`` pins the simulator to those CPUs (benchmarks keep it off the client's).
    ``args`` may override ``--port`` (the last one wins, as argparse reads them).
    """
    tmpdir = None
    if log_dir is None:
        log_dir = tmpdir = Path(tempfile.mkdtemp(prefix="sentinel-sim-"))
    ready_file = log_dir / f"{name}.ready.json"
    ready_file.unlink(missing_ok=True)
    cmd = [sys.executable, "-m", "sglang_sentinel_sim", "--port", "0", "--ready-file", str(ready_file), *args]
    out_path = log_dir / f"{name}.stdout"
    err_path = log_dir / f"{name}.stderr"
    out = out_path.open("wb")
    err = err_path.open("wb")
    try:
        proc = (spawner or _popen)(cmd, out, err, {**os.environ, **(env or {})}, cwd)
    except BaseException:
        out.close()
        err.close()
        raise
    sim = SimProcess(proc, cmd, {}, out_path, err_path, [out, err], tmpdir)
    try:
        if cpus:
            os.sched_setaffinity(proc.pid, cpus)
        deadline = time.monotonic() + timeout
        while not ready_file.exists():
            if proc.poll() is not None:
                raise RuntimeError(
                    f"simulator exited with {proc.returncode} before binding: {sim.stderr_text()[-2000:]}"
                )
            if time.monotonic() > deadline:
                raise TimeoutError(f"simulator did not bind within {timeout} s: {sim.stderr_text()[-2000:]}")
            time.sleep(0.01)
        # The server writes the file atomically (rename), so it is whole once it exists.
        sim.info = json.loads(ready_file.read_text(encoding="utf-8"))
        if wait_ready:
            sim.wait_ready(max(1.0, deadline - time.monotonic()))
    except BaseException:
        sim.kill()
        raise
    return sim


@contextlib.contextmanager
def spawn_sim(
    *args: str,
    log_dir: Path | None = None,
    name: str = "sim",
    wait_ready: bool = True,
    timeout: float = 30.0,
    env: Mapping[str, str] | None = None,
    cwd: Path | None = None,
    cpus: set[int] | None = None,
    spawner: Spawner | None = None,
) -> Iterator[SimProcess]:
    """:func:`start_sim` as a context manager: the simulator is killed and reaped on exit."""
    sim = start_sim(
        *args,
        log_dir=log_dir,
        name=name,
        wait_ready=wait_ready,
        timeout=timeout,
        env=env,
        cwd=cwd,
        cpus=cpus,
        spawner=spawner,
    )
    try:
        yield sim
    finally:
        sim.kill()
