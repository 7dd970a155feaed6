"""Collectors: every source of series behind one registry, in node_exporter's manner.

Public surface::

    from sentinel.collect import build_collector_set, CollectorSet
    collectors = build_collector_set(settings)      # the [collectors] enabled ones, not started
    collectors.add("supervisor", supervisor.collector)  # any prometheus_client Collector
    log = collectors.get("sglang_log")              # SGLangLogCollector
    supervisor.add_line_listener(lambda line: log.feed(line.text))
    await collectors.start()                         # background GPU reads begin
    registry = collectors.registry()                 # serve with sentinel.export.Exporter
    ...
    await collectors.stop()

Built-in collectors: ``sglang`` (SGLang's /metrics re-exposed), ``sglang_log`` (batch-line
series), ``gpu`` (NVML). ``sentinel_build_info`` and the per-collector
``sentinel_collector_{success,duration_seconds,last_success_timestamp_seconds}`` are always on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sentinel.lazy import lazy_exports

if TYPE_CHECKING:
    from sentinel.collect.registry import (
        CollectorInputs,
        CollectorSet,
        Factory,
        ServerEndpoint,
        available,
        build_collector_set,
        register,
    )
    from sentinel.collect.sglang_log import SGLangLogCollector
    from sentinel.collect.sglang_metrics import SGLangMetricsCollector
    from sentinel.collect.source import Background, CollectionFailed, Source, Timestamped

__all__ = [
    "Background",
    "CollectionFailed",
    "CollectorInputs",
    "CollectorSet",
    "Factory",
    "SGLangLogCollector",
    "SGLangMetricsCollector",
    "ServerEndpoint",
    "Source",
    "Timestamped",
    "available",
    "build_collector_set",
    "register",
]

# Imported on first use: sentinel.config imports this package for its settings model, and
# every CLI command loads the config; HTTP and NVML libraries are not needed for that.
__getattr__ = lazy_exports(
    __name__,
    {
        "CollectorInputs": "sentinel.collect.registry",
        "CollectorSet": "sentinel.collect.registry",
        "Factory": "sentinel.collect.registry",
        "available": "sentinel.collect.registry",
        "build_collector_set": "sentinel.collect.registry",
        "register": "sentinel.collect.registry",
        "ServerEndpoint": "sentinel.collect.registry",
        "SGLangLogCollector": "sentinel.collect.sglang_log",
        "SGLangMetricsCollector": "sentinel.collect.sglang_metrics",
        "Background": "sentinel.collect.source",
        "CollectionFailed": "sentinel.collect.source",
        "Source": "sentinel.collect.source",
        "Timestamped": "sentinel.collect.source",
    },
)
