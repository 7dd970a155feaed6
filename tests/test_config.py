from __future__ import annotations

from pathlib import Path

import pytest

from sentinel.cli import main
from sentinel.config import ConfigError, load_settings


def test_defaults_are_the_embedded_simulator() -> None:
    s = load_settings(environ={})
    assert s.server.mode == "child"
    assert s.server.profile == "sim"
    assert s.server.host == "127.0.0.1"


def test_env_beats_file(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[server]\nport = 31000\nhost = '127.0.0.2'\n")
    s = load_settings(cfg, environ={"SENTINEL_SERVER__PORT": "32000"})
    assert s.server.port == 32000
    assert s.server.host == "127.0.0.2"


def test_config_path_from_env(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[server]\nport = 31001\n")
    assert load_settings(environ={"SENTINEL_CONFIG": str(cfg)}).server.port == 31001


@pytest.mark.parametrize(
    ("toml", "env", "needle"),
    [
        ("[server]\nprot = 1\n", {}, "server.prot: unknown key"),
        ("[nonsense]\nx = 1\n", {}, "nonsense: unknown key"),
        ("[server]\nport = 'x'\n", {}, "server.port: Input should be a valid integer"),
        ("[server]\nport = 70000\n", {}, "server.port: Input should be less than or equal to 65535"),
        ("", {"SENTINEL_SERVER__PORT": "abc"}, "server.port"),
        ("", {"SENTINEL_SERVR__PORT": "1"}, "unknown environment variable(s): SENTINEL_SERVR__PORT"),
        ("[server\n", {}, "invalid TOML"),
    ],
)
def test_bad_config_names_the_field(tmp_path: Path, toml: str, env: dict[str, str], needle: str) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_settings(cfg, environ=env)
    assert needle in str(info.value)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="not found"):
        load_settings(tmp_path / "nope.toml", environ={})


def test_cli_exit_code_2_without_traceback(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[server]\nmode = 'kubernetes'\n")
    assert main(["config", "--config", str(cfg)]) == 2
    err = capsys.readouterr().err
    assert "server.mode" in err
    assert "Traceback" not in err


def test_config_command_masks_secrets(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SENTINEL_SERVER__API_KEY", "hunter2-secret")
    assert main(["config"]) == 0
    out = capsys.readouterr().out
    assert "hunter2-secret" not in out
    assert '"api_key": "<set>"' in out
