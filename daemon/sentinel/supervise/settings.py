"""Configuration of the supervised SGLang server (section ``[server]``)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from sentinel.section import Section

__all__ = ["ServerSettings"]


class ServerSettings(Section):
    # child: sentinel starts the server itself; systemd: the server is its own unit;
    # external: watch and report only.
    mode: Literal["child", "systemd", "external"] = "child"
    # Launch profile for child mode. "sim" is the embedded default: `sentinel sim` on loopback.
    profile: str = "sim"
    host: str = "127.0.0.1"
    port: int = Field(default=30000, ge=1, le=65535)
