"""The pidfile names a process only with its start time; the port owner is found through /proc."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

from sglang_sentinel.supervise.pidfile import ServerPidfile, process_start_ticks
from sglang_sentinel.supervise.portowner import describe_holders, port_holders


def test_a_recycled_pid_is_not_a_leftover(tmp_path: Path) -> None:
    pidfile = ServerPidfile(tmp_path / "server.pid")
    ticks = process_start_ticks(os.getpid())
    assert ticks is not None
    # Same pid, another start time: the pid now names a different process. Never signal it.
    pidfile.path.write_text(json.dumps({"pid": os.getpid(), "start_ticks": ticks + 1}))
    assert pidfile.leftover() is None
    assert not pidfile.path.exists()
    pidfile.path.write_text("{not json")
    assert pidfile.leftover() is None
    assert not pidfile.path.exists()


async def test_a_leftover_is_reaped_and_the_pidfile_removed(tmp_path: Path) -> None:
    # A plain Popen, not an asyncio child: the leftover belongs to no watcher of this loop.
    proc = subprocess.Popen(  # noqa: ASYNC220
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        pidfile = ServerPidfile(tmp_path / "server.pid")
        pidfile.path.write_text(
            json.dumps({"pid": proc.pid, "start_ticks": process_start_ticks(proc.pid), "sentinel_pid": 1})
        )
        left = await pidfile.reap(timeout_s=5.0)
        assert left is not None
        assert left.pid == proc.pid
        assert proc.wait(5) == -15  # SIGTERM to its group was enough
        assert not pidfile.path.exists()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_holder_of_a_listening_port_is_this_process() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        port = s.getsockname()[1]
        holders = port_holders(port)
        assert [h.pid for h in holders] == [os.getpid()]
        assert f"pid {os.getpid()}: " in describe_holders(holders)
    assert port_holders(port) == []
    assert "no listening socket" in describe_holders([])
