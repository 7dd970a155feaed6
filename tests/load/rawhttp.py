"""A hand-rolled HTTP/1.1 request reader for the raw loopback servers in the load tests.

Those servers exist to send what no framework would (bad framing, cut streams), so they parse
requests by hand; this is the one copy of that parsing.
"""

from __future__ import annotations

import asyncio


async def read_request(reader: asyncio.StreamReader) -> bytes:
    """Read one request (head and Content-Length body); return its head. Raises
    ``asyncio.IncompleteReadError`` when the peer closes."""
    head = await reader.readuntil(b"\r\n\r\n")
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    await reader.readexactly(length)
    return head
