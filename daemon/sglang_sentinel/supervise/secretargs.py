"""Keeping the API key out of the child's argv (``ps``, ``/proc/PID/cmdline`` are world-readable).

SGLang (0.5.9 and 0.5.23 alike) reads ``--api-key`` only from its command line, but accepts
``--config FILE.yaml`` whose keys become flags *inside* the process (``prepare_server_args`` merges
them into its own argv list; the OS-visible argv keeps only the path). So the key and the admin key
go into a 0600 file of their own and the command line carries ``--config PATH``. JSON is written:
it is valid YAML for SGLang's ``yaml.safe_load`` and needs no YAML writer here; ``sentinel sim``
reads the same file.

The limit: SGLang takes one ``--config``. When the profile's own ``extra_args`` already pass one,
sentinel cannot merge into a file it does not own, so the key stays in argv and a warning says so.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

from sglang_sentinel.log import get_logger

__all__ = ["SECRETS_FILE", "SECRET_FLAGS", "Hidden", "hide_secret_flags"]

SECRET_FLAGS = ("--api-key", "--admin-api-key")
SECRETS_FILE = "server-secrets.yaml"

_log = get_logger(__name__)


def _split(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    rest: list[str] = []
    found: dict[str, str] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        flag, eq, value = arg.partition("=")
        if flag in SECRET_FLAGS:
            if eq:
                found[flag[2:]] = value
                i += 1
                continue
            if i + 1 < len(argv):
                found[flag[2:]] = argv[i + 1]
                i += 2
                continue
        rest.append(arg)
        i += 1
    return rest, found


def write_private(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` readable by the owner only (also when it existed with wider bits)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
    try:
        os.fchmod(fd, 0o600)
        os.write(fd, data)
    finally:
        os.close(fd)


class Hidden(NamedTuple):
    argv: list[str]
    # The file the keys went into (None: argv kept them, or had none).
    key_file: Path | None


def hide_secret_flags(argv: Sequence[str], directory: Path | None) -> Hidden:
    """``argv`` with ``--api-key``/``--admin-api-key`` moved into a 0600 ``--config`` file.

    ``directory`` is the state directory (0700); without one a private temporary directory is made
    for the key file alone: the caller removes it (``key_file.parent``) when the server is done
    with it. ``argv`` comes back unchanged when it carries no secret flag, or (with a warning) when
    it already has a ``--config`` of its own.
    """
    rest, found = _split(argv)
    if not found:
        return Hidden(list(argv), None)
    if "--config" in rest or any(a.startswith("--config=") for a in rest):
        _log.warning(
            "api_key_on_command_line",
            reason="the launch profile passes its own --config; SGLang takes only one, so the API key "
            "stays in argv (visible in ps). Put api-key into that file instead.",
        )
        return Hidden(list(argv), None)
    if directory is None:
        directory = Path(tempfile.mkdtemp(prefix="sentinel-"))  # created 0700
    path = directory / SECRETS_FILE
    write_private(path, (json.dumps(found, ensure_ascii=True) + "\n").encode())
    # After the program and its module (python -m sglang.launch_server): SGLang merges the file's
    # options before the others, so explicit flags still win, as with any --config.
    return Hidden([*rest, "--config", str(path)], path)
