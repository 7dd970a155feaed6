"""Rank 0's calls to the other ranks' peer APIs (httpx; the transport is the test seam).

Every failure is one of :data:`PEER_ERROR_REASONS` (``sentinel_group_peer_errors_total``) and an
unreachable :class:`~sglang_sentinel.group.state.MemberView` — never an exception for the caller.
"""

from __future__ import annotations

from collections import Counter

import httpx

from sglang_sentinel.group.state import MemberView
from sglang_sentinel.httpread import HttpReadError, read, tls_context
from sglang_sentinel.log import get_logger
from sglang_sentinel.netloc import url_host

__all__ = ["PEER_ERROR_REASONS", "PeerClient", "peer_label"]

PEER_ERROR_REASONS: tuple[str, ...] = ("connect", "timeout", "unauthorized", "http_error", "bad_reply")

_log = get_logger(__name__)
_MAX_REPLY = 64 * 1024


def peer_label(url: str) -> str:
    """The peer's ``host:port``: the ``peer`` label (from config, so bounded)."""
    u = httpx.URL(url)
    return f"{url_host(u.host)}:{u.port}"


class PeerClient:
    def __init__(
        self,
        peers: tuple[str, ...],
        token: str,
        timeout: float,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        self.peers = peers
        self.labels = tuple(peer_label(p) for p in peers)
        self.errors: Counter[tuple[str, str]] = Counter(
            {(label, reason): 0 for label in self.labels for reason in PEER_ERROR_REASONS}
        )
        self._client = httpx.AsyncClient(
            headers={"Authorization": f"Bearer {token}"},
            timeout=timeout,
            transport=transport,
            follow_redirects=False,
            verify=tls_context(),
        )
        self._last_error: dict[int, str] = {}
        self._timeout = timeout

    async def aclose(self) -> None:
        await self._client.aclose()

    async def call(self, rank: int, method: str, path: str, epoch: int | None = None) -> MemberView:
        """One call to rank ``rank`` (1-based over ``peers``); its view, or an unreachable one."""
        url = self.peers[rank - 1] + "/group/v1/" + path
        label = self.labels[rank - 1]
        reason, detail = "", ""
        try:
            # Bounded as a whole (httpread): a peer that drips its reply must not hold the poll.
            resp = await read(
                self._client,
                method,
                url,
                json_body=None if epoch is None else {"epoch": epoch},
                deadline_s=self._timeout,
                max_bytes=_MAX_REPLY,
            )
            body = resp.content
            if resp.status_code in (401, 403):
                reason, detail = "unauthorized", f"HTTP {resp.status_code} (token_file differs?)"
            elif resp.status_code != 200:
                reason, detail = "http_error", f"HTTP {resp.status_code}"
            else:
                try:
                    view = MemberView.from_json(httpx.Response(200, content=body).json(), rank)
                except ValueError as exc:
                    reason, detail = "bad_reply", str(exc)
                else:
                    if self._last_error.pop(rank, None):
                        _log.info("group_peer_reachable", peer=label, rank=rank)
                    return view
        except HttpReadError as exc:
            if exc.reason == "timeout":
                reason, detail = "timeout", "timed out"
            elif exc.reason == "too_large":
                reason, detail = "bad_reply", exc.detail
            else:
                reason, detail = "connect", exc.reason
        self.errors[(label, reason)] += 1
        if self._last_error.get(rank) != reason:
            # Once per change, not per poll: an agent that is down for an hour is one line.
            _log.warning("group_peer_error", peer=label, rank=rank, reason=reason, detail=detail)
        self._last_error[rank] = reason
        return MemberView(rank, "unknown", reachable=False, error=reason)
