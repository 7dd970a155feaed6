"""Basic auth with bcrypt-hashed passwords from a users file, and the TLS context from files.

Fails closed and quietly: every malformed header, unknown user, over-long password or bcrypt
error is a plain "no" — never an exception that a handler would log with the header in it. The
checks never log the header, the decoded password or a hash.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import enum
import hashlib
import hmac
import ipaddress
import re
import secrets
import ssl
import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import bcrypt

from sglang_sentinel.export.settings import TlsSettings
from sglang_sentinel.log import get_logger

__all__ = ["AuthVerdict", "BasicAuth", "ExporterConfigError", "FailureBuckets", "load_users", "tls_context"]

_log = get_logger(__name__)

# What bcrypt.checkpw accepts without raising: version 2a/2b/2y, a two-digit cost 04-31, then
# 22 characters of salt and 31 of checksum in bcrypt's base64 alphabet. Checking the whole shape at
# start turns a typo in the users file into exit 2 naming the line instead of a 500 per request.
_BCRYPT_HASH = re.compile(r"\$2[aby]\$(0[4-9]|[12][0-9]|3[01])\$[./A-Za-z0-9]{53}")
# bcrypt only ever looks at the first 72 bytes; bcrypt 5 refuses longer passwords with ValueError.
# exporter-toolkit (Go's bcrypt) refuses them too, so a longer password is simply wrong.
BCRYPT_MAX_PASSWORD = 72


class ExporterConfigError(Exception):
    """A TLS or auth file that cannot be used; the message names the file and the problem."""


def load_users(path: Path) -> dict[str, bytes]:
    """``user:bcrypt-hash`` per line; blank lines and ``#`` comments ignored.

    The error names the file and line, never the hash itself (the file is a secret of sorts).
    """
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ExporterConfigError(f"basic auth users file {path}: {exc.strerror or exc}") from None
    except UnicodeDecodeError:
        raise ExporterConfigError(f"basic auth users file {path}: not UTF-8 text") from None
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
        if not _BCRYPT_HASH.fullmatch(hashed):
            raise ExporterConfigError(
                f"basic auth users file {path} line {number}: the bcrypt hash of user {user!r} is "
                "malformed (want $2y$NN$ and 53 characters of salt and hash; make one with: "
                "htpasswd -nBC 10 USER)"
            )
        if user in users:
            raise ExporterConfigError(f"basic auth users file {path} line {number}: user {user!r} again")
        users[user] = hashed.encode()
    if not users:
        raise ExporterConfigError(f"basic auth users file {path}: no users")
    return users


class AuthVerdict(enum.Enum):
    OK = "ok"
    DENIED = "denied"  # 401
    LIMITED = "limited"  # 429: too many recent failures from this address, or the checker is busy


class _Buckets:
    """Token buckets of allowed *failed* checks per client address.

    Bounded: past ``max_clients`` addresses the least recently seen one is dropped, so a spray of
    addresses costs memory only up to the bound (and still meets the global pending bound).
    """

    def __init__(self, rate: float, burst: float, max_clients: int, clock: Callable[[], float]) -> None:
        self._rate, self._burst, self._max = rate, burst, max_clients
        self._clock = clock
        self._tokens: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def _level(self, client: str) -> float:
        now = self._clock()
        tokens, then = self._tokens.get(client, (self._burst, now))
        return min(self._burst, tokens + (now - then) * self._rate)

    def take(self, client: str) -> bool:
        """Take one token before a check (concurrent checks each hold their own); False if none."""
        level = self._level(client)
        if level < 1.0:
            return False
        self._set(client, level - 1.0)
        return True

    def refund(self, client: str) -> None:
        """The check succeeded: a good password is not a failure."""
        self._set(client, self._level(client) + 1.0)

    def _set(self, client: str, level: float) -> None:
        self._tokens[client] = (min(level, self._burst), self._clock())
        self._tokens.move_to_end(client)
        while len(self._tokens) > self._max:
            self._tokens.popitem(last=False)


# How long an address that failed a check stays out of the clean lane.
_DIRTY_SECONDS = 60.0

# The same per-address failure limit for the group's bearer-token peer API (sentinel/group/peerapi.py).
FailureBuckets = _Buckets


class BasicAuth:
    """Checks ``Authorization: Basic`` headers, off the scrape thread pool and rate-limited.

    bcrypt is deliberately slow (~50-250 ms per check at cost 10-12), so:

    - Successful checks are cached, keyed by an HMAC of the header under a key drawn at start
      (never a plain hash: a memory dump of the cache is no dictionary-attack oracle across
      processes). Prometheus scrapes every few seconds with the same credentials and pays bcrypt
      once.
    - bcrypt runs in this object's own small thread pool, never in the pool that renders
      ``/metrics``: a flood of bad passwords queues behind itself, not in front of scrapes.
    - At most ``max_pending`` checks wait for that pool; more get LIMITED at once (no bcrypt).
    - Each client address may fail ``failure_burst`` checks, refilled at ``failures_per_second``;
      an address without tokens gets LIMITED without a bcrypt check. A cached good credential is
      answered before the limit is consulted, so a scraper sharing an address with an attacker
      keeps scraping.

    Unknown users still pay one bcrypt check against a dummy hash, so response time does not reveal
    which user names exist.

    A legitimate scraper cannot be locked out by a flood from other addresses: checks from a
    configured scraper address (``scraper_addresses``, ``[exporter] scraper_addresses``) skip the
    per-address bucket and the shared pending bound; checks from an address that already logged in
    successfully in this process (``known``), or that failed no check in the last minute
    (``clean``), skip the shared bound (their failures are still limited: an attacker may share the
    address). Each of the three runs in a lane of its own (one bcrypt thread, its own bound of
    ``max_pending``), so a first-time valid login there never waits behind the flood's queue. The
    known lane is apart from the clean one because a flood from ever-new addresses is "clean" at
    first: it may fill the clean lane, never the one of addresses that gave the password before.
    """

    def __init__(
        self,
        users: dict[str, bytes],
        *,
        failures_per_second: float = 1.0,
        failure_burst: float = 10.0,
        max_pending: int = 8,
        max_clients: int = 4096,
        threads: int = 1,
        clock: Callable[[], float] = time.monotonic,
        scraper_addresses: Iterable[str] = (),
    ) -> None:
        self._users = users
        self._scrapers = tuple(ipaddress.ip_network(a, strict=False) for a in scraper_addresses)
        # Addresses that logged in successfully (bounded, most recent kept): the priority lane.
        self._good_clients: OrderedDict[str, None] = OrderedDict()
        # Address -> when it last failed a check (bounded): a failing address leaves the clean lane.
        self._failed: OrderedDict[str, float] = OrderedDict()
        self._lane_pending = {"scraper": 0, "known": 0, "clean": 0}
        self._lane_executors: dict[str, ThreadPoolExecutor] = {}
        self._key = secrets.token_bytes(32)
        self._ok: OrderedDict[bytes, None] = OrderedDict()
        self._lock = threading.Lock()
        self._dummy = bcrypt.hashpw(b"sentinel-dummy", bcrypt.gensalt(10))
        self._buckets = _Buckets(failures_per_second, failure_burst, max_clients, clock)
        self._clock = clock
        self._max_pending = max_pending
        self._pending = 0
        self._threads = threads
        self._executor: ThreadPoolExecutor | None = None
        self.limited = 0  # answered LIMITED without a check; read by tests and the benchmark

    def _cache_key(self, header: str) -> bytes:
        return hmac.new(self._key, header.encode("utf-8", "surrogateescape"), hashlib.sha256).digest()

    def _cached(self, key: bytes) -> bool:
        with self._lock:
            if key in self._ok:
                self._ok.move_to_end(key)
                return True
        return False

    def _remember(self, key: bytes) -> None:
        with self._lock:
            self._ok[key] = None
            while len(self._ok) > 1024:  # bounded: a cache, not a log of every credential ever seen
                self._ok.popitem(last=False)

    def check(self, header: str | None) -> bool:
        """The bcrypt check itself, synchronously (blocking for one bcrypt round on a miss)."""
        if not header or not header.startswith("Basic "):
            return False
        key = self._cache_key(header)
        if self._cached(key):
            return True
        ok = self._verify(header)
        if ok:
            self._remember(key)
        return ok

    def _verify(self, header: str) -> bool:
        try:
            decoded = base64.b64decode(header[6:].strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return False
        user, sep, password = decoded.partition(":")
        if not sep:
            return False
        secret = password.encode("utf-8")
        if len(secret) > BCRYPT_MAX_PASSWORD:
            return False  # bcrypt would raise; no stored password can be this long
        hashed = self._users.get(user)
        try:
            ok = bcrypt.checkpw(secret, hashed if hashed is not None else self._dummy)
        except ValueError:
            # load_users checked every hash's shape, so this is bcrypt disagreeing with us. Say so
            # without the user, the hash or the password.
            _log.warning("basic_auth_check_failed", reason="bcrypt rejected the stored hash")
            return False
        return ok and hashed is not None

    async def verdict(self, header: str | None, client: str) -> AuthVerdict:
        """Decide for one request without blocking the event loop and without the scrape pool."""
        if not header or not header.startswith("Basic "):
            return AuthVerdict.DENIED  # no bcrypt, so nothing to limit
        key = self._cache_key(header)
        if self._cached(key):
            return AuthVerdict.OK
        lane = self._priority(client)
        if lane == "scraper" or (lane in ("known", "clean") and self._buckets.take(client)):
            return await self._lane_verdict(lane, header, key, client)
        if lane in ("known", "clean"):
            self.limited += 1
            return AuthVerdict.LIMITED
        if self._pending >= self._max_pending or not self._buckets.take(client):
            self.limited += 1
            return AuthVerdict.LIMITED
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="sentinel-auth")
        self._pending += 1
        try:
            ok = await asyncio.get_running_loop().run_in_executor(self._executor, self._verify, header)
        finally:
            self._pending -= 1
        return self._settle(ok, key, client)

    def _priority(self, client: str) -> str | None:
        """The lane of a check: ``scraper`` (a configured address: no failure limit), ``known`` (an
        address that logged in before), ``clean`` (one that has not failed a check within the last
        minute) — failures from these two are still limited, an attacker may share the address —
        or None (the shared lane)."""
        if self._scrapers:
            try:
                address = ipaddress.ip_address(client)
            except ValueError:
                address = None
            if address is not None:
                mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:10.0.0.5, dual-stack
                if any(address in n or (mapped is not None and mapped in n) for n in self._scrapers):
                    return "scraper"
        now = self._clock()
        with self._lock:
            if client in self._good_clients:
                return "known"
            failed = self._failed.get(client)
        # An address that is not failing is not the flood: its first-time login (a scraper after
        # sentinel restarted) goes before the addresses that keep failing.
        return "clean" if failed is None or now - failed > _DIRTY_SECONDS else None

    def _settle(self, ok: bool, key: bytes, client: str) -> AuthVerdict:
        """After a bcrypt check: remember the outcome (credential cache, address books, bucket)."""
        self._note(client, ok)
        if ok:
            self._remember(key)
            self._buckets.refund(client)
            return AuthVerdict.OK
        return AuthVerdict.DENIED

    def _note(self, client: str, ok: bool) -> None:
        """Remember how a check from ``client`` went (both books bounded, oldest dropped)."""
        with self._lock:
            if ok:
                self._failed.pop(client, None)
                self._good_clients[client] = None
                self._good_clients.move_to_end(client)
                while len(self._good_clients) > 256:
                    self._good_clients.popitem(last=False)
            else:
                self._good_clients.pop(client, None)
                self._failed[client] = self._clock()
                self._failed.move_to_end(client)
                while len(self._failed) > 4096:
                    self._failed.popitem(last=False)

    async def _lane_verdict(self, lane: str, header: str, key: bytes, client: str) -> AuthVerdict:
        # Each lane bounded as well: an address that misbehaves costs its own lane, nothing more.
        if self._lane_pending[lane] >= self._max_pending:
            self.limited += 1
            return AuthVerdict.LIMITED
        executor = self._lane_executors.get(lane)
        if executor is None:
            executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix=f"sentinel-auth-{lane}")
            self._lane_executors[lane] = executor
        self._lane_pending[lane] += 1
        try:
            ok = await asyncio.get_running_loop().run_in_executor(executor, self._verify, header)
        finally:
            self._lane_pending[lane] -= 1
        return self._settle(ok, key, client)

    def close(self) -> None:
        for executor in (self._executor, *self._lane_executors.values()):
            if executor is not None:
                executor.shutdown(wait=False, cancel_futures=True)
        self._executor = None
        self._lane_executors.clear()


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
