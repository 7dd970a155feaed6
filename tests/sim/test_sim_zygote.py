"""The suite's simulators are forked from a zygote (support/sim_zygote.py): each must be what
``python -m sglang_sentinel_sim ARGS`` is: its arguments, environment, working directory, output
files, its own session, and its exit status as ``Popen.returncode`` says it."""

from __future__ import annotations

import json
import os
import re
import signal
import sys
from pathlib import Path

from support.sim_zygote import Zygote, ZygoteChild
from support.waits import until_sync

_MS_STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] ", re.M)
_S_STAMP = re.compile(r"^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\] ", re.M)


def _spawn(
    zygote: Zygote, tmp_path: Path, name: str, *args: str, env: dict[str, str] | None = None
) -> tuple[ZygoteChild, Path, Path]:
    out, err = tmp_path / f"{name}.out", tmp_path / f"{name}.err"
    with out.open("wb") as o, err.open("wb") as e:
        child = zygote.spawn(
            [sys.executable, "-m", "sglang_sentinel_sim", *args],
            o,
            e,
            {**os.environ, **(env or {})},
            tmp_path,
        )
    return child, out, err


def test_a_forked_simulator_runs_in_its_directory_with_its_environment_and_session(
    sim_zygote: Zygote, tmp_path: Path
) -> None:
    # A relative --ready-file lands in the working directory asked for; SGLANG_LOG_MS (read at run
    # time) reaches the child: its log stamps carry milliseconds.
    child, _, err = _spawn(
        sim_zygote, tmp_path, "ms", "--port", "0", "--ready-file", "ready.json", env={"SGLANG_LOG_MS": "1"}
    )
    try:
        until_sync((tmp_path / "ready.json").exists, what="the ready file")
        info = json.loads((tmp_path / "ready.json").read_text())
        assert info["pid"] == child.pid
        assert os.getsid(child.pid) == child.pid
        until_sync(lambda: _MS_STAMP.search(err.read_text()), what="a millisecond log stamp")
        assert child.poll() is None
    finally:
        child.send_signal(signal.SIGKILL)
    assert child.wait(timeout=30) == -signal.SIGKILL
    assert child.returncode == -signal.SIGKILL


def test_exit_statuses_and_output_are_the_simulators(sim_zygote: Zygote, tmp_path: Path) -> None:
    ok, _, ok_err = _spawn(sim_zygote, tmp_path, "ok", "--check-args", "--speed", "20")
    bad, _, bad_err = _spawn(sim_zygote, tmp_path, "bad", "--speed", "fast")
    assert ok.wait(timeout=60) == 0, ok_err.read_text()
    assert bad.wait(timeout=60) == 2
    assert "argument --speed: invalid float value: 'fast'" in bad_err.read_text()
    # Without SGLANG_LOG_MS (unless this environment sets it), second stamps: nothing of the
    # other child's environment stayed behind in the zygote.
    plain, _, plain_err = _spawn(sim_zygote, tmp_path, "plain", "--port", "0", "--ready-file", "plain.json")
    try:
        until_sync((tmp_path / "plain.json").exists, what="the ready file")
        until_sync(lambda: _S_STAMP.search(plain_err.read_text()), what="a second log stamp")
        if os.environ.get("SGLANG_LOG_MS", "").lower() not in ("1", "true"):
            assert not _MS_STAMP.search(plain_err.read_text())
    finally:
        plain.send_signal(signal.SIGKILL)
        plain.wait(timeout=30)
