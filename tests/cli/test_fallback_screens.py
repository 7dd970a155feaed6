"""What the operator reads about [server.fallback]: ``sentinel check``'s fallback line (a simulator
profile's SGLang version comes from its own arguments; systemd mode reads the unit's launch.env)
and ``sentinel status`` while a fallback runs."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from sglang_sentinel.cli.status import summarize
from sglang_sentinel.statusdoc import RESET_CONFIGURED_COMMAND, server_section
from sglang_sentinel.supervise.knowngood import KNOWN_GOOD_FILE
from sglang_sentinel.supervise.settings import ServerSettings
from sglang_sentinel.supervise.snapshot import FallbackView, SupervisorSnapshot, frozen
from sglang_sentinel.supervise.state import ServerState
from support.daemon_proc import clean_env, free_port
from support.fallback_reads import known_good_record

pytestmark = pytest.mark.slow

SIM_ARGS = ["--speed", "100", "--sglang-version", "0.5.9"]


def check(config: Path) -> list[str]:
    """``sentinel check``'s lines from ``fallback:`` up to ``preflight:``."""
    done = subprocess.run(
        [sys.executable, "-m", "sglang_sentinel", "check", "--config", str(config)],
        capture_output=True,
        text=True,
        env=clean_env(),
        timeout=120,
    )
    assert done.returncode in (0, 1), done.stdout + done.stderr
    lines = done.stdout.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("fallback:"))
    end = next(i for i, line in enumerate(lines) if line.startswith("preflight:"))
    return lines[start:end]


def write_config(tmp_path: Path, body: str) -> Path:
    cfg = tmp_path / "sentinel.toml"
    cfg.write_text(f'state_dir = "{tmp_path / "state"}"\n\n{body}')
    return cfg


def test_check_names_the_simulators_version_and_the_fallback_a_record_gives(tmp_path: Path) -> None:
    port = free_port()
    cfg = write_config(
        tmp_path,
        f'[server]\nprofile = "fastsim"\nport = {port}\n\n[server.fallback]\nenabled = true\n\n'
        f'[server.profiles.fastsim]\nkind = "sim"\nextra_args = {json.dumps(SIM_ARGS)}\n',
    )
    lines = check(cfg)
    assert lines[0] == "fallback:     on; 0 known-good configuration(s) on this host"
    # Offline, from the simulator's --sglang-version (it reports exactly that at /server_info).
    assert "for SGLang 0.5.9 (0 record(s) on this host, 0 of profile fastsim and this model" in lines[1]
    assert "SGLang unknown" not in "\n".join(lines)

    # A life of this profile with one flag more answered right on this SGLang: that is the fallback.
    state = tmp_path / "state"
    state.mkdir()
    flags = [["--host", ["127.0.0.1"]], ["--port", [str(port)]], ["--enable-metrics", []],
             ["--speed", ["100"]], ["--sglang-version", ["0.5.9"]],
             ["--max-running-requests", ["64"]]]  # fmt: skip
    now = time.time()
    record = known_good_record(flags, now)
    # The same flags under another profile: never a candidate.
    other = {**record, "argv_hash": "fedcba9876543210", "profile": "sim", "last_good": now + 1}
    (state / KNOWN_GOOD_FILE).write_text(json.dumps({"records": [record, other]}))
    lines = check(cfg)
    assert lines[0] == "fallback:     on; 2 known-good configuration(s) on this host"
    assert lines[1].startswith("              would be: "), lines
    assert lines[1].endswith("(history)"), lines
    assert lines[2:] == ["                --max-running-requests added: 64"]


def test_check_in_systemd_mode_reads_the_units_launch_flags(tmp_path: Path) -> None:
    launch_env = tmp_path / "launch.env"
    launch_env.write_text('SGLANG_ARGS="--model-path /models/m \\\n    --tp-size 8 --port 30000"\n')
    body = (
        '[server]\nmode = "systemd"\n\n[server.fallback]\nenabled = true\n\n'
        f'[server.systemd]\nlaunch_env = "{launch_env}"\n'
        f'fallback_env = "{tmp_path / "state" / "sglang-fallback.env"}"\n'
    )
    lines = check(write_config(tmp_path, body))
    assert lines[0] == "fallback:     on; 0 known-good configuration(s) on this host"
    # The unit's version is known once its server reports it.
    assert "SGLang unknown (0 record(s) on this host, 0 of profile systemd:sglang.service" in lines[1]
    launch_env.unlink()
    lines = check(write_config(tmp_path, body))
    assert "the unit's launch flags are unknown" in lines[1]
    assert str(launch_env) in lines[1]


def test_status_says_which_configuration_runs_why_and_how_to_undo_it() -> None:
    now = time.time()
    fb = FallbackView(
        enabled=True,
        source="fallback",
        configured_hash="aaaaaaaaaaaaaaaa",
        running_hash="bbbbbbbbbbbbbbbb",
        since=now - 120,
        reason="garbage",
        example="canary_arithmetic: garbage_repeated: '!!!!!!!!'",
        origin="history",
        differences=("--nsa-decode-backend flashmla_kv → trtllm",),
        running_argv=("python", "--nsa-decode-backend", "trtllm"),
        fallbacks=frozen({"garbage": 1, "nan_in_sampler": 0}),
        known_good=2,
        unreadable=0,
        recent_failures=0,
    )
    snap = SupervisorSnapshot(
        "child", "glm5", "bbbbbbbbbbbbbbbb", None, ServerState.READY, now - 60, True, now - 60,
        now - 60, 30.0, None, {}, {}, {}, {}, {}, {}, (), 0, fallback=fb,
    )  # fmt: skip
    server = server_section(snap, ServerSettings(), "http://127.0.0.1:30000", now)
    text = summarize({"server": server}, now)
    (line,) = [x for x in text.splitlines() if x.startswith("fallback    ")]
    assert line.startswith("fallback    running the fallback configuration bbbbbbbbbbbbbbbb (history) since ")
    assert (
        "the configured one (aaaaaaaaaaaaaaaa) answered garbage: canary_arithmetic: garbage_repeated" in line
    )
    assert line.endswith(f"run `{RESET_CONFIGURED_COMMAND}` to try it again")
    assert "  differs   --nsa-decode-backend flashmla_kv → trtllm" in text.splitlines()
    (do,) = [x for x in text.splitlines() if x.startswith("do          ")]
    assert RESET_CONFIGURED_COMMAND in do
