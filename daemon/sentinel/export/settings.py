"""Configuration of the exporter's HTTP side (section ``[exporter]``)."""

from __future__ import annotations

from pydantic import Field

from sentinel.section import Section

__all__ = ["ExporterSettings"]


class ExporterSettings(Section):
    # Loopback by default: the exporter shows the server's state to whoever can reach it.
    host: str = "127.0.0.1"
    port: int = Field(default=9480, ge=0, le=65535)
