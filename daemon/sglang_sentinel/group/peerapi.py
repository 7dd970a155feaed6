"""The peer API every agent of a group serves on its exporter port, and its bearer-token check.

- ``GET /group/v1/state``: this rank's :class:`~sglang_sentinel.group.state.MemberView` as JSON.
- ``POST /group/v1/stop`` ``{"epoch": E}``: stop the local server for restart E.
- ``POST /group/v1/start`` ``{"epoch": E}``: allow one launch for E.

Both POSTs are idempotent per epoch (``"changed": false`` on a retry) and answer 409 on rank 0,
whose own coordinator is the only one that decides. Every route needs
``Authorization: Bearer <token_file's token>``, compared in constant time; 401 otherwise, 429
once an address has failed too often (the exporter's failure buckets). The token is never
logged, and neither is the header: a failure is logged with the client address only.

Why the exporter's port: peers reach it already (Prometheus scrapes it), and TLS there covers
the peer calls too. The scrapers' basic auth does not apply to these paths (a scrape credential
must not be able to stop a server); the exporter leaves them to this check.
"""

from __future__ import annotations

import hmac
import time
from collections.abc import Awaitable, Callable

from aiohttp import web

from sglang_sentinel.export.auth import FailureBuckets
from sglang_sentinel.group.local import LocalMember
from sglang_sentinel.log import get_logger

__all__ = ["PREFIX", "PeerApi"]

PREFIX = "/group/v1/"

_log = get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class PeerApi:
    def __init__(
        self,
        member: LocalMember,
        token: str,
        *,
        coordinator: bool,
        failures_per_second: float = 1.0,
        failure_burst: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._member = member
        self._expected = f"Bearer {token}".encode()
        self._coordinator = coordinator
        self._buckets = FailureBuckets(failures_per_second, failure_burst, 4096, clock)
        self.denied = 0  # requests answered 401/429 (the group collector's figure)

    def routes(self) -> list[web.RouteDef]:
        return [
            web.get(PREFIX + "state", self._guard(self._state)),
            web.post(PREFIX + "stop", self._guard(self._stop)),
            web.post(PREFIX + "start", self._guard(self._start)),
        ]

    def _authorized(self, header: str | None) -> bool:
        given = (header or "").encode("utf-8", "surrogateescape")
        return hmac.compare_digest(given, self._expected)

    def _guard(self, handler: Handler) -> Handler:
        async def guarded(request: web.Request) -> web.StreamResponse:
            client = request.remote or ""
            if not self._authorized(request.headers.get("Authorization")):
                self.denied += 1
                if not self._buckets.take(client):
                    return web.json_response(
                        {"error": "too many failed calls"}, status=429, headers={"Retry-After": "1"}
                    )
                _log.warning("group_peer_call_denied", client=client, path=request.path)
                return web.json_response(
                    {"error": "unauthorized"},
                    status=401,
                    headers={"WWW-Authenticate": 'Bearer realm="sentinel-group"'},
                )
            return await handler(request)

        return guarded

    async def _state(self, request: web.Request) -> web.StreamResponse:
        return web.json_response((await self._member.view()).as_json())

    async def _epoch(self, request: web.Request) -> int | web.StreamResponse:
        if self._coordinator:
            return web.json_response({"error": "rank 0 decides group restarts itself"}, status=409)
        try:
            body = await request.json()
        except ValueError:
            body = None
        epoch = body.get("epoch") if isinstance(body, dict) else None
        if not isinstance(epoch, int) or isinstance(epoch, bool) or epoch < 1:
            return web.json_response({"error": "epoch: want a positive integer"}, status=400)
        return epoch

    async def _stop(self, request: web.Request) -> web.StreamResponse:
        epoch = await self._epoch(request)
        if not isinstance(epoch, int):
            return epoch
        changed = self._member.stop(epoch)
        return web.json_response({"changed": changed, **(await self._member.view()).as_json()})

    async def _start(self, request: web.Request) -> web.StreamResponse:
        epoch = await self._epoch(request)
        if not isinstance(epoch, int):
            return epoch
        changed = self._member.start(epoch)
        return web.json_response({"changed": changed, **(await self._member.view()).as_json()})
