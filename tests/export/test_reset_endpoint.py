"""``POST /reset``: an action among read-only pages, so POST only, behind basic auth when that is
configured, and from loopback only when it is not."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Any

import bcrypt
import httpx
import pytest
from aiohttp import web

from sglang_sentinel.collect import CollectorSet
from sglang_sentinel.export import ExporterSettings


def _counting_reset() -> tuple[list[int], Any]:
    calls: list[int] = []

    async def reset(request: web.Request) -> web.StreamResponse:
        calls.append(1)
        return web.json_response({"reset": True})

    return calls, reset


async def test_post_only_and_auth_when_configured(
    exporter_factory: Any, collectors: CollectorSet, tmp_path: Path
) -> None:
    users = tmp_path / "users"
    users.write_text(f"ops:{bcrypt.hashpw(b'pw', bcrypt.gensalt(4)).decode()}\n")
    calls, reset = _counting_reset()
    settings = ExporterSettings(port=0, basic_auth_users_file=users)
    exporter = await exporter_factory(collectors, settings=settings, reset=reset)
    async with httpx.AsyncClient(base_url=exporter.url, timeout=10) as client:
        assert (await client.post("/reset")).status_code == 401
        assert (await client.post("/reset", auth=("ops", "wrong"))).status_code == 401
        assert (await client.get("/reset", auth=("ops", "pw"))).status_code == 405
        assert calls == []
        response = await client.post("/reset", auth=("ops", "pw"))
        assert response.status_code == 200
        assert calls == [1]


def _non_loopback_address() -> str | None:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.255.255.255", 1))  # no packet is sent: only picks the outgoing interface
        except OSError:
            return None
        address = str(s.getsockname()[0])
    return None if address.startswith("127.") or address == "0.0.0.0" else address


async def test_without_auth_only_loopback_may_reset(exporter_factory: Any, collectors: CollectorSet) -> None:
    calls, reset = _counting_reset()
    exporter = await exporter_factory(
        collectors, settings=ExporterSettings(host="0.0.0.0", port=0), reset=reset
    )
    async with httpx.AsyncClient(timeout=10) as client:
        ok = await client.post(f"http://127.0.0.1:{exporter.port}/reset")
        assert ok.status_code == 200
        assert calls == [1]
        address = _non_loopback_address()
        if address is None:
            pytest.skip("no non-loopback interface to connect from")
        refused = await client.post(f"http://{address}:{exporter.port}/reset")
        assert refused.status_code == 403
        assert "basic_auth_users_file" in refused.text
        assert calls == [1]
        # Read-only pages stay open there.
        assert (await client.get(f"http://{address}:{exporter.port}/healthz")).status_code == 200
