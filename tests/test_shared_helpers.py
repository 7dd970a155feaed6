"""Small modules shared by several packages: atomic writes, URL hosts, target options, lazy exports."""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from sglang_sentinel.atomic import atomic_write_bytes
from sglang_sentinel.cli.common import CliError
from sglang_sentinel.cli.target import add_target_options, read_api_key, target_base_url
from sglang_sentinel.lazy import lazy_exports
from sglang_sentinel.netloc import is_this_host, url_host


def test_atomic_write_replaces_and_leaves_no_temporary(tmp_path: Path) -> None:
    target = tmp_path / "doc.json"
    atomic_write_bytes(target, b"old")
    atomic_write_bytes(target, b"new")
    assert target.read_bytes() == b"new"
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]


def test_atomic_write_failure_keeps_the_old_version(tmp_path: Path) -> None:
    target = tmp_path / "doc.json"
    atomic_write_bytes(target, b"old")
    with pytest.raises(TypeError):
        atomic_write_bytes(target, "not bytes")  # type: ignore[arg-type]
    assert target.read_bytes() == b"old"
    assert [p.name for p in tmp_path.iterdir()] == ["doc.json"]
    with pytest.raises(FileNotFoundError):
        atomic_write_bytes(tmp_path / "missing" / "doc.json", b"x")


@pytest.mark.parametrize(
    ("host", "expected"),
    [
        ("0.0.0.0", "127.0.0.1"),
        ("", "127.0.0.1"),
        ("::", "[::1]"),
        ("::1", "[::1]"),
        ("fe80::2", "[fe80::2]"),
        ("10.1.2.3", "10.1.2.3"),
        ("gpu-node-7", "gpu-node-7"),
    ],
)
def test_url_host(host: str, expected: str) -> None:
    assert url_host(host) == expected


def _default_route_address() -> str | None:
    """This host's address on its default route: a UDP connect picks it and sends nothing."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        try:
            sock.connect(("192.0.2.1", 9))  # TEST-NET-1 (RFC 5737): routed, never reached
        except OSError:
            return None
        return str(sock.getsockname()[0])


def test_is_this_host() -> None:
    for host in ("127.0.0.1", "localhost", "[::1]", "::1", "0.0.0.0"):
        assert is_this_host(host), host
    # A documentation address no host holds, and a name that never resolves (RFC 6761).
    assert not is_this_host("192.0.2.1")
    assert not is_this_host("node2.invalid")
    own = _default_route_address()
    if own is not None:  # a box with no route at all has only loopback, checked above
        assert is_this_host(own)


def _target_args(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    add_target_options(parser.add_argument_group("target"))
    return parser.parse_args(list(argv))


def test_target_base_url_precedence() -> None:
    assert target_base_url(_target_args(), "127.0.0.1", 30000) == "http://127.0.0.1:30000"
    assert target_base_url(_target_args("--port", "31000"), "h", 1) == "http://h:31000"
    args = _target_args("--host", "x", "--base-url", "http://y:2")
    assert target_base_url(args, "h", 1) == "http://y:2"


def test_api_key_precedence(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SENTINEL_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    assert read_api_key(None) is None
    assert read_api_key(None, "") is None
    assert read_api_key(None, "configured") == "configured"
    monkeypatch.setenv("OPENAI_API_KEY", "openai")
    assert read_api_key(None, "configured") == "openai"
    monkeypatch.setenv("SENTINEL_API_KEY", " sentinel\n")
    assert read_api_key(None, "configured") == "sentinel"
    key_file = tmp_path / "key"
    key_file.write_text("from-file\n")
    assert read_api_key(key_file, "configured") == "from-file"


def test_api_key_file_errors_name_the_file_not_the_key(tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.write_text("  \n")
    with pytest.raises(CliError, match="is empty") as info:
        read_api_key(empty)
    assert info.value.exit_code == 2
    with pytest.raises(CliError, match="cannot read --api-key-file") as info:
        read_api_key(tmp_path / "absent")
    assert info.value.exit_code == 2


def test_lazy_exports_resolve_cache_and_reject_unknown_names() -> None:
    import sglang_sentinel.calibrate as calibrate

    getattr_ = lazy_exports(calibrate.__name__, {"ResultStore": "sglang_sentinel.calibrate.store"})
    from sglang_sentinel.calibrate.store import ResultStore

    assert getattr_("ResultStore") is ResultStore
    assert vars(calibrate)["ResultStore"] is ResultStore
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        getattr_("nope")


def test_config_import_leaves_heavy_packages_unloaded() -> None:
    # Every CLI command loads the config: it must not drag in the load engine, HTTP clients or
    # the supervisor (what the lazy package __init__ modules are for).
    code = (
        "import sys, sglang_sentinel.config;"
        "heavy = ['aiohttp', 'httpx', 'matplotlib', 'sglang_sentinel.load.engine',"
        " 'sglang_sentinel.supervise.supervisor', 'sglang_sentinel.calibrate.search',"
        " 'sglang_sentinel.collect.registry', 'sglang_sentinel.export.server',"
        " 'sglang_sentinel.schedule.scheduler'];"
        "print(sorted(m for m in heavy if m in sys.modules))"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("SENTINEL_")}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, env=env)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
