"""The API key leaves argv for a 0600 --config file; server lines and logs are masked."""

from __future__ import annotations

import json
import stat
from pathlib import Path

import pytest

from sglang_sentinel.redact import MASK, redact, redact_argv, redact_obj, register_secret
from sglang_sentinel.supervise.logbus import LogBus
from sglang_sentinel.supervise.secretargs import SECRETS_FILE, hide_secret_flags


def test_the_key_moves_into_a_private_config_file(tmp_path: Path) -> None:
    argv = [
        "py",
        "-m",
        "sglang.launch_server",
        "--api-key",
        "k-123456",
        "--admin-api-key=adm-98765",
        "--port",
        "1",
    ]
    out, key_file = hide_secret_flags(argv, tmp_path)
    assert out == [
        "py",
        "-m",
        "sglang.launch_server",
        "--port",
        "1",
        "--config",
        str(tmp_path / SECRETS_FILE),
    ]
    path = tmp_path / SECRETS_FILE
    assert key_file == path
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    # JSON is YAML: SGLang's ConfigArgumentMerger turns each key into "--key value".
    assert json.loads(path.read_text()) == {"api-key": "k-123456", "admin-api-key": "adm-98765"}


def test_an_existing_file_is_narrowed_and_rewritten(tmp_path: Path) -> None:
    path = tmp_path / SECRETS_FILE
    path.write_text("old")
    path.chmod(0o644)
    hide_secret_flags(["x", "--api-key", "new-key-1"], tmp_path)
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert "new-key-1" in path.read_text()


def test_no_secret_no_file_and_a_foreign_config_keeps_argv(tmp_path: Path) -> None:
    assert hide_secret_flags(["x", "--port", "1"], tmp_path) == (["x", "--port", "1"], None)
    assert not (tmp_path / SECRETS_FILE).exists()
    # SGLang takes one --config: sentinel cannot merge into the user's file, so the key stays (warned).
    argv = ["x", "--config", "mine.yaml", "--api-key", "k-123456"]
    assert hide_secret_flags(argv, tmp_path) == (argv, None)
    assert not (tmp_path / SECRETS_FILE).exists()


def test_without_a_state_dir_a_private_temporary_directory_is_used() -> None:
    out, path = hide_secret_flags(["x", "--api-key", "k-123456"], None)
    assert path is not None
    assert out[-1] == str(path)
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    path.unlink()
    path.parent.rmdir()


def test_redaction_of_known_shapes_and_registered_values() -> None:
    line = "[2026] server_args=ServerArgs(model_path='m', api_key='unregistered-zz', admin_api_key=None)"
    assert (
        redact(line) == f"[2026] server_args=ServerArgs(model_path='m', api_key='{MASK}', admin_api_key=None)"
    )
    assert redact_argv(["s", "--api-key", "abc", "--api-key=def"]) == [
        "s",
        "--api-key",
        MASK,
        f"--api-key={MASK}",
    ]
    register_secret("registered-key-77")
    assert "registered-key-77" not in redact("GET /x?key=registered-key-77 failed")
    register_secret("abc")  # too short to mask safely: ignored
    assert redact("abc") == "abc"
    assert redact_obj(
        {"api_key": "v", "tokens_per_hour": 5, "api_key_file": "/p", "n": ["registered-key-77"]}
    ) == {
        "api_key": MASK,
        "tokens_per_hour": 5,
        "api_key_file": "/p",
        "n": [MASK],
    }


@pytest.mark.parametrize("existing_mode", [None, 0o644])
def test_server_log_is_owner_only_and_masked(tmp_path: Path, existing_mode: int | None) -> None:
    path = tmp_path / "server.log"
    if existing_mode is not None:
        path.write_text("")
        path.chmod(existing_mode)
    bus = LogBus(path, max_bytes=200, backups=1, tail_lines=10)
    seen: list[str] = []
    bus.add_listener(lambda line: seen.append(line.text))
    bus.publish("server_args=ServerArgs(api_key='line-key-31337', port=1)", "child")
    for i in range(20):  # past max_bytes: the rotated file and its successor are private too
        bus.publish(f"line {i} " + "x" * 20, "child")
    bus.close()
    for p in (path, tmp_path / "server.log.1"):
        assert stat.S_IMODE(p.stat().st_mode) == 0o600
    text = "".join(p.read_text() for p in tmp_path.glob("server.log*"))
    assert "line-key-31337" not in text + "".join(seen) + "".join(bus.tail())
    assert f"api_key='{MASK}'" in seen[0]
