"""A reload compares the file with the file: the command line's overrides (the container image's
``--listen 0.0.0.0:9480``) are applied to the reloaded file too, so a reload does not warn about a
section nobody changed, and still warns about one somebody did."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_sentinel.config import Settings, load_settings
from sglang_sentinel.daemon import Daemon
from sglang_sentinel.log import configure_logging


def _listen_everywhere(settings: Settings) -> Settings:
    exporter = settings.exporter.model_copy(update={"host": "0.0.0.0", "port": 9480})
    return settings.model_copy(update={"exporter": exporter})


def _reload_log(tmp_path: Path, capsys: pytest.CaptureFixture[str], edit: str) -> str:
    cfg = tmp_path / "sentinel.toml"
    cfg.write_text(f'state_dir = "{tmp_path / "state"}"\n\n[exporter]\nport = 19480\n')
    environ: dict[str, str] = {}
    daemon = Daemon(
        _listen_everywhere(load_settings(cfg, environ=environ)),
        config_path=str(cfg),
        environ=environ,
        overrides=_listen_everywhere,
    )
    configure_logging("info", "json")
    capsys.readouterr()
    cfg.write_text(cfg.read_text() + edit)
    daemon._reload()
    return capsys.readouterr().err


def test_a_reload_under_a_command_line_listen_says_nothing_about_the_exporter(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _reload_log(tmp_path, capsys, "\n[schedule.budget]\ntokens_per_hour = 4242\n")
    assert "config_reloaded" in err
    assert "reload_needs_restart" not in err


def test_a_reload_still_names_a_section_that_did_change(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    err = _reload_log(tmp_path, capsys, "\n[server]\nport = 31000\n")
    assert "reload_needs_restart" in err
    assert "server" in err
