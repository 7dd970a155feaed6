"""Backoff, crash loop, crash classification, state machine, log bus."""

from __future__ import annotations

import asyncio
import random
from pathlib import Path

import pytest

from sglang_sentinel.supervise.backoff import RestartPolicy
from sglang_sentinel.supervise.classify import classify_exit
from sglang_sentinel.supervise.logbus import LogBus, LogLine, pump_lines
from sglang_sentinel.supervise.runners import ExitInfo
from sglang_sentinel.supervise.settings import RestartSettings
from sglang_sentinel.supervise.state import ServerState, StateChange, StateMachine
from support.waits import until


def test_backoff_grows_caps_and_jitters() -> None:
    s = RestartSettings(backoff_initial=5, backoff_max=60, backoff_multiplier=2, jitter=0.2, max_restarts=100)
    p = RestartPolicy(s, random.Random(1))
    delays = [p.next_delay(float(i)) for i in range(7)]
    bases = [5, 10, 20, 40, 60, 60, 60]
    for d, b in zip(delays, bases, strict=True):
        assert d is not None
        assert 0.8 * b <= d <= 1.2 * b
    assert len({round(d or 0, 6) for d in delays[4:]}) > 1  # jitter actually varies
    p.mark_stable()
    first = p.next_delay(10.0)
    assert first is not None
    assert first <= 6


def test_crash_loop_limit_is_per_window() -> None:
    p = RestartPolicy(RestartSettings(max_restarts=3, window=100, jitter=0), random.Random(0))
    assert all(p.next_delay(t) is not None for t in (0, 1, 2))
    assert p.next_delay(3) is None  # a 4th restart within 100 s: crash loop
    assert p.next_delay(101) is not None  # the first one has left the window
    p.reset()
    assert p.restarts_in_window(101) == 0


OOM_TAIL = [
    "[2026-11-30 01:00:00 TP3] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/x/sglang/srt/managers/scheduler.py", line 3170, in run_scheduler_process',
    "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1.76 GiB.",
    "[2026-11-30 01:00:00] SIGQUIT received. signum=None, frame=None. It usually means one child failed.",
]


@pytest.mark.parametrize(
    ("exit_info", "tail", "reason"),
    [
        (ExitInfo(None, 9, "killed by signal 9"), OOM_TAIL, "cuda_oom"),
        (
            ExitInfo(None, 9, "killed by signal 9"),
            ["[x] Scheduler watchdog timeout (self.watchdog_timeout=300, self.soft=False)"],
            "watchdog_timeout",
        ),
        (
            ExitInfo(None, 9, "killed by signal 9"),
            ["Watchdog caught collective operation timeout: WorkNCCL(SeqNum=1)"],
            "nccl_timeout",
        ),
        (
            ExitInfo(None, 9, "killed by signal 9"),
            ["RuntimeError: NCCL error in: ../x.cpp:1, unhandled system error"],
            "nccl_error",
        ),
        (
            ExitInfo(1, None, "exited with status 1"),
            [
                "torch.distributed.DistStoreError: Timed out after 601 seconds waiting for clients. "
                "1/2 clients joined."
            ],
            "dist_init_failed",
        ),
        (
            ExitInfo(1, None, "exited with status 1"),
            [
                "torch.distributed.DistNetworkError: The client socket has timed out after 600000ms "
                "while trying to connect to (10.0.0.1, 20000)."
            ],
            "dist_init_failed",
        ),
        (
            ExitInfo(None, 9, "killed by signal 9"),
            ["RuntimeError: CUDA error: an illegal memory access was encountered"],
            "cuda_error",
        ),
        (
            ExitInfo(1, None, "exited with status 1"),
            ["OSError: [Errno 98] Address already in use"],
            "port_in_use",
        ),
        (
            ExitInfo(None, 9, "killed by signal 9"),
            ["[x] Scheduler hit an exception: Traceback", "ValueError: odd"],
            "unknown",
        ),
        (ExitInfo(None, 9, "killed by signal 9"), ["[x] Decode batch, #running-req: 1"], "killed"),
        (ExitInfo(None, 15, "killed by signal 15"), [], "killed"),
        (ExitInfo(1, None, "exited with status 1"), ["Traceback", "ImportError: no module"], "unknown"),
        (ExitInfo(0, None, "exited with status 0"), [], "exited"),
    ],
)
def test_classify_exit(exit_info: ExitInfo, tail: list[str], reason: str) -> None:
    crash = classify_exit(exit_info, tail, 0.0)
    assert crash.reason == reason
    assert exit_info.description in crash.detail


async def test_state_machine_counts_notifies_and_waits() -> None:
    m = StateMachine()
    got: list[StateChange] = []
    m.subscribe(got.append)

    def broken(_: StateChange) -> None:
        raise RuntimeError("listener bug")

    m.subscribe(broken)  # a failing listener must not break the others
    waiter = asyncio.create_task(m.wait_for(ServerState.READY, timeout_s=2))
    m.set(ServerState.STARTING, "launch")
    m.set(ServerState.STARTING, "again")  # no-op
    m.set(ServerState.READY, "up")
    assert await waiter is ServerState.READY
    assert [(c.old, c.new) for c in got] == [
        (ServerState.STOPPED, ServerState.STARTING),
        (ServerState.STARTING, ServerState.READY),
    ]
    assert m.transitions[("stopped", "starting")] == 1
    with pytest.raises(TimeoutError):
        await m.wait_for(ServerState.FAILED, timeout_s=0.05)


async def test_log_bus_rotates_tails_and_gives_every_line_to_every_listener(tmp_path: Path) -> None:
    path = tmp_path / "logs" / "server.log"
    bus = LogBus(path, max_bytes=4096, backups=2, tail_lines=10)
    seen: list[LogLine] = []
    bus.add_listener(seen.append)

    def broken(line: LogLine) -> None:
        raise RuntimeError("listener bug")

    remove_broken = bus.add_listener(broken)  # a failing listener costs the others nothing
    for i in range(200):
        bus.publish(f"line {i:04d} " + "x" * 50, "child")
    assert bus.lines_total == 200
    assert [line.text[:9] for line in seen] == [f"line {i:04d}" for i in range(200)]
    assert seen[0].source == "child"
    assert bus.listener_errors_total == 200
    assert bus.tail()[-1].startswith("line 0199")
    assert len(bus.tail()) == 10
    assert path.exists()
    assert (tmp_path / "logs" / "server.log.1").exists()
    assert not (tmp_path / "logs" / "server.log.3").exists()
    assert path.stat().st_size <= 4096
    remove_broken()
    bus.publish("after removal", "child")
    assert bus.listener_errors_total == 200
    assert seen[-1].text == "after removal"
    bus.close()


async def test_pump_splits_overlong_lines_without_dying() -> None:
    bus = LogBus(None, max_bytes=4096, backups=0, tail_lines=100)
    reader = asyncio.StreamReader(limit=64)
    reader.feed_data(b"short\n" + b"y" * 300 + b"\nlast line without newline")
    reader.feed_eof()
    await pump_lines(reader, bus, "child")
    tail = bus.tail()
    assert tail[0] == "short"
    assert "".join(tail[1:-1]) == "y" * 300
    assert tail[-1] == "last line without newline"


def test_log_bus_survives_an_unwritable_file(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    bus = LogBus(blocker / "server.log", max_bytes=4096, backups=1, tail_lines=5)
    bus.publish("still delivered", "child")
    assert bus.tail() == ["still delivered"]


async def test_log_file_is_flushed_soon_without_closing(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    bus = LogBus(path, max_bytes=1 << 20, backups=1, tail_lines=5, flush_interval=0.05)
    bus.publish("Scheduler hit an exception: boom", "child")
    await until(path.read_text, what="the flushed line")
    assert path.read_text() == "Scheduler hit an exception: boom\n"
    bus.close()


def test_rotation_without_backups_starts_over(tmp_path: Path) -> None:
    path = tmp_path / "server.log"
    bus = LogBus(path, max_bytes=4096, backups=0, tail_lines=5)
    for i in range(100):
        bus.publish(f"{i:03d} " + "z" * 60, "child")
    bus.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["server.log"]
    assert path.stat().st_size <= 4096
    assert path.read_text().splitlines()[-1].startswith("099 ")
