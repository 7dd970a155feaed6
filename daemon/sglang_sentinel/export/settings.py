"""Configuration of the exporter's HTTP side (section ``[exporter]``).

TLS and basic auth follow Prometheus' exporter web configuration (exporter-toolkit's
``web.yml``): certificate and key from files, an optional client CA for mutual TLS, and users
with bcrypt password hashes (``htpasswd -nBC 10 USER``) kept in a file of ``user:hash`` lines —
never a plaintext password in the config.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator

from sglang_sentinel.section import Section

__all__ = ["ExporterSettings", "TlsSettings"]


class TlsSettings(Section):
    """``[exporter.tls]``: serve HTTPS."""

    cert_file: Path
    key_file: Path
    # Set = mutual TLS: clients must present a certificate signed by this CA.
    client_ca_file: Path | None = None
    min_version: Literal["TLS12", "TLS13"] = "TLS12"


class ExporterSettings(Section):
    # Loopback by default: the exporter shows the server's state to whoever can reach it.
    host: str = "127.0.0.1"
    port: int = Field(default=9480, ge=0, le=65535)
    tls: TlsSettings | None = None
    # Lines "user:bcrypt-hash" ('#' comments allowed). Set = every path but /healthz needs them.
    basic_auth_users_file: Path | None = None
    # More scrapes than this at once get an immediate 503 instead of piling up behind a slow one.
    max_concurrent_scrapes: int = Field(default=4, ge=1, le=64)

    # Addresses or networks of the scrapers (e.g. ["10.0.0.5", "10.1.0.0/24"]): with basic auth,
    # their logins skip the per-address failure limit and get a checking lane of their own, so a
    # password flood from elsewhere cannot lock Prometheus out (even right after a restart, when
    # no credential is cached yet). Addresses that logged in successfully get the lane anyway.
    scraper_addresses: tuple[str, ...] = ()

    @field_validator("scraper_addresses")
    @classmethod
    def _networks(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        import ipaddress

        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError:
                raise ValueError(f"{item!r} is not an IP address or network") from None
        return value

    @field_validator("host")
    @classmethod
    def _explicit_host(cls, value: str) -> str:
        # aiohttp binds every interface for an empty host: that must be written, never implied.
        if not value.strip():
            raise ValueError(
                "empty host; write 127.0.0.1 (loopback) or, to listen on every interface,"
                ' "0.0.0.0" or "::" explicitly'
            )
        return value

    # The longest /metrics waits for its collectors before answering 503 (Prometheus' own
    # X-Prometheus-Scrape-Timeout-Seconds, when shorter, wins). Collectors bound their own reads
    # well inside it ([collectors.sglang] timeout_seconds); this is the backstop for one that
    # does not, so a scrape is never left hanging.
    scrape_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
