"""sd_notify over a real unix datagram socket, and the watchdog ping from the event loop."""

from __future__ import annotations

import asyncio
import itertools
import os
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.systemd import Notifier, clean_child_env, run_watchdog, watchdog_interval


@pytest.fixture
def receiver(tmp_path: Path, notify_receiver: Callable[[str | bytes], Any]) -> tuple[str, Any]:
    path = str(tmp_path / "notify.sock")
    return path, notify_receiver(path)


def test_messages_reach_a_path_socket(receiver: tuple[str, Any]) -> None:
    path, r = receiver
    n = Notifier(path)
    assert n.enabled
    assert n.ready("server starting")
    assert n.status("line one\nline two")
    assert n.watchdog()
    assert n.stopping()
    r.wait_for("STOPPING=1")
    texts = [m for _, m in r.messages]
    assert texts[0] == "READY=1\nSTATUS=server starting"
    # A newline in a STATUS would start a new assignment: it is flattened.
    assert texts[1] == "STATUS=line one line two"
    assert texts[2] == "WATCHDOG=1"
    n.close()


def test_abstract_namespace_socket(notify_receiver: Callable[[str | bytes], Any]) -> None:
    name = f"sentinel-test-{uuid.uuid4().hex}"
    r = notify_receiver(b"\0" + name.encode())
    n = Notifier.from_env({"NOTIFY_SOCKET": "@" + name})
    assert n.ready()
    r.wait_for("READY=1")


def test_no_socket_is_a_no_op(tmp_path: Path) -> None:
    assert not Notifier.from_env({}).enabled
    assert Notifier.from_env({}).ready() is False
    # A socket that went away: counted and logged, never raised.
    n = Notifier(str(tmp_path / "gone.sock"))
    assert n.send(READY=1) is False
    assert n.failures == 1
    assert not Notifier("vsock:2:1234").enabled


def test_watchdog_interval() -> None:
    assert watchdog_interval({}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "30000000"}) == 15.0
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": str(os.getpid())}) == 15.0
    # Inherited by a child: not ours to ping.
    assert watchdog_interval({"WATCHDOG_USEC": "30000000", "WATCHDOG_PID": "1"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "soon"}) is None
    assert watchdog_interval({"WATCHDOG_USEC": "0"}) is None


def test_clean_child_env() -> None:
    env = {"NOTIFY_SOCKET": "/run/x", "WATCHDOG_USEC": "1", "WATCHDOG_PID": "2", "PATH": "/bin"}
    assert clean_child_env(env) == {"PATH": "/bin"}


async def test_watchdog_ping_stops_when_the_loop_is_blocked(receiver: tuple[str, Any]) -> None:
    path, r = receiver
    n = Notifier(path)
    task = asyncio.create_task(run_watchdog(n, 0.05))
    await asyncio.sleep(0.3)
    time.sleep(0.6)  # noqa: ASYNC251 - the point: a wedged event loop, no await for 0.6 s
    await asyncio.sleep(0.3)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    pings = [t for t, m in r.messages if m == "WATCHDOG=1"]
    gaps = [b - a for a, b in itertools.pairwise(pings)]
    assert len(pings) >= 6
    # Regular pings before and after, and one gap as long as the block: systemd would see it.
    assert max(gaps) >= 0.55
    assert sorted(gaps)[len(gaps) // 2] < 0.2
    n.close()


async def test_watchdog_withholds_pings_when_unhealthy(receiver: tuple[str, Any]) -> None:
    path, r = receiver
    n = Notifier(path)
    healthy = True
    task = asyncio.create_task(run_watchdog(n, 0.02, lambda: healthy))
    await asyncio.sleep(0.15)
    healthy = False
    await asyncio.sleep(0.05)
    before = len(r.messages)
    await asyncio.sleep(0.2)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert before >= 3
    assert len(r.messages) == before
    n.close()
