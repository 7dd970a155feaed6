"""Simulators forked from a process that has already imported them: the test suite's ``sim_factory``.

A simulator's start is mostly its imports (aiohttp alone, with the two TLS contexts it builds at
import, is ~0.2 CPU-s of the ~0.3 a start costs, measured), and the suite starts about 150 of
its own (besides those that the daemons and supervisors under test launch themselves, as
deployed). On a 2-core box that CPU is what the suite's wall time is made of. So each pytest
worker keeps one *zygote*: a process that imported the simulator once and forks a child per
simulator, which then runs exactly what ``python -m sglang_sentinel_sim ARGS`` runs (``runpy`` on
the package's ``__main__``, ``sys.argv``, environment, working directory, its own session, stdout
and stderr to the log files), with the zygote's imports already done.

What differs from a fresh interpreter: nothing the simulator reads at run time (its environment
variables, arguments and files are read after the fork); the hash seed is the zygote's (the
simulator's output does not depend on it: its random draws come from ``--seed`` or ``random``,
which CPython reseeds in a forked child). The child is the zygote's, not the test's: the zygote
reaps it and reports its exit status, and :class:`ZygoteChild` answers ``poll``/``wait`` from
that report (the ``subprocess.Popen`` subset ``SimProcess`` uses).

Protocol, one line each way: the worker writes a JSON request ``{"id", "argv", "env", "cwd",
"stdout", "stderr"}``; the zygote answers ``started ID PID`` (or ``failed ID WHY``) and, when a
child ends, ``exited ID RETURNCODE`` (negative: the signal, as ``Popen.returncode``). Exits are
told by request ID, not PID: a PID is reused once its process is reaped (pid_max is 32768 on many
boxes, and a suite run forks thousands), and a later child on an earlier one's PID must not read
as already exited.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import signal
import subprocess
import sys
import threading
from collections.abc import Mapping
from pathlib import Path
from typing import IO

_MODULE = "sglang_sentinel_sim"


# ---------------------------------------------------------------- the zygote process
def _child(request: dict[str, object], proto: tuple[int, ...]) -> None:
    """In the forked child: become ``python -m sglang_sentinel_sim ARGS``; never returns."""
    code = 1
    try:
        os.setsid()
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        # Opened while 0-2 are still taken (so above them), then moved onto 0-2, replacing the
        # zygote's request and answer pipes; nothing else of the zygote's stays open.
        null = os.open(os.devnull, os.O_RDONLY)
        out = os.open(str(request["stdout"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        err = os.open(str(request["stderr"]), os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        for fd, target in ((null, 0), (out, 1), (err, 2)):
            os.dup2(fd, target)
        for fd in {null, out, err, *proto} - {0, 1, 2}:
            os.close(fd)
        os.chdir(str(request["cwd"]))
        env = request["env"]
        assert isinstance(env, dict)
        os.environ.clear()
        os.environ.update(env)
        argv = request["argv"]
        assert isinstance(argv, list)
        sys.argv = [str(a) for a in argv]
        sys.path[0] = os.getcwd()  # as ``-m`` sets it
        import runpy

        try:
            runpy.run_module(_MODULE, run_name="__main__", alter_sys=True)
            code = 0
        except SystemExit as exc:
            if exc.code is None or isinstance(exc.code, int):
                code = exc.code or 0
            else:
                print(exc.code, file=sys.stderr)
                code = 1
    except BaseException:
        import traceback

        traceback.print_exc()
    finally:
        # What interpreter shutdown does (join the non-daemon threads, run the exit functions),
        # then leave without returning into the zygote's loop.
        with contextlib.suppress(BaseException):
            threading._shutdown()  # type: ignore[attr-defined]
        with contextlib.suppress(BaseException):
            import atexit

            atexit._run_exitfuncs()
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(BaseException):
                stream.flush()
        os._exit(code)


def _serve() -> None:
    """The zygote's loop: requests on stdin, answers on stdout (raw writes: nothing buffered is
    ever inherited by a child), children reaped on SIGCHLD. Ends at EOF (its worker is gone)."""
    sys.path[0] = os.getcwd()
    import sglang_sentinel_sim.command
    import sglang_sentinel_sim.server  # noqa: F401 - the point: imported once, before any fork

    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda signum, frame: None)
    stdin, stdout = sys.stdin.fileno(), sys.stdout.fileno()
    ids: dict[int, int] = {}  # a running child's PID -> its request ID

    def say(line: str) -> None:
        os.write(stdout, (line + "\n").encode())

    def reap() -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            say(f"exited {ids.pop(pid)} {os.waitstatus_to_exitcode(status)}")

    buffered = b""
    while True:
        ready, _, _ = select.select([stdin, wake_r], [], [])  # EINTR is retried (PEP 475)
        reap()
        if wake_r in ready:
            with contextlib.suppress(BlockingIOError):
                os.read(wake_r, 4096)
        if stdin not in ready:
            continue
        chunk = os.read(stdin, 65536)
        if not chunk:
            return
        buffered += chunk
        while b"\n" in buffered:
            line, buffered = buffered.split(b"\n", 1)
            request = json.loads(line)
            try:
                pid = os.fork()
            except OSError as exc:
                say(f"failed {request['id']} {exc}")
                continue
            if pid == 0:
                _child(request, (stdin, stdout, wake_r, wake_w))
            ids[pid] = request["id"]  # before the next reap() can see it end
            say(f"started {request['id']} {pid}")


# ---------------------------------------------------------------- the worker's side
class ZygoteChild:
    """A simulator forked by the zygote: the ``subprocess.Popen`` subset ``SimProcess`` uses."""

    def __init__(self, zygote: Zygote, rid: int, pid: int, args: list[str]) -> None:
        self._zygote = zygote
        self._rid = rid
        self.pid = pid
        self.args = args

    @property
    def returncode(self) -> int | None:
        return self._zygote.returncode(self._rid)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        code = self._zygote.wait_exit(self._rid, timeout)
        if code is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        return code

    def send_signal(self, sig: int) -> None:
        # Only while the zygote has not reported it ended (and reaped it): the pid may be reused.
        if self.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, sig)


class Zygote:
    """This process's zygote (started on first use) and the exits it reported."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._proc: subprocess.Popen[bytes] | None = None
        self._reader: threading.Thread | None = None
        self._next_id = 0
        self._started: dict[int, int | str] = {}  # request ID -> PID, or why the fork failed
        self._exited: dict[int, int] = {}  # request ID -> return code
        self._gone: str | None = None

    def _ensure(self) -> subprocess.Popen[bytes]:
        if self._proc is None:
            self._proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).resolve())],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                start_new_session=True,
            )
            self._gone = None
            self._reader = threading.Thread(
                target=self._read, args=(self._proc,), name="sim-zygote", daemon=True
            )
            self._reader.start()
        return self._proc

    def _read(self, proc: subprocess.Popen[bytes]) -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            kind, key, value = raw.decode().rstrip("\n").split(" ", 2)
            with self._changed:
                if kind == "exited":
                    self._exited[int(key)] = int(value)
                elif kind == "started":
                    self._started[int(key)] = int(value)
                else:
                    self._started[int(key)] = value
                self._changed.notify_all()
        with self._changed:
            self._gone = f"the simulator zygote exited ({proc.wait()})"
            self._changed.notify_all()

    def spawn(
        self, argv: list[str], stdout: IO[bytes], stderr: IO[bytes], env: Mapping[str, str], cwd: Path | None
    ) -> ZygoteChild:
        """Fork ``argv`` (``[python, "-m", "sglang_sentinel_sim", ...]``) with its output appended
        to the files ``stdout`` and ``stderr`` are open on."""
        if argv[1:3] != ["-m", _MODULE]:
            raise ValueError(f"the zygote runs {_MODULE} only, not {argv}")
        with self._changed:
            proc = self._ensure()
            assert proc.stdin is not None
            rid = self._next_id
            self._next_id += 1
            request = {
                "id": rid,
                "argv": [argv[0], *argv[3:]],
                "env": dict(env),
                "cwd": str(cwd) if cwd is not None else os.getcwd(),
                "stdout": stdout.name,
                "stderr": stderr.name,
            }
            proc.stdin.write(json.dumps(request).encode() + b"\n")
            proc.stdin.flush()
            while rid not in self._started:
                if self._gone is not None:
                    raise RuntimeError(self._gone)
                self._changed.wait()
            answer = self._started.pop(rid)
        if isinstance(answer, str):
            raise OSError(f"the simulator zygote could not fork: {answer}")
        return ZygoteChild(self, rid, answer, argv)

    def close(self) -> None:
        """End the zygote (its children live on: their owners kill them) and reap it."""
        with self._lock:
            proc, self._proc = self._proc, None
            reader, self._reader = self._reader, None
        if proc is None or reader is None:
            return
        assert proc.stdin is not None
        assert proc.stdout is not None
        with contextlib.suppress(OSError):
            proc.stdin.close()  # the zygote ends at EOF; its reader thread then reaps it
        reader.join(timeout=30)
        if reader.is_alive():
            proc.kill()
            reader.join()
        proc.stdout.close()  # only now: the reader thread is done with it

    def returncode(self, rid: int) -> int | None:
        with self._lock:
            return self._exited.get(rid)

    def wait_exit(self, rid: int, timeout: float | None) -> int | None:
        with self._changed:
            self._changed.wait_for(lambda: rid in self._exited or self._gone is not None, timeout)
            if rid not in self._exited and self._gone is not None:
                raise RuntimeError(self._gone)
            return self._exited.get(rid)


if __name__ == "__main__":
    _serve()
