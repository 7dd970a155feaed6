"""sglang_sentinel.log: one line shape everywhere; on the journal each line carries its syslog level."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

_EMIT = """
import logging
from sglang_sentinel.log import configure_logging, get_logger
configure_logging("debug", "auto")
log = get_logger("sentinel.test")
log.debug("a_debug")
log.info("an_info")
log.warning("a_warning")
log.error("an_error")
log.critical("a_critical")
logging.getLogger("aiohttp.server").error("foreign_error")
"""


def _emit(tmp_path: Path, journal: bool) -> list[str]:
    """Run the logging setup in a child whose stderr is a file; as journald would, point
    JOURNAL_STREAM at that file's device and inode (or at another file)."""
    out = tmp_path / "stderr"
    other = tmp_path / "other"
    other.touch()
    with out.open("wb") as f:
        st = os.fstat(f.fileno()) if journal else os.stat(other)
        env = {**os.environ, "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        subprocess.run([sys.executable, "-c", _EMIT], stderr=f, env=env, check=True, timeout=60)
    return out.read_text().splitlines()


def test_journal_lines_start_with_their_syslog_level(tmp_path: Path) -> None:
    lines = _emit(tmp_path, journal=True)
    expected = {
        "a_debug": "<7>",
        "an_info": "<6>",
        "a_warning": "<4>",
        "an_error": "<3>",
        "a_critical": "<2>",
        "foreign_error": "<3>",
    }
    seen = {}
    for line in lines:
        prefix, body = line[:3], line[3:]
        record = json.loads(body)  # still one JSON object after the prefix
        seen[record["event"]] = prefix
    assert seen == expected


def test_elsewhere_lines_are_plain_json(tmp_path: Path) -> None:
    # JOURNAL_STREAM inherited, stderr redirected elsewhere: not the journal, no prefix.
    lines = _emit(tmp_path, journal=False)
    assert len(lines) == 6
    for line in lines:
        assert json.loads(line)["level"] in {"debug", "info", "warning", "error", "critical"}


_FLOATS = """
import sys
from sglang_sentinel.log import configure_logging, get_logger
configure_logging("info", sys.argv[1])
get_logger("sentinel.test").info("a_figure", elapsed_s=0.123456789012, rates=[1234.56789, 2], count=3)
"""


def _figures(fmt: str) -> str:
    env = {k: v for k, v in os.environ.items() if k != "JOURNAL_STREAM"}
    done = subprocess.run(
        [sys.executable, "-c", _FLOATS, fmt], capture_output=True, text=True, env=env, check=True, timeout=60
    )
    return done.stderr


def test_console_lines_round_floats_json_keeps_them() -> None:
    console = _figures("console")
    assert "elapsed_s=0.1235" in console
    assert "1235.0" in console
    assert "1234.56789" not in console
    assert "count=3" in console
    record = json.loads(_figures("json"))
    assert record["elapsed_s"] == 0.123456789012  # full precision for machines
    assert record["rates"] == [1234.56789, 2]


_SENTINEL = "import sys; from sglang_sentinel.cli import main; sys.exit(main(sys.argv[1:]))"


def test_a_config_error_exit_is_at_error_priority_on_the_journal(tmp_path: Path) -> None:
    """`sentinel run` refusing its config (exit 2) says why at error priority, so `journalctl -p err`
    shows the reason and not only systemd's "Failed to start"."""
    config = tmp_path / "bad.toml"
    config.write_text("[server]\nport = 'not a port'\n")
    out = tmp_path / "stderr"
    with out.open("wb") as f:
        st = os.fstat(f.fileno())
        env = {**os.environ, "JOURNAL_STREAM": f"{st.st_dev}:{st.st_ino}"}
        done = subprocess.run(
            [sys.executable, "-c", _SENTINEL, "run", "--config", str(config)],
            stderr=f,
            env=env,
            timeout=120,
            check=False,
        )
    assert done.returncode == 2
    lines = [line for line in out.read_text().splitlines() if line.strip()]
    assert lines
    assert all(line.startswith("<3>") for line in lines), lines
    assert "server.port" in out.read_text()


def test_lines_go_to_the_current_stderr_not_a_closed_one(monkeypatch: pytest.MonkeyPatch) -> None:
    """configure_logging while stderr is one stream, that stream closed and replaced (a test's
    captured stream, a host's redirect): later lines, the stdlib's own too, reach the new one."""
    import io
    import logging

    from sglang_sentinel.log import configure_logging, get_logger

    first = io.StringIO()
    monkeypatch.setattr(sys, "stderr", first)
    configure_logging("debug", "json")
    first.close()
    second = io.StringIO()
    monkeypatch.setattr(sys, "stderr", second)
    get_logger("test").info("after_replace")
    logging.getLogger("asyncio").debug("Using selector: %s", "EpollSelector")
    lines = [json.loads(line) for line in second.getvalue().splitlines()]
    assert [line["event"] for line in lines] == ["after_replace", "Using selector: EpollSelector"]
    configure_logging("warning", "json")
