from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest

from sglang_sentinel.cli import main
from sglang_sentinel.config import ConfigError, load_settings


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


def test_a_passed_environment_is_honoured_and_os_environ_is_not(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SENTINEL_SERVER__PORT", "31111")
    # The mapping is the whole environment: the process's variable is not read...
    assert load_settings(environ={"SENTINEL_SERVER__PORT": "32222"}).server.port == 32222
    assert load_settings(environ={}).server.port != 31111
    # ...and a stray variable in the process environment is not an error for a passed mapping.
    monkeypatch.setenv("SENTINEL_SERVR__PORT", "1")
    assert load_settings(environ={}).server.port != 31111
    with pytest.raises(ConfigError, match="SENTINEL_SERVR__PORT"):
        load_settings()


def test_loading_never_touches_os_environ(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A SIGHUP reload runs while scrape and GPU threads read the environment: it must not swap it.

    One thread loads with its own mappings over and over while another watches os.environ; a
    third loads with different mappings at the same time and must always get its own values.
    """
    monkeypatch.setenv("SENTINEL_SERVER__PORT", "31111")
    cfg = tmp_path / "c.toml"
    cfg.write_text("[server]\nhost = '127.0.0.9'\n")
    before = dict(os.environ)
    # Switch threads as often as possible, so that a swap of os.environ would be seen.
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    stop = threading.Event()
    seen: list[dict[str, str]] = []
    wrong: list[tuple[str, int]] = []

    def watch() -> None:
        while not stop.is_set():
            now = dict(os.environ)
            if now != before:
                seen.append(now)

    def load(name: str, port: int) -> None:
        for _ in range(40):
            s = load_settings(cfg, environ={"SENTINEL_SERVER__PORT": str(port), "HOME": "/nowhere"})
            if s.server.port != port or s.server.host != "127.0.0.9":
                wrong.append((name, s.server.port))

    watcher = threading.Thread(target=watch)
    loaders = [threading.Thread(target=load, args=(f"t{i}", 32000 + i)) for i in range(2)]
    watcher.start()
    for t in loaders:
        t.start()
    try:
        for t in loaders:
            t.join()
    finally:
        stop.set()
        watcher.join()
        sys.setswitchinterval(interval)
    assert wrong == []
    assert seen == []
    assert dict(os.environ) == before


class _FrozenEnviron(dict[str, str]):
    """os.environ that refuses writes: any mutation during a load fails the test where it happens."""

    def _refuse(self, *args: object, **kwargs: object) -> None:
        raise AssertionError("os.environ was mutated")

    __setitem__ = __delitem__ = clear = update = pop = popitem = setdefault = _refuse  # type: ignore[assignment]


def test_load_with_a_mapping_writes_nothing_to_os_environ(tmp_path: Path) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text("[server]\nport = 31000\n")
    real = os.environ
    # Swapped in the test body, not by monkeypatch: pytest itself writes os.environ between phases.
    # Replacing the object (not its contents) is the point: only this code sees the frozen one.
    os.environ = _FrozenEnviron(real)  # type: ignore[assignment]  # noqa: B003
    try:
        assert load_settings(cfg, environ={"SENTINEL_SERVER__HOST": "127.0.0.3"}).server.host == "127.0.0.3"
        assert load_settings(environ={"SENTINEL_CONFIG": str(cfg)}).server.port == 31000
        with pytest.raises(ConfigError, match=r"server\.port"):
            load_settings(cfg, environ={"SENTINEL_SERVER__PORT": "x"})
    finally:
        os.environ = real  # noqa: B003


def test_api_key_file_is_read_stripped_and_must_be_one_line(tmp_path: Path) -> None:
    key = tmp_path / "key"
    key.write_text("  sk-from-file-0000  \n")
    cfg = tmp_path / "c.toml"
    cfg.write_text(f"[server]\napi_key_file = '{key}'\n")
    assert load_settings(cfg, environ={}).server.api_key == "sk-from-file-0000"

    key.write_text("sk-first\nsk-second\n")
    with pytest.raises(ConfigError) as exc:
        load_settings(cfg, environ={})
    assert "api_key_file" in str(exc.value)
    assert "several lines" in str(exc.value)
    assert "sk-first" not in str(exc.value)

    for content, why in (("", "empty"), (None, "No such file")):
        if content is None:
            key.unlink()
        else:
            key.write_text(content)
        with pytest.raises(ConfigError, match=why):
            load_settings(cfg, environ={})

    key.write_text("sk-x-0000\n")
    cfg.write_text(f"[server]\napi_key = 'sk-inline-0000'\napi_key_file = '{key}'\n")
    with pytest.raises(ConfigError, match="both set"):
        load_settings(cfg, environ={})


def test_sentinel_api_key_is_not_an_unknown_setting() -> None:
    settings = load_settings(environ={"SENTINEL_API_KEY": "sk-env-0000"})
    assert settings.server.api_key == ""  # bench/sweep read it (cli/target.py); the daemon's key is its own
    with pytest.raises(ConfigError, match="SENTINEL_APIKEY"):
        load_settings(environ={"SENTINEL_APIKEY": "x"})


@pytest.mark.parametrize(
    ("toml", "env", "field"),
    [
        ('[server]\napi_key = "sk-abc\\ndef"\n', {}, "server.api_key"),
        ("", {"SENTINEL_SERVER__API_KEY": "sk-abc\rdef"}, "server.api_key"),
    ],
)
def test_a_secret_with_control_characters_is_refused_and_not_echoed(
    tmp_path: Path, toml: str, env: dict[str, str], field: str
) -> None:
    path = tmp_path / "c.toml"
    path.write_text(toml)
    with pytest.raises(ConfigError) as info:
        load_settings(path, environ=env)
    text = str(info.value)
    assert field in text
    assert "control characters" in text
    assert "abc" not in text  # the secret itself never in the message
    assert "got" not in text


@pytest.mark.parametrize("host", ["", " "])
def test_an_empty_exporter_host_is_an_error_naming_the_field(tmp_path: Path, host: str) -> None:
    path = tmp_path / "c.toml"
    path.write_text(f'[exporter]\nhost = "{host}"\n')
    with pytest.raises(ConfigError, match=r"exporter\.host: empty host"):
        load_settings(path, environ={})


def test_all_interfaces_only_when_written() -> None:
    from sglang_sentinel.cli.run import parse_listen

    assert parse_listen("0.0.0.0:9480") == ("0.0.0.0", 9480)
    assert parse_listen("[::]:9480") == ("::", 9480)
    for value in ("[]:9480", ":9480", " :9480"):
        with pytest.raises(ValueError, match="--listen"):
            parse_listen(value)


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["bench", "--num-prompts", "-5"], "--num-prompts"),
        (["bench", "--max-concurrency", "0"], "--max-concurrency"),
        (["bench", "--request-rate", "-1"], "--request-rate"),
        (["bench", "--random-input-len", "0"], "--random-input-len"),
        (["bench", "--random-range-ratio", "1.5"], "--random-range-ratio"),
        (["bench", "--warmup-requests", "-1"], "--warmup-requests"),
        (["bench", "--duration", "0"], "--duration"),
        (["bench", "--request-timeout", "nan"], "--request-timeout"),
        (["bench", "--request-rate", "0"], "--request-rate"),
        (["bench", "--gsp-prompts-per-group", "0"], "--gsp-prompts-per-group"),
        (["bench", "--gsp-range-ratio", "1.5"], "--gsp-range-ratio"),
        (["bench", "--mooncake-num-rounds", "0"], "--mooncake-num-rounds"),
        (["bench", "--mooncake-slowdown-factor", "-1"], "--mooncake-slowdown-factor"),
        (["bench", "--agentic-max-turns", "0"], "--agentic-max-turns"),
        (["sweep", "--start-concurrency", "0"], "--start-concurrency"),
        (["sweep", "--max-concurrency", "0"], "--max-concurrency"),
        (["sweep", "--growth-factor", "1"], "--growth-factor"),
        (["sweep", "--max-requests", "-3"], "--max-requests"),
        (["sweep", "--slo-ttft", "-1"], "--slo-ttft"),
    ],
)
def test_bad_numeric_flags_name_the_flag(
    argv: list[str], flag: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as info:
        main(argv)
    assert info.value.code == 2
    err = capsys.readouterr().err
    assert f"argument {flag}:" in err, err
    assert "Traceback" not in err


def test_kind_is_auto_in_external_mode_unless_written() -> None:
    from sglang_sentinel.supervise.settings import ServerSettings

    assert ServerSettings(mode="external").kind == "auto"
    assert ServerSettings().kind == "server"  # child: sentinel launches a server, never a router
    assert ServerSettings(mode="systemd").kind == "server"
    assert ServerSettings(mode="external", kind="server").kind == "server"  # an explicit kind wins
    assert ServerSettings(mode="external", kind="router").kind == "router"
    with pytest.raises(ValueError, match='kind = "auto" needs mode = "external"'):
        ServerSettings(kind="auto")
