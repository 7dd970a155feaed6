"""The exporter: sentinel's HTTP side (``/metrics``, ``/healthz``, the ``/`` status page).

Usage::

    from sglang_sentinel.export import Exporter
    exporter = Exporter(collectors.registry(), settings.exporter, index=status_page_handler)
    await exporter.start()        # raises ExporterConfigError on bad TLS/auth files or a busy port
    ...
    await exporter.stop()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_sentinel.lazy import lazy_exports

if TYPE_CHECKING:
    from sglang_sentinel.export.auth import BasicAuth, ExporterConfigError, load_users, tls_context
    from sglang_sentinel.export.server import Exporter, Handler, HealthCheck
    from sglang_sentinel.export.settings import ExporterSettings, TlsSettings

__all__ = [
    "BasicAuth",
    "Exporter",
    "ExporterConfigError",
    "ExporterSettings",
    "Handler",
    "HealthCheck",
    "TlsSettings",
    "load_users",
    "tls_context",
]

# Imported on first use: sglang_sentinel.config imports this package for its settings model, and
# every CLI command loads the config; HTTP and NVML libraries are not needed for that.
__getattr__ = lazy_exports(
    __name__,
    {
        "BasicAuth": "sglang_sentinel.export.auth",
        "ExporterConfigError": "sglang_sentinel.export.auth",
        "load_users": "sglang_sentinel.export.auth",
        "tls_context": "sglang_sentinel.export.auth",
        "Exporter": "sglang_sentinel.export.server",
        "Handler": "sglang_sentinel.export.server",
        "HealthCheck": "sglang_sentinel.export.server",
        "ExporterSettings": "sglang_sentinel.export.settings",
        "TlsSettings": "sglang_sentinel.export.settings",
    },
)
