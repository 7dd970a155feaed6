"""Hostile HTTP replies on loopback: headers that never end, a body that never ends, a trickle.

``MODES`` maps a name to a coroutine that writes one hostile reply on a connection (the request
has been read). :class:`HostileServer` serves the current mode on every route from a thread of
its own, so a test or benchmark can point a real ``sentinel run`` at it and switch modes while
it runs. Used by tests/supervise/test_hostile_readers.py, tests/daemon/test_hostile_server.py
and benchmarks/hostile_scrape.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import Awaitable, Callable

__all__ = ["MODES", "HostileServer", "Writer"]

Writer = Callable[[asyncio.StreamWriter], Awaitable[None]]


async def _endless_headers(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\n")
    for i in range(10**9):
        w.write(f"X-H{i}: {'v' * 50}\r\n".encode())
        await w.drain()
        await asyncio.sleep(0.01)


async def _endless_body(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"# HELP x y\n" * 100
    while True:
        w.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await w.drain()
        await asyncio.sleep(0.005)


async def _huge_body(w: asyncio.StreamWriter) -> None:
    # 50 MB, chunked, no Content-Length: only counting while reading can stop it.
    w.write(b"HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n")
    chunk = b"a" * (1 << 20)
    for _ in range(50):
        w.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
        await w.drain()
    w.write(b"0\r\n\r\n")
    await w.drain()


async def _declared_huge(w: asyncio.StreamWriter) -> None:
    w.write(b"HTTP/1.1 200 OK\r\nContent-Length: 52428800\r\n\r\n")
    await w.drain()
    await asyncio.sleep(30)


async def _trickle(w: asyncio.StreamWriter) -> None:
    for byte in b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 1000:
        w.write(bytes([byte]))
        await w.drain()
        await asyncio.sleep(0.05)  # well under any per-read timeout


MODES: dict[str, Writer] = {
    "endless_headers": _endless_headers,
    "endless_body": _endless_body,
    "huge_body": _huge_body,
    "declared_huge": _declared_huge,
    "trickle": _trickle,
}


class HostileServer:
    """Serves ``mode`` (a key of :data:`MODES`, settable while running) on every route, on loopback.

    ``hits`` counts requests by path, so a caller can wait until the daemon has read a route.
    """

    def __init__(self, mode: str = "endless_headers") -> None:
        self.mode = mode
        # Paths answered "200 ok" instead (e.g. /health, so that the daemon reaches its checks).
        self.fine: frozenset[str] = frozenset()
        self.hits: dict[str, int] = {}
        self.port = 0
        self._loop = asyncio.new_event_loop()
        self._server: asyncio.Server | None = None
        self._thread = threading.Thread(target=self._loop.run_forever, name="hostile-http", daemon=True)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            path = head.split(b" ", 2)[1].decode("latin-1").split("?")[0]
            self.hits[path] = self.hits.get(path, 0) + 1
            if path in self.fine:
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
                await writer.drain()
            else:
                await MODES[self.mode](writer)
        except (ConnectionError, asyncio.IncompleteReadError, asyncio.LimitOverrunError, IndexError):
            pass
        except asyncio.CancelledError:
            pass  # closing: the reply is abandoned, as its client abandoned it
        finally:
            writer.close()

    def start(self) -> HostileServer:
        self._thread.start()

        async def serve() -> int:
            self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
            return int(self._server.sockets[0].getsockname()[1])

        self.port = asyncio.run_coroutine_threadsafe(serve(), self._loop).result(10)
        return self

    def close(self) -> None:
        async def stop() -> None:
            if self._server is not None:
                self._server.close()
            for task in asyncio.all_tasks():
                if task is not asyncio.current_task():
                    task.cancel()

        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(stop(), self._loop).result(5)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(5)

    def __enter__(self) -> HostileServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()
