"""The fallback in systemd mode, through the fake systemctl (fake_systemctl.py) and the simulator.

The unit runs ``python -m sglang_sentinel_sim $SGLANG_ARGS`` with two environment files, as
deploy/sglang.service does: the operator's launch.env and, after it, the optional fallback file
sentinel owns. A good life is recorded known-good from the flags the unit really ran; launch.env
edited to a known-bad SM120 combination then answers garbage, and sentinel writes the recorded
flags into the fallback file and restarts the unit (no daemon-reload: the files are read at each
start); ``reset --configured`` removes the file and the unit runs launch.env's flags again.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.supervise import ServerState, Supervisor
from sglang_sentinel.supervise.fallback import FALLBACK_FILE
from sglang_sentinel.supervise.knowngood import split_argv
from sglang_sentinel.supervise.launch import unit_command
from sglang_sentinel.supervise.settings import ServerSettings
from sglang_sentinel.supervise.unitenv import read_args
from support.fallback_reads import records, value
from support.waits import until

pytestmark = [pytest.mark.slow]

FAKE_SYSTEMCTL = Path(__file__).with_name("fake_systemctl.py")
UNIT = "sglang-test.service"
GOOD = ("trtllm", "trtllm")
BAD = ("flashmla_sparse", "flashmla_kv")

Fast = Callable[..., ServerSettings]


def write_launch_env(path: Path, port: int, backends: tuple[str, str], *extra: str) -> None:
    """launch.env as deploy/sglang-launch.env writes it: one double-quoted, continued value."""
    flags = [
        "--port", str(port), "--speed", "100", "--lifetime", "300", "--enable-metrics",
        "--profile", "glm5-nvfp4-8x-rtxpro6000", "--sglang-version", "0.5.9",
        "--nsa-prefill-backend", backends[0], "--nsa-decode-backend", backends[1],
        "--kv-cache-dtype", "bfloat16", *extra,
    ]  # fmt: skip
    body = " \\\n    ".join(" ".join(flags[i : i + 2]) for i in range(0, len(flags), 2))
    path.write_text(f'# test launch flags\nSGLANG_ARGS="{body}"\n')


def settings(fast: Fast, port: int, d: Path, state: Path, **extra: Any) -> ServerSettings:
    launch_env, fallback_env = d / "launch.env", state / "sglang-fallback.env"
    (d / "cmd").write_text(f"{sys.executable}\n-m\nsglang_sentinel_sim\n$SGLANG_ARGS\n")
    (d / "env_files").write_text(f"{launch_env}\n-{fallback_env}\n")
    options: dict[str, Any] = {"stop_unit_on_exit": True, **extra}
    return fast(
        port,
        mode="systemd",
        systemd={
            "unit": UNIT,
            "systemctl": [sys.executable, str(FAKE_SYSTEMCTL), str(d)],
            "journal": ["tail", "-s", "0.05", "-n", "0", "-F", str(d / "journal.log")],
            "poll_interval": 0.3,
            "settle": 0.3,
            "launch_env": str(launch_env),
            "fallback_env": str(fallback_env),
        },
        restart={"max_restarts": 3, "window": 60.0},
        fallback={"enabled": True, "failures": 2, "window": 60.0, "good_after": 0.5},
        **options,
    )


def ran(d: Path) -> list[str]:
    """The argv of the unit's last start, as the fake systemd expanded $SGLANG_ARGS."""
    return (d / "argv").read_text().splitlines()


def lives(d: Path) -> list[list[str]]:
    """The argv of every start of the unit so far, oldest first (a line still being appended, one
    with no newline yet, is not a start yet)."""
    path = d / "argvs"
    text = path.read_text() if path.exists() else ""
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]


def backends_ran(d: Path) -> tuple[str, str]:
    argv = ran(d)
    return argv[argv.index("--nsa-prefill-backend") + 1], argv[argv.index("--nsa-decode-backend") + 1]


async def test_systemd_fallback_writes_the_units_flags_file_restarts_it_and_reset_removes_it(
    fast: Fast, port: int, unit_dir: Path, tmp_path: Path
) -> None:
    state = tmp_path / "state"
    fallback_env = state / "sglang-fallback.env"
    write_launch_env(unit_dir / "launch.env", port, GOOD)
    good = Supervisor(settings(fast, port, unit_dir, state), state_dir=state)
    await good.start()
    try:
        await good.wait_for_state(ServerState.READY, timeout_s=30)
        await until(lambda: bool(records(state)), what="a known-good record of the unit's flags")
    finally:
        await good.stop()
    rec = records(state)[0]
    assert rec["profile"] == f"systemd:{UNIT}"
    assert rec["sglang_version"] == "0.5.9"  # as the server reported it
    assert rec["argv"][1:] == ran(unit_dir)[3:]  # what the unit really ran (after the interpreter)

    # The operator edits launch.env to a known-bad combination: garbage, then the fallback.
    write_launch_env(unit_dir / "launch.env", port, BAD)
    sup = Supervisor(settings(fast, port, unit_dir, state), state_dir=state)
    await sup.start()
    try:
        await until(lambda: sup.fallback.active, what="the fallback")
        await sup.wait_for_state(ServerState.READY, timeout_s=30)
        await until(lambda: backends_ran(unit_dir) == GOOD, what="the unit restarted with the recorded flags")
        assert read_args([fallback_env], "SGLANG_ARGS") == tuple(rec["argv"][1:])
        assert oct(fallback_env.stat().st_mode & 0o777) == "0o600"
        for probe in ("canary_arithmetic", "canary_is_prime"):
            await until(lambda p=probe: value(sup, "sentinel_probe_success", probe=p) == 1.0)  # type: ignore[misc]
        assert value(sup, "sentinel_server_fallback_total", reason="garbage") == 1
        fb = sup.snapshot().fallback
        assert fb is not None
        assert fb.source == "fallback"
        assert fb.origin == "history"
        assert any("flashmla" in d and "trtllm" in d for d in fb.differences), fb.differences
        assert (state / FALLBACK_FILE).is_file()
        calls = [c.split()[0] for c in (unit_dir / "calls").read_text().splitlines()]
        assert "daemon-reload" not in calls

        # The way back: the file goes, the unit restarts with launch.env's flags.
        sup.reset(configured=True)
        await until(lambda: not fallback_env.exists(), what="the fallback file removed")
        await until(lambda: backends_ran(unit_dir) == BAD, what="the unit restarted with launch.env's flags")
        assert sup.fallback.view().source == "configured"
    finally:
        await sup.stop()


def save_decision(s: ServerSettings, d: Path, state: Path, fallback: tuple[str, ...]) -> None:
    """A decision as a sentinel before this one saved it: launch.env's flags fall back to ``fallback``."""
    configured = unit_command(s, read_args([d / "launch.env"], "SGLANG_ARGS") or ())
    state.mkdir(exist_ok=True)
    decision = {
        "configured_hash": configured.config_hash,
        "fallback_hash": "x",
        "sglang_version": "0.5.9",
        "flags": [[f, list(v)] for f, v in split_argv(fallback)[1]],
        "origin": "history",
        "since": time.time() - 60,
        "reason": "garbage",
        "example": "canary_arithmetic: garbage",
        "differences": [],
        "failures": [],
    }
    (state / FALLBACK_FILE).write_text(json.dumps(decision))


async def systemctl(d: Path, verb: str) -> int:
    """An operator's (or the test's) ``systemctl VERB`` of the fake unit; its exit status."""
    proc = await asyncio.create_subprocess_exec(
        sys.executable, str(FAKE_SYSTEMCTL), str(d), verb, UNIT, stdout=asyncio.subprocess.DEVNULL
    )
    return await proc.wait()


async def test_an_edit_of_launch_env_during_a_fallback_ends_it_at_the_units_next_restart(
    fast: Fast, port: int, unit_dir: Path, tmp_path: Path
) -> None:
    """The operator fixes launch.env and runs `systemctl restart sglang`, as its header says. Where
    systemd read the fallback file too, the unit came back with the fallback's flags: sentinel
    discards the decision about the old launch.env, removes the file and restarts the unit once
    more, and the edit runs. (Where sentinel saw the stop and removed the file before the start,
    the unit's next life runs the edit at once, with no restart of sentinel's.)"""
    state = tmp_path / "state"
    fallback_env = state / "sglang-fallback.env"
    write_launch_env(unit_dir / "launch.env", port, BAD)
    # The checks slower to give up than the unit's poll, as deployed (10 s x 3 against 2 s): the
    # operator's restart is seen as the unit's, not as a check failing while it comes back (the
    # canaries too: at the test default, one refused canary on a busy box restarted the unit first).
    slow = {"interval": 1.0, "failures": 3}
    checks = {"health": slow, "health_generate": slow, "canary": slow}
    s = settings(fast, port, unit_dir, state, checks=checks)
    write_launch_env(tmp_path / "good.env", port, GOOD)
    good_flags = read_args([tmp_path / "good.env"], "SGLANG_ARGS") or ()
    save_decision(s, unit_dir, state, good_flags)
    sup = Supervisor(s, state_dir=state)
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.READY, timeout_s=30)
        assert sup.fallback.active
        assert backends_ran(unit_dir) == GOOD  # sentinel wrote the file before the unit's start
        assert read_args([fallback_env], "SGLANG_ARGS") == good_flags
        write_launch_env(unit_dir / "launch.env", port, GOOD, "--max-running-requests", "64")
        before = len(lives(unit_dir))
        assert await systemctl(unit_dir, "restart") == 0
        await until(lambda: "--max-running-requests" in ran(unit_dir), what="the edited launch.env running")
        await sup.wait_for_state(ServerState.READY, timeout_s=30)
        assert not fallback_env.exists()
        assert sup.fallback.view().source == "configured"
        assert value(sup, "sentinel_server_fallback_discarded_total", why="configuration_changed") == 1
        after = lives(unit_dir)[before:]
        assert "--max-running-requests" in after[-1]
        on_fallback = [argv for argv in after if "--max-running-requests" not in argv]
        assert len(on_fallback) == len(after) - 1 <= 1  # at most one life on the old decision
        # ... which sentinel restarted once: the restart that brought the edit in
        assert value(sup, "sentinel_server_restarts_total", reason="fallback") == len(on_fallback)
        assert (value(sup, "sentinel_server_restarts_total", reason="external") or 0) >= 1
    finally:
        await sup.stop()


async def test_a_restored_decision_whose_file_is_gone_restarts_the_running_unit(
    fast: Fast, port: int, unit_dir: Path, tmp_path: Path
) -> None:
    """sentinel restarted mid-incident, but the unit runs launch.env's flags (someone removed the
    fallback file and restarted it): the decision is kept, the file written again, and the unit
    restarted once so that what runs is what sentinel says runs."""
    state = tmp_path / "state"
    fallback_env = state / "sglang-fallback.env"
    write_launch_env(unit_dir / "launch.env", port, BAD)
    s = settings(fast, port, unit_dir, state, stop_unit_on_exit=False)
    write_launch_env(tmp_path / "good.env", port, GOOD)
    good_flags = read_args([tmp_path / "good.env"], "SGLANG_ARGS") or ()
    save_decision(s, unit_dir, state, good_flags)
    assert await systemctl(unit_dir, "start") == 0
    assert backends_ran(unit_dir) == BAD
    sup = Supervisor(s, state_dir=state)
    await sup.start()
    try:
        await until(lambda: backends_ran(unit_dir) == GOOD, what="the unit restarted with the decided flags")
        await sup.wait_for_state(ServerState.READY, timeout_s=30)
        assert sup.fallback.active
        assert read_args([fallback_env], "SGLANG_ARGS") == good_flags
        assert value(sup, "sentinel_server_restarts_total", reason="fallback") == 1
    finally:
        await sup.stop()
        await systemctl(unit_dir, "stop")


def test_settings_accept_the_fallback_in_systemd_mode_and_refuse_it_in_external_mode() -> None:
    assert ServerSettings.model_validate({"mode": "systemd", "fallback": {"enabled": True}}).fallback.enabled
    with pytest.raises(ValueError, match="external mode"):
        ServerSettings.model_validate({"mode": "external", "fallback": {"enabled": True}})
