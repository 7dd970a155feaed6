"""``sentinel check``: rendered command line and preflight, text and JSON."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sglang_sentinel.cli import main
from support.ports import free_port


def test_check_default_sim_passes(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SENTINEL_SERVER__PORT", str(free_port()))
    assert main(["check"]) == 0
    out = capsys.readouterr().out
    assert "profile:      sim (command)" in out
    assert "-m sglang_sentinel_sim --host 127.0.0.1" in out
    assert "OK    port" in out


def test_check_glm_profile_json(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'[server]\nprofile = "glm5-nvfp4-rtxpro6000"\nport = {free_port()}\napi_key = "k3y"\n')
    assert main(["check", "--config", str(cfg), "--json"]) == 1  # no GPU, no weights, no sglang here
    data = json.loads(capsys.readouterr().out)
    assert data["ok"] is False
    assert "--dsa-prefill-backend" in data["command_line"] or "--nsa-prefill-backend" in data["command_line"]
    assert "k3y" not in data["command_line"]
    statuses = {r["check"]: r["status"] for r in data["preflight"]}
    assert statuses["model_path"] == "fail"
    assert statuses["sglang"] == "fail"


def test_check_unknown_profile_is_a_usage_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[server]\nprofile = "nope"\n')
    assert main(["check", "--config", str(cfg)]) == 2
    assert "unknown launch profile 'nope'" in capsys.readouterr().err


def test_check_systemd_mode_skips_what_the_unit_owns(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text('[server]\nmode = "systemd"\n[server.systemd]\nunit = "sglang-glm5.service"\n')
    assert main(["check", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "unit:         sglang-glm5.service" in out
    assert "port" not in out.split("preflight:")[1]
    # The hash printed is the one the supervisor reports (and tags results with) in this mode.
    from sglang_sentinel.config import load_settings
    from sglang_sentinel.supervise import Supervisor

    assert f"config hash:  {Supervisor(load_settings(cfg).server).config_hash}" in out
