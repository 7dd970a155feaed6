"""Fixtures for the supervisor tests: fast settings, free ports, the simulator and the fake server
(for what the simulator cannot do, see fake_server.py), leak checks."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import inspect
import os
import signal
import sys
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.supervise.launch import BUILTIN_PROFILES, LaunchCommand
from sglang_sentinel.supervise.settings import ServerSettings
from support.ports import free_port

FAKE_SERVER = Path(__file__).with_name("fake_server.py")

# Every async test in this directory runs under one deadline: a stuck await (a stop() that never
# returns, a subscription that never ends) fails with the traceback of that await instead of
# stalling CI until the job is killed. Far above the slowest test on a loaded 2-core machine.
TEST_LIMIT_S = 120.0


def _bounded(fn: Callable[..., Coroutine[Any, Any, Any]]) -> Callable[..., Coroutine[Any, Any, Any]]:
    @functools.wraps(fn)
    async def run(*args: Any, **kwargs: Any) -> Any:
        async with asyncio.timeout(TEST_LIMIT_S):
            return await fn(*args, **kwargs)

    return run


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    # A conftest's hook sees the whole session's items: wrap only this directory's tests.
    here = Path(__file__).parent
    for item in items:
        if not isinstance(item, pytest.Function) or here not in item.path.parents:
            continue
        if inspect.iscoroutinefunction(item.obj):
            item.obj = _bounded(item.obj)


def fast_settings(port: int, **overrides: Any) -> ServerSettings:
    """Settings with every interval shrunk so a test finishes in seconds."""
    data: dict[str, Any] = {
        "mode": "child",
        "port": port,
        "start_timeout": 20.0,
        "startup_poll_interval": 0.05,
        "stop_timeout": 3.0,
        "before_stop_timeout": 2.0,
        "restart": {"backoff_initial": 0.05, "backoff_max": 0.2, "jitter": 0.1, "max_restarts": 5},
        "checks": {
            "health": {"interval": 0.1, "timeout": 2.0, "failures": 2},
            "health_generate": {"interval": 0.2, "timeout": 2.0, "failures": 2},
            "stall": {"interval": 0.1, "timeout": 2.0, "stall_after": 0.5},
            "canary": {"interval": 0.3, "timeout": 5.0, "failures": 1},
        },
    }
    for key, value in overrides.items():
        if isinstance(value, dict) and isinstance(data.get(key), dict):
            merged = dict(data[key])
            for k, v in value.items():
                if isinstance(v, dict) and isinstance(merged.get(k), dict):
                    merged[k] = {**merged[k], **v}
                else:
                    merged[k] = v
            data[key] = merged
        else:
            data[key] = value
    return ServerSettings.model_validate(data)


def fake_command(port: int, *args: str) -> LaunchCommand:
    argv = (sys.executable, str(FAKE_SERVER), "--port", str(port), *args)
    return LaunchCommand("fake", BUILTIN_PROFILES["sim"], argv, {})


def sim_command(port: int, *args: str, metrics: bool = True) -> LaunchCommand:
    """The simulator at --speed 100 (start-up ~0.03 s); --lifetime: no sim outlives a broken run."""
    argv = (
        sys.executable,
        "-m",
        "sglang_sentinel_sim",
        "--port",
        str(port),
        "--speed",
        "100",
        "--lifetime",
        "300",
    )
    flags = ("--enable-metrics",) if metrics else ()
    return LaunchCommand("sim", BUILTIN_PROFILES["sim"], (*argv, *flags, *args), {})


@pytest.fixture
def port() -> int:
    return free_port()


@pytest.fixture
def fast() -> Callable[..., ServerSettings]:
    return fast_settings


@pytest.fixture
def fake_cmd() -> Callable[..., LaunchCommand]:
    return fake_command


@pytest.fixture
def sim_cmd() -> Callable[..., LaunchCommand]:
    return sim_command


@pytest.fixture
def alive() -> Callable[[int], bool]:
    return pid_alive


def _children_of(pid: int) -> set[int]:
    out: set[int] = set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.add(int(entry.name))
    return out


@pytest.fixture
def no_leaked_children() -> Iterator[None]:
    """Fails the test if it leaves a child process (or a zombie) of the test process behind."""
    before = _children_of(os.getpid())
    yield
    leaked = _children_of(os.getpid()) - before
    assert not leaked, f"leaked child processes: {sorted(leaked)}"


def pid_alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.fixture
def unit_dir(tmp_path: Path) -> Iterator[Path]:
    """The fake systemd unit's directory (fake_systemctl.py's STATE_DIR)."""
    d = tmp_path / "unit"
    d.mkdir()
    (d / "journal.log").write_text("")
    yield d
    # Whatever a failing test left running in the fake unit goes now.
    pid_file = d / "pid"
    if pid_file.exists():
        with contextlib.suppress(ProcessLookupError, ValueError):
            os.killpg(int(pid_file.read_text()), signal.SIGKILL)
