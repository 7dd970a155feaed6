"""The exporter: sentinel's HTTP side (``/metrics``, ``/healthz``, the ``/`` status page).

Usage::

    from sentinel.export import Exporter
    exporter = Exporter(collectors.registry(), settings.exporter, index=status_page_handler)
    await exporter.start()        # raises ExporterConfigError on bad TLS/auth files or a busy port
    ...
    await exporter.stop()
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sentinel.lazy import lazy_exports

if TYPE_CHECKING:
    from sentinel.export.auth import BasicAuth, ExporterConfigError, load_users, tls_context
    from sentinel.export.server import Exporter, Handler, HealthCheck
    from sentinel.export.settings import ExporterSettings, TlsSettings

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

# Imported on first use: sentinel.config imports this package for its settings model, and
# every CLI command loads the config; HTTP and NVML libraries are not needed for that.
__getattr__ = lazy_exports(
    __name__,
    {
        "BasicAuth": "sentinel.export.auth",
        "ExporterConfigError": "sentinel.export.auth",
        "load_users": "sentinel.export.auth",
        "tls_context": "sentinel.export.auth",
        "Exporter": "sentinel.export.server",
        "Handler": "sentinel.export.server",
        "HealthCheck": "sentinel.export.server",
        "ExporterSettings": "sentinel.export.settings",
        "TlsSettings": "sentinel.export.settings",
    },
)
