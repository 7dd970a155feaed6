"""The simulator's sockets: the API's listening socket, the control site's port, URLs.

The API socket is bound before it listens (SGLang's port is taken while the weights "load", and
connections are refused until the server listens), so it is made here rather than by aiohttp.
"""

from __future__ import annotations

import socket

from aiohttp import web

from sglang_sentinel_sim.rxtime import listening_socket

__all__ = ["bind_api", "bound_port", "http_url"]


def bind_api(host: str, port: int) -> socket.socket:
    infos = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)
    family, socktype, proto, _, addr = infos[0]
    # Its connections remember the kernel receive time of each read (the ground truth's arrival).
    sock = listening_socket(family, socktype, proto)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(addr)
        sock.setblocking(False)
    except OSError:
        sock.close()
        raise
    return sock


def bound_port(site: web.TCPSite) -> int:
    # aiohttp has no public accessor for the port an OS-assigned site got.
    server = site._server
    sockets = getattr(server, "sockets", None)
    if not sockets:
        raise RuntimeError("control API site has no listening socket")
    port: int = sockets[0].getsockname()[1]
    return port


def http_url(host: str, port: int) -> str:
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}"
