"""Basic auth with bcrypt-hashed passwords from a users file, and the TLS context from files."""

from __future__ import annotations

import base64
import binascii
import hashlib
import ssl
import threading
from pathlib import Path

import bcrypt

from sentinel.export.settings import TlsSettings

__all__ = ["BasicAuth", "ExporterConfigError", "load_users", "tls_context"]


class ExporterConfigError(Exception):
    """A TLS or auth file that cannot be used; the message names the file and the problem."""


def load_users(path: Path) -> dict[str, bytes]:
    """``user:bcrypt-hash`` per line; blank lines and ``#`` comments ignored."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ExporterConfigError(f"basic auth users file {path}: {exc.strerror or exc}") from None
    users: dict[str, bytes] = {}
    for number, raw in enumerate(text.splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        user, sep, hashed = line.partition(":")
        if not sep or not user or not hashed.startswith(("$2a$", "$2b$", "$2y$")):
            raise ExporterConfigError(
                f"basic auth users file {path} line {number}: expected 'user:bcrypt-hash' "
                "(make one with: htpasswd -nBC 10 USER)"
            )
        users[user] = hashed.encode()
    if not users:
        raise ExporterConfigError(f"basic auth users file {path}: no users")
    return users


class BasicAuth:
    """Checks ``Authorization: Basic`` headers.

    bcrypt is deliberately slow (~50-250 ms per check at cost 10-12); Prometheus scrapes every few
    seconds with the same credentials, so successful checks are cached by a SHA-256 of the header,
    as exporter-toolkit does. Unknown users still pay one bcrypt check, so response time does not
    reveal which user names exist.
    """

    def __init__(self, users: dict[str, bytes]) -> None:
        self._users = users
        self._ok: set[bytes] = set()
        self._lock = threading.Lock()
        self._dummy = bcrypt.hashpw(b"sentinel-dummy", bcrypt.gensalt(10))

    def check(self, header: str | None) -> bool:
        if not header or not header.startswith("Basic "):
            return False
        key = hashlib.sha256(header.encode()).digest()
        with self._lock:
            if key in self._ok:
                return True
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            return False
        user, sep, password = decoded.partition(":")
        if not sep:
            return False
        hashed = self._users.get(user)
        ok = bcrypt.checkpw(password.encode(), hashed if hashed is not None else self._dummy)
        ok = ok and hashed is not None
        if ok:
            with self._lock:
                if len(self._ok) > 1024:  # bounded: a cache, not a log of every credential ever seen
                    self._ok.clear()
                self._ok.add(key)
        return ok


def tls_context(tls: TlsSettings) -> ssl.SSLContext:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_3 if tls.min_version == "TLS13" else ssl.TLSVersion.TLSv1_2
    try:
        ctx.load_cert_chain(tls.cert_file, tls.key_file)
    except FileNotFoundError as exc:
        raise ExporterConfigError(f"TLS: {exc.filename or tls.cert_file}: not found") from None
    except (ssl.SSLError, OSError) as exc:
        raise ExporterConfigError(
            f"TLS: cannot load certificate {tls.cert_file} with key {tls.key_file}: {exc}"
        ) from None
    if tls.client_ca_file is not None:
        try:
            ctx.load_verify_locations(cafile=tls.client_ca_file)
        except (ssl.SSLError, OSError) as exc:
            raise ExporterConfigError(f"TLS: client CA {tls.client_ca_file}: {exc}") from None
        ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx
