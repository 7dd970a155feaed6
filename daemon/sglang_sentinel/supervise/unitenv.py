"""The launch flags of a systemd unit: read from its environment files, and sentinel's fallback file.

deploy/sglang.service passes SGLang's flags in one variable (``ExecStart=... $SGLANG_ARGS``) from
two environment files: ``/etc/sglang/launch.env`` (the operator's) and, after it, the optional
``/var/lib/sentinel/sglang-fallback.env`` that sentinel writes while a fallback is in force
(``[server.fallback]``, supervise/fallback.py). systemd reads environment files at every start
of the unit, a later file's assignment of a variable wins, and a ``-`` before the path makes a
missing file no error (systemd.exec(5), ``EnvironmentFile=``:
https://www.freedesktop.org/software/systemd/man/latest/systemd.exec.html#EnvironmentFile=), so
writing or removing the fallback file and restarting the unit switches the flags without a
``daemon-reload`` and without touching a file the operator edits.

The reading follows systemd's own parser (``parse_env_file_internal`` in src/basic/env-file.c of
https://github.com/systemd/systemd): ``#``/``;`` comment lines, ``KEY=VALUE``, single quotes
literal, double quotes with ``\\"`` ``\\\\`` ``\\``` ``\\$`` escapes, a backslash-newline joins
lines, unquoted values trimmed. The value then becomes arguments as ``$VAR`` on a command line
does: split at whitespace, quotes respected and removed (systemd.service(5), "Command lines").
The file sentinel writes holds only flags without quotes, backslashes or control characters (what
install.sh moves into launch.env, too), each word single-quoted only where it has a space.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Sequence
from pathlib import Path

from sglang_sentinel.atomic import atomic_write_bytes

__all__ = ["UnitEnvError", "parse_env_file", "read_args", "render_args_file", "split_words"]

_NEEDS_ESCAPE_IN_DOUBLE_QUOTES = '"\\`$'
# What the fallback file never carries: it could not be written back unambiguously (and install.sh
# refuses the same in the flags it moves into launch.env).
_UNWRITABLE = re.compile(r"['\"\\\x00-\x1f\x7f]")


class UnitEnvError(ValueError):
    """An environment file that cannot be read, or flags that cannot be written into one."""


def parse_env_file(text: str) -> dict[str, str]:
    """Variable -> value, as systemd reads an ``EnvironmentFile=`` (later assignments win)."""
    env: dict[str, str] = {}
    key: list[str] = []
    value: list[str] = []
    # The value's length up to its last character that stays: systemd trims an unquoted value's
    # trailing whitespace, not a quoted or escaped one.
    keep = 0
    state = "pre_key"

    def push() -> None:
        name = "".join(key).strip()
        if name:
            env[name] = "".join(value[:keep])

    for c in text + "\n":
        if state == "pre_key":
            if c in "#;":
                state = "comment"
            elif not c.isspace():
                key, value, keep, state = [c], [], 0, "key"
        elif state == "key":
            if c == "\n":
                state = "pre_key"  # a line without "=": ignored
            elif c == "=":
                state = "pre_value"
            else:
                key.append(c)
        elif state == "pre_value":
            if c == "\n":
                push()
                state = "pre_key"
            elif c == "'":
                state = "single"
            elif c == '"':
                state = "double"
            elif c == "\\":
                state = "value_escape"
            elif not c.isspace():
                value.append(c)
                keep = len(value)
                state = "value"
        elif state == "value":
            if c == "\n":
                push()
                state = "pre_key"
            elif c == "\\":
                state = "value_escape"
            else:
                value.append(c)
                if not c.isspace():
                    keep = len(value)
        elif state == "value_escape":
            state = "value"
            if c != "\n":  # a backslash-newline joins the lines
                value.append(c)
                keep = len(value)
        elif state == "single":
            if c == "'":
                keep = len(value)
                state = "pre_value"
            else:
                value.append(c)
        elif state == "double":
            if c == '"':
                keep = len(value)
                state = "pre_value"
            elif c == "\\":
                state = "double_escape"
            else:
                value.append(c)
        elif state == "double_escape":
            state = "double"
            if c in _NEEDS_ESCAPE_IN_DOUBLE_QUOTES:
                value.append(c)
            elif c != "\n":
                value.extend(("\\", c))
        elif state == "comment":
            if c == "\\":
                state = "comment_escape"
            elif c == "\n":
                state = "pre_key"
        elif state == "comment_escape":
            state = "comment"
    return env


def split_words(value: str) -> tuple[str, ...]:
    """``$VAR`` on a command line: split at whitespace, quotes respected and removed."""
    try:
        return tuple(shlex.split(value, comments=False, posix=True))
    except ValueError as exc:
        raise UnitEnvError(f"cannot split into arguments: {exc}") from None


def read_args(paths: Sequence[Path], variable: str) -> tuple[str, ...] | None:
    """The arguments ``$variable`` gives the unit's command line: the last of ``paths`` (in the
    unit's order) that sets it wins; a missing file is skipped (the unit's ``-``). None when none
    sets it. Raises UnitEnvError for a file that exists but cannot be read."""
    found: str | None = None
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except FileNotFoundError:
            continue
        except (OSError, UnicodeDecodeError) as exc:
            raise UnitEnvError(f"{path}: {getattr(exc, 'strerror', None) or exc}") from None
        env = parse_env_file(text)
        if variable in env:
            found = env[variable]
    return None if found is None else split_words(found)


def render_args_file(variable: str, args: Sequence[str], header: str) -> bytes:
    """An environment file setting ``variable`` to ``args`` (read back as exactly ``args``)."""
    bad = [a for a in args if _UNWRITABLE.search(a) or not a]
    if bad:
        raise UnitEnvError(f"cannot write {bad[0]!r} into an environment file (quotes, backslashes, control)")
    words = " ".join(f"'{a}'" if any(ch.isspace() for ch in a) else a for a in args)
    quoted = "".join("\\" + ch if ch in _NEEDS_ESCAPE_IN_DOUBLE_QUOTES else ch for ch in words)
    lines = [f"# {line}" if line else "#" for line in header.splitlines()]
    return ("\n".join([*lines, f'{variable}="{quoted}"']) + "\n").encode()


def write_args_file(path: Path, variable: str, args: Sequence[str], header: str) -> bool:
    """Write the file (atomically, mode 0600: it may carry the API key); False when it already said
    exactly that. Raises UnitEnvError or OSError."""
    data = render_args_file(variable, args, header)
    try:
        if path.read_bytes() == data:
            return False
    except FileNotFoundError:
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_bytes(path, data)
    return True


def remove_args_file(path: Path) -> bool:
    """Remove the file; False when there was none. Raises OSError."""
    try:
        os.unlink(path)
    except FileNotFoundError:
        return False
    return True
