"""The address to connect to for a server that listens on a configured host."""

from __future__ import annotations

__all__ = ["url_host"]


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
