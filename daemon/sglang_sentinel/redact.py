"""Keeping secrets out of everything sentinel writes: logs, server.log, state files, JSON output.

Two complementary nets:

- Values: the API key (and any other secret the process holds) is *registered* once when the
  configuration is read; :func:`redact` replaces every registered value in a text. This catches a
  key wherever it turns up (an exception message, a copied server line, a URL).
- Shapes: SGLang prints its arguments at start-up (``server_args=ServerArgs(... api_key='...')``)
  and a command line carries ``--api-key VALUE``; those are masked even for a key that was never
  registered (e.g. one a user put into ``extra_args``).

The log processor :func:`scrub_event` applies both to every log record, and drops the value of any
field whose name says it is a secret (``authorization``, ``password``, ``api_key``...).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, MutableMapping, Sequence
from typing import Any

__all__ = [
    "MASK",
    "is_secret_name",
    "redact",
    "redact_argv",
    "redact_obj",
    "register_secret",
    "scrub_event",
]

MASK = "[redacted]"
# Shorter values are not registered: masking every "abc" in every log line would garble the logs
# and a 3-character key protects nothing anyway.
_MIN_SECRET = 6
# Field names that hold a secret. Substrings, except the generic words, which must be the whole
# name or its last part: "tokens_per_hour" is no secret, "auth_token" is. Paths to secrets are not
# secrets ("api_key_file" is shown).
_SECRET_PARTS = ("api_key", "apikey", "api-key", "password", "passwd", "authorization")
_SECRET_WORDS = ("token", "secret", "bearer", "credentials")
# api_key='...' / admin_api_key="..." in a Python repr (SGLang's server_args line), and the JSON /
# YAML spelling "api_key": "...".
_REPR = re.compile(r"""((?:admin_)?api[_-]key['"]?\s*[=:]\s*)(['"])((?:\\.|(?!\2).)*)\2""", re.IGNORECASE)
_FLAG = re.compile(r"(--(?:admin-)?api-key(?:=|\s+))(\S+)", re.IGNORECASE)
_BEARER = re.compile(r"(\b(?:Bearer|Basic)\s+)[A-Za-z0-9._~+/=-]{6,}")

_lock = threading.Lock()
_secrets: tuple[str, ...] = ()  # replaced whole (copy on write): readers need no lock


def register_secret(value: str | None) -> None:
    """Remember ``value`` so that :func:`redact` masks it from now on (idempotent)."""
    global _secrets
    if not value or len(value) < _MIN_SECRET:
        return
    with _lock:
        if value not in _secrets:
            # Longest first: a secret that contains another is masked whole.
            _secrets = tuple(sorted((*_secrets, value), key=len, reverse=True))


def is_secret_name(name: str) -> bool:
    lowered = name.lower()
    if lowered.endswith(("_file", "_path", "_env", "_set")):
        return False
    if any(part in lowered for part in _SECRET_PARTS):
        return True
    last = re.split(r"[_\-.]", lowered)[-1]
    return last in _SECRET_WORDS


def redact(text: str) -> str:
    """``text`` with every registered secret and every api-key/bearer shape masked."""
    for secret in _secrets:
        if secret in text:
            text = text.replace(secret, MASK)
    if "api" in text or "API" in text or "Api" in text:
        text = _REPR.sub(lambda m: f"{m[1]}{m[2]}{MASK}{m[2]}", text)
        text = _FLAG.sub(lambda m: f"{m[1]}{MASK}", text)
    if "Bearer" in text or "Basic" in text:
        text = _BEARER.sub(lambda m: f"{m[1]}{MASK}", text)
    return text


def redact_argv(argv: Sequence[str]) -> list[str]:
    """A command line fit to log or show: the value after ``--api-key`` masked, secrets masked."""
    out: list[str] = []
    hide_next = False
    for arg in argv:
        if hide_next:
            out.append(MASK)
            hide_next = False
            continue
        flag, eq, _ = arg.partition("=")
        if flag.lower() in ("--api-key", "--admin-api-key"):
            if eq:
                out.append(f"{flag}={MASK}")
            else:
                out.append(arg)
                hide_next = True
            continue
        out.append(redact(arg))
    return out


def redact_obj(value: Any) -> Any:
    """A JSON-like value with secret-named fields masked and secrets masked inside strings."""
    if isinstance(value, str):
        return redact(value)
    if isinstance(value, Mapping):
        return {
            k: (
                MASK
                if isinstance(k, str) and is_secret_name(k) and isinstance(v, str) and v
                else redact_obj(v)
            )
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [redact_obj(v) for v in value]
    return value


def _scrub(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return redact(value)
    if depth > 6:  # tracebacks are nested a few levels; deeper is not worth the time per line
        return value
    if isinstance(value, Mapping):
        return {k: _scrub(v, depth + 1) for k, v in value.items()}
    if isinstance(value, Iterable) and isinstance(value, (list, tuple)):
        return [_scrub(v, depth + 1) for v in value]
    return value


def scrub_event(_logger: Any, _method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: no secret in any field of any log line (ours or the stdlib's)."""
    for key in list(event):
        value = event[key]
        if is_secret_name(key) and value not in (None, "") and not isinstance(value, bool):
            event[key] = MASK
        elif isinstance(value, str):
            event[key] = redact(value)
        elif isinstance(value, (list, tuple, dict)):
            event[key] = _scrub(value)
    return event
