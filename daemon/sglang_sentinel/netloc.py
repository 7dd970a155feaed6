"""Hosts as addresses: the one to connect to for a server bound to a configured host, and whether
a host a URL names is this machine."""

from __future__ import annotations

import ipaddress
import socket

__all__ = ["is_this_host", "url_host"]


def url_host(host: str) -> str:
    """The host part of a URL reaching a server bound to ``host``.

    A wildcard bind (``0.0.0.0``, ``::``, empty) is reached over loopback, which is always among
    the addresses it listens on; an IPv6 literal is bracketed as URLs require.
    """
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "[::1]"
    return f"[{host}]" if ":" in host else host


def is_this_host(host: str) -> bool:
    """Whether ``host`` (a name or an address, bracketed or not) is this machine: an address it
    resolves to is loopback, or one this machine holds (a socket can be bound to it, the kernel's
    own answer, which covers every interface without listing them). A name that does not resolve
    is not this host."""
    host = host.strip("[]")
    try:
        infos = socket.getaddrinfo(host, None, type=socket.SOCK_DGRAM)
    except (OSError, UnicodeError):
        return False
    for family, _, _, _, sockaddr in infos:
        address = str(sockaddr[0])
        try:
            ip = ipaddress.ip_address(address.split("%", 1)[0])
        except ValueError:
            continue
        if ip.is_loopback or ip.is_unspecified:
            return True
        with socket.socket(family, socket.SOCK_DGRAM) as sock:
            try:
                sock.bind((address, 0))
            except OSError:
                continue
            return True
    return False
