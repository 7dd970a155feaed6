"""The running server's SGLang version, read once it is ready and handed to the version readers.

The version detected before launch (``python -c "import sglang"``) or pinned in the profile says
which flags to render; what the *running* server reports is what its logs, metrics and replies
follow (systemd and external mode have no launch at all). So on every transition to ``ready``
(not ``unhealthy`` → ``ready``: same process) one bounded read asks the server:

1. ``GET /server_info`` — 0.5.23's name (0.5.9 serves it too), field ``version``;
2. ``GET /get_server_info`` — 0.5.9's older name (deprecated in 0.5.23), same field;
3. else the launch command's version (detected or pinned), else ``None``.

The result goes to ``sink`` (the ``sglang`` collector's ``set_sglang_version``, which exports
``sentinel_sglang_version_known`` / ``sentinel_sglang_version_info`` and logs an unknown version once
via ``versions.note_version``: a newer one is read with the newest known behaviour).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

import httpx

from sglang_sentinel.httpread import HttpReadError, read_json, tls_context
from sglang_sentinel.log import get_logger
from sglang_sentinel.supervise.state import ServerState, StateChange, StateListener

if TYPE_CHECKING:
    from sglang_sentinel.supervise.launch import LaunchCommand
    from sglang_sentinel.supervise.settings import ServerSettings

__all__ = ["ServerVersionReader", "attach_version_reader", "read_server_version"]

_log = get_logger(__name__)

_PATHS = ("/server_info", "/get_server_info")
_MAX_BYTES = 4 * 2**20  # server_info carries all server args; a few KiB in practice


async def read_server_version(
    client: httpx.AsyncClient, *, deadline_s: float = 5.0
) -> tuple[str | None, str]:
    """(version, where it came from or why not). Never raises for a bad or hostile reply."""
    why: list[str] = []
    for path in _PATHS:
        try:
            body = await read_json(client, path, deadline_s=deadline_s, max_bytes=_MAX_BYTES)
        except HttpReadError as exc:
            why.append(f"{path}: {exc}")
            continue
        except ValueError:
            why.append(f"{path}: not JSON")
            continue
        version = body.get("version") if isinstance(body, dict) else None
        if isinstance(version, str) and version.strip() and len(version) <= 64:
            return version.strip(), path
        why.append(f"{path}: no string 'version' field")
    return None, "; ".join(why)


class ServerVersionReader:
    """A state listener (``Supervisor.subscribe_state``) that reads the version when ready."""

    def __init__(
        self,
        base_url: str,
        sink: Callable[[str | None], None],
        *,
        api_key: Callable[[], str] = lambda: "",
        fallback: Callable[[], str | None] = lambda: None,
        transport: httpx.AsyncBaseTransport | None = None,
        deadline_s: float = 5.0,
    ) -> None:
        self.base_url = base_url
        self._sink = sink
        self._api_key = api_key
        self._fallback = fallback
        self._transport = transport
        self._deadline_s = deadline_s
        self._tasks: set[asyncio.Task[tuple[str | None, str]]] = set()
        #: (version, source) of the latest read; None before the first.
        self.latest: tuple[str | None, str] | None = None

    def on_state(self, change: StateChange) -> None:
        if change.new is not ServerState.READY or change.old is ServerState.UNHEALTHY:
            return
        task = asyncio.get_running_loop().create_task(self.refresh(), name="sentinel-sglang-version")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def refresh(self) -> tuple[str | None, str]:
        key = self._api_key()
        headers = {"Authorization": f"Bearer {key}"} if key else None
        async with httpx.AsyncClient(
            base_url=self.base_url,
            transport=self._transport,
            headers=headers,
            follow_redirects=False,
            verify=tls_context(),
        ) as client:
            version, source = await read_server_version(client, deadline_s=self._deadline_s)
        if version is None:
            fallback = self._fallback()
            _log.info("sglang_version_not_reported", detail=source, fallback=fallback)
            version, source = fallback, "launch command" if fallback else "none"
        self.latest = (version, source)
        self._sink(version)
        _log.info("sglang_version_read", version=version, source=source)
        return version, source

    async def close(self) -> None:
        """Cancel a read still in flight (at shutdown)."""
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)


class Supervised(Protocol):
    """What the reader needs of the supervisor (supervise/supervisor.py), as a protocol: the
    supervisor runs a reader of its own, so naming its class here would be an import circle."""

    settings: ServerSettings
    command: LaunchCommand | None

    def subscribe_state(self, listener: StateListener) -> Callable[[], None]: ...


def attach_version_reader(
    supervisor: Supervised, sink: Callable[[str | None], None] | None, server_url: str
) -> ServerVersionReader | None:
    """Subscribe a reader feeding ``sink`` (the ``sglang`` collector's ``set_sglang_version``; None
    when that collector is disabled) to ``supervisor``. The caller picks the sink: supervise sits
    below collect in the layers and does not know the collectors."""
    from sglang_sentinel.supervise.launch import api_key_of, version_text

    if sink is None:
        return None

    def api_key() -> str:
        cmd = supervisor.command
        return api_key_of(supervisor.settings, cmd.profile if cmd is not None else None)

    def fallback() -> str | None:
        cmd = supervisor.command
        return version_text(cmd.sglang_version) if cmd is not None else None

    reader = ServerVersionReader(server_url, sink, api_key=api_key, fallback=fallback)
    supervisor.subscribe_state(reader.on_state)
    return reader
