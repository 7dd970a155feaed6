"""Basic auth fails closed and quietly: malformed files at start, over-long passwords, floods, logs."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from pathlib import Path
from typing import Any

import bcrypt
import httpx
import pytest
from aiohttp import web

from sglang_sentinel.collect import CollectorSet
from sglang_sentinel.export import ExporterConfigError, ExporterSettings, load_users
from sglang_sentinel.export.auth import AuthVerdict, BasicAuth
from sglang_sentinel.log import configure_logging, get_logger

PASSWORD = "s3cret-pw"


def _hash(password: str = PASSWORD) -> str:
    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()


def _header(user: str, password: str) -> str:
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode()


@pytest.mark.parametrize(
    "hashed",
    [
        "$2b$10$short",  # the prefix is right, bcrypt would raise "Invalid salt" per request
        "$2y$1$" + "a" * 53,  # one-digit cost
        "$2y$99$" + "a" * 53,  # cost out of range
        "$2y$10$" + "a" * 52 + "!",  # not bcrypt's base64 alphabet
        "$2y$10$" + "a" * 54,  # too long
    ],
)
def test_malformed_hash_is_rejected_at_load_naming_the_line(tmp_path: Path, hashed: str) -> None:
    path = tmp_path / "users"
    path.write_text(f"# scrapers\nok:{_hash()}\nprometheus:{hashed}\n")
    with pytest.raises(ExporterConfigError) as caught:
        load_users(path)
    message = str(caught.value)
    assert f"{path} line 3" in message
    assert "malformed" in message
    assert hashed not in message  # the hash itself is not repeated into logs


def test_duplicate_user_and_non_utf8_file(tmp_path: Path) -> None:
    path = tmp_path / "users"
    path.write_text(f"a:{_hash()}\na:{_hash()}\n")
    with pytest.raises(ExporterConfigError, match="line 2: user 'a' again"):
        load_users(path)
    path.write_bytes(b"a:\xff\xfe\n")
    with pytest.raises(ExporterConfigError, match="not UTF-8"):
        load_users(path)


def test_every_hash_htpasswd_writes_loads(tmp_path: Path) -> None:
    path = tmp_path / "users"
    a, b = _hash(), _hash()
    path.write_text(f"a:{a.replace('$2b$', '$2y$')}\nb:{b.replace('$2b$', '$2a$')}\nc:{_hash()}\n")
    assert set(load_users(path)) == {"a", "b", "c"}


def _auth(**kw: Any) -> BasicAuth:
    return BasicAuth({"prometheus": _hash().encode()}, **kw)


def test_sync_check_never_raises() -> None:
    auth = _auth()
    assert auth.check(_header("prometheus", PASSWORD))
    assert not auth.check(_header("prometheus", "x" * 73))  # bcrypt 5 raises ValueError past 72 bytes
    assert not auth.check(_header("prometheus", "é" * 40))  # 80 bytes in UTF-8
    assert not auth.check("Basic " + base64.b64encode(b"\xff\xfe:x").decode())
    assert not auth.check("Basic ####")
    assert not auth.check("Bearer x")
    assert not auth.check(None)


async def test_failures_are_limited_per_address_and_good_credentials_keep_working() -> None:
    now = [0.0]
    auth = _auth(failure_burst=3, failures_per_second=0.5, clock=lambda: now[0])
    good, bad = _header("prometheus", PASSWORD), _header("prometheus", "wrong")
    assert await auth.verdict(good, "10.0.0.1") is AuthVerdict.OK  # now cached
    verdicts = [await auth.verdict(bad, "10.0.0.1") for _ in range(5)]
    assert verdicts == [AuthVerdict.DENIED] * 3 + [AuthVerdict.LIMITED] * 2
    assert auth.limited == 2
    assert await auth.verdict(good, "10.0.0.1") is AuthVerdict.OK  # the cache answers first
    assert await auth.verdict(bad, "10.0.0.2") is AuthVerdict.DENIED  # another address has its tokens
    now[0] += 2.0  # one token back
    assert await auth.verdict(bad, "10.0.0.1") is AuthVerdict.DENIED
    assert await auth.verdict(bad, "10.0.0.1") is AuthVerdict.LIMITED
    auth.close()


async def test_pending_checks_are_bounded() -> None:
    auth = _auth(max_pending=2, failure_burst=100)
    bad = [_header("prometheus", f"wrong{i}") for i in range(6)]
    verdicts = await asyncio.gather(*(auth.verdict(h, f"10.0.0.{i}") for i, h in enumerate(bad)))
    assert verdicts.count(AuthVerdict.DENIED) == 2
    assert verdicts.count(AuthVerdict.LIMITED) == 4
    auth.close()


def _users_file(tmp_path: Path) -> Path:
    path = tmp_path / "users"
    path.write_text(f"prometheus:{_hash()}\n")
    return path


async def test_over_long_password_is_401_not_500(
    collectors: CollectorSet, exporter_factory: Any, tmp_path: Path
) -> None:
    settings = ExporterSettings(port=0, basic_auth_users_file=_users_file(tmp_path))
    exporter = await exporter_factory(collectors, settings=settings)
    async with httpx.AsyncClient(timeout=10) as client:
        for password in ("p" * 73, "p" * 4096, PASSWORD + "x" * 100):
            r = await client.get(exporter.url + "/metrics", auth=("prometheus", password))
            assert r.status_code == 401
        r = await client.get(exporter.url + "/metrics", auth=("prometheus", PASSWORD))
        assert r.status_code == 200


async def test_a_flood_of_bad_passwords_leaves_the_scrape_pool_alone(
    collectors: CollectorSet, exporter_factory: Any, tmp_path: Path
) -> None:
    # One scrape thread: before, each bad password took it for a bcrypt round, so a flood answered
    # legitimate scrapes with 503 (too many concurrent scrapes) or after seconds. Now bcrypt has its
    # own pool and the flood is limited; the scraper's cached credentials get through every time.
    settings = ExporterSettings(port=0, basic_auth_users_file=_users_file(tmp_path), max_concurrent_scrapes=1)
    exporter = await exporter_factory(collectors, settings=settings)
    async with httpx.AsyncClient(timeout=30) as client:
        assert (await client.get(exporter.url + "/metrics", auth=("prometheus", PASSWORD))).status_code == 200

        async def attacker(n: int) -> list[int]:
            codes = []
            for i in range(8):
                r = await client.get(exporter.url + "/metrics", auth=("prometheus", f"guess-{n}-{i}"))
                codes.append(r.status_code)
            return codes

        flood = asyncio.gather(*(attacker(n) for n in range(12)))
        legit = []
        for _ in range(10):
            legit.append(
                (await client.get(exporter.url + "/metrics", auth=("prometheus", PASSWORD))).status_code
            )
        codes = [c for run in await flood for c in run]
    assert legit == [200] * 10
    assert set(codes) <= {401, 429}
    assert 429 in codes  # 96 failures from one address in a moment: most never reach bcrypt


async def test_no_credential_in_any_log_line(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    from sglang_sentinel.export import Exporter

    configure_logging("debug", "json")
    secret_password = "hunter2-very-secret"
    header_value = _header("prometheus", secret_password)
    hashed = _hash(secret_password)

    async def broken(request: web.Request) -> web.StreamResponse:
        authorization = request.headers.get("X-Creds", "")  # noqa: F841 - a frame local to leak
        password = secret_password  # noqa: F841
        stored = hashed  # noqa: F841
        raise RuntimeError("handler failed")

    exporter = Exporter(CollectorSet([]), ExporterSettings(port=0), routes=[web.get("/boom", broken)])
    await exporter.start()
    try:
        async with httpx.AsyncClient(timeout=10) as client:
            r = await client.get(exporter.url + "/boom", headers={"X-Creds": header_value})
            assert r.status_code == 500
    finally:
        await exporter.stop()
    get_logger("sentinel.test").info("with_fields", password=secret_password, authorization=header_value)
    logging.getLogger("other.library").warning("sent %s", header_value)
    err = capsys.readouterr().err
    lines = [json.loads(line) for line in err.splitlines() if line.startswith("{")]
    assert any("handler failed" in json.dumps(line) for line in lines)  # the failure is logged ...
    for needle in (secret_password, header_value, header_value.split()[1], hashed):
        assert needle not in err  # ... without the header, the password or the hash


async def test_a_flood_from_many_addresses_cannot_lock_out_a_scraper() -> None:
    """The shared pending bound is full of bad passwords from many addresses: a configured scraper
    address, and an address that logged in before, still get a first-time valid login checked."""
    auth = _auth(max_pending=2, failure_burst=100, scraper_addresses=["10.9.0.0/24"])
    good = _header("prometheus", PASSWORD)
    # A first login from 10.0.0.50 (before the flood): it becomes a known-good address.
    assert await auth.verdict(good, "10.0.0.50") is AuthVerdict.OK
    flood = [
        asyncio.ensure_future(auth.verdict(_header("prometheus", f"wrong{i}"), f"10.0.1.{i}"))
        for i in range(12)
    ]
    await asyncio.sleep(0)  # the flood claims the shared lane first
    # Another valid header (a new credential spelling: not in the cache) from each priority address.
    fresh = "Basic " + base64.b64encode(f"prometheus:{PASSWORD}".encode()).decode() + " "
    assert await auth.verdict(fresh, "10.9.0.7") is AuthVerdict.OK
    assert await auth.verdict(fresh + " ", "10.0.0.50") is AuthVerdict.OK  # known-good address
    verdicts = await asyncio.gather(*flood)
    assert verdicts.count(AuthVerdict.LIMITED) >= 10  # the flood itself stays bounded
    assert await auth.verdict(_header("prometheus", "wrong"), "10.9.0.7") is AuthVerdict.DENIED
    auth.close()
