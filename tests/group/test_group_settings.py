"""``[group]``: each bad value is a ConfigError naming the field (exit 2), the token file is
checked like a key file and never shown; the launch gets SGLang's multi-node flags."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_sentinel.config import ConfigError, load_settings
from sglang_sentinel.group import member_of
from sglang_sentinel.supervise.launch import render_command

TOKEN = "a-shared-secret-of-32-characters"


def _token(tmp_path: Path, text: str = TOKEN, mode: int = 0o600, name: str = "token") -> Path:
    path = tmp_path / name
    path.write_text(text + "\n")
    path.chmod(mode)
    return path


def _load(tmp_path: Path, body: str) -> object:
    cfg = tmp_path / "s.toml"
    cfg.write_text(body)
    return load_settings(cfg, environ={})


def _group(tmp_path: Path, **fields: object) -> str:
    base: dict[str, object] = {
        "nnodes": 2,
        "node_rank": 0,
        "dist_init_addr": "10.0.0.1:5000",
        "peers": ["http://node2:9480"],
        "token_file": str(_token(tmp_path)),
    }
    base.update(fields)
    lines = []
    for k, v in base.items():
        if v is None:
            continue
        lines.append(
            f"{k} = {v!r}".replace("'", '"') if not isinstance(v, bool) else f"{k} = {str(v).lower()}"
        )
    return "[group]\n" + "\n".join(lines) + "\n"


def test_a_valid_group_and_its_launch_flags(tmp_path: Path) -> None:
    s = _load(tmp_path, _group(tmp_path))
    g = s.group  # type: ignore[attr-defined]
    assert (g.nnodes, g.node_rank, g.read_token()) == (2, 0, TOKEN)
    assert TOKEN not in repr(g)
    assert TOKEN not in g.model_dump_json()
    member = member_of(g)
    assert member is not None
    cmd = member.apply(render_command(s.server))  # type: ignore[attr-defined]
    assert cmd.argv[-6:] == ("--nnodes", "2", "--node-rank", "0", "--dist-init-addr", "10.0.0.1:5000")
    assert member.apply(cmd) == cmd  # applied once
    assert cmd.config_hash != render_command(s.server).config_hash  # type: ignore[attr-defined]


def test_no_group_by_default(tmp_path: Path) -> None:
    assert member_of(_load(tmp_path, "").group) is None  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        ({"node_rank": 2}, "group: node_rank must be 0..1 (got 2)"),
        ({"dist_init_addr": "node1"}, "dist_init_addr must be HOST:PORT"),
        ({"peers": []}, "peers: rank 0 needs the agent URL"),
        ({"peers": ["ftp://node2:1"]}, "group.peers"),
        ({"peers": ["http://node2"]}, "group.peers"),
        ({"peers": ["http://u:p@node2:9480"]}, "group.peers"),
        ({"token_file": None}, "token_file: required"),
        ({"poll_interval": 0}, "group.poll_interval"),
        ({"nnodes": 0}, "group.nnodes"),
        ({"wat": 1}, "group.wat: unknown key"),
    ],
)
def test_bad_group_values_name_the_field(tmp_path: Path, fields: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, _group(tmp_path, **fields))
    assert needle in str(err.value)


@pytest.mark.parametrize(
    ("text", "mode", "needle"),
    [
        (TOKEN, 0o644, "readable by group or others"),
        ("short", 0o600, "at least 16 characters"),
        (TOKEN + "\nsecond", 0o600, "spans several lines"),
    ],
)
def test_bad_token_files(tmp_path: Path, text: str, mode: int, needle: str) -> None:
    path = _token(tmp_path, text, mode, name="bad-token")
    with pytest.raises(ConfigError) as err:
        _load(tmp_path, _group(tmp_path, token_file=str(path)))
    assert needle in str(err.value)
    assert TOKEN not in str(err.value)


def test_missing_token_file(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"token_file .*missing"):
        _load(tmp_path, _group(tmp_path, token_file=str(tmp_path / "missing")))


def test_a_token_in_the_config_itself_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="set token_file instead"):
        _load(tmp_path, _group(tmp_path, token=TOKEN))


def test_rank1_cannot_be_external(tmp_path: Path) -> None:
    body = '[server]\nmode = "external"\n' + _group(tmp_path, node_rank=1, peers=[])
    with pytest.raises(ConfigError, match="dummy /health"):
        _load(tmp_path, body)
