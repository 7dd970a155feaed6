"""Collectors: every source of series behind one registry, in node_exporter's manner.

Public surface::

    from sglang_sentinel.collect import build_collector_set, CollectorSet
    collectors = build_collector_set(settings)      # the [collectors] enabled ones, not started
    collectors.add("supervisor", supervisor.collector)  # any prometheus_client Collector
    log = collectors.get("sglang_log")              # SGLangLogCollector
    supervisor.add_line_listener(lambda line: log.feed(line.text))
    await collectors.start()                         # background GPU reads begin
    registry = collectors.registry()                 # serve with sglang_sentinel.export.Exporter
    ...
    await collectors.stop()

Built-in collectors: ``sglang`` (SGLang's /metrics re-exposed), ``sglang_log`` (batch-line
series), ``gpu`` (NVML). ``sentinel_build_info`` and the per-collector
``sentinel_collector_{success,duration_seconds,last_success_timestamp_seconds}`` are always on.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_sentinel.lazy import lazy_exports

if TYPE_CHECKING:
    from sglang_sentinel.collect.registry import (
        CollectorInputs,
        CollectorSet,
        Factory,
        ServerEndpoint,
        available,
        build_collector_set,
        register,
    )
    from sglang_sentinel.collect.sglang_log import SGLangLogCollector
    from sglang_sentinel.collect.sglang_metrics import SGLangMetricsCollector
    from sglang_sentinel.collect.source import Background, CollectionFailed, Source, Timestamped

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

# Imported on first use: sglang_sentinel.config imports this package for its settings model, and
# every CLI command loads the config; HTTP and NVML libraries are not needed for that.
__getattr__ = lazy_exports(
    __name__,
    {
        "CollectorInputs": "sglang_sentinel.collect.registry",
        "CollectorSet": "sglang_sentinel.collect.registry",
        "Factory": "sglang_sentinel.collect.registry",
        "available": "sglang_sentinel.collect.registry",
        "build_collector_set": "sglang_sentinel.collect.registry",
        "register": "sglang_sentinel.collect.registry",
        "ServerEndpoint": "sglang_sentinel.collect.registry",
        "SGLangLogCollector": "sglang_sentinel.collect.sglang_log",
        "SGLangMetricsCollector": "sglang_sentinel.collect.sglang_metrics",
        "Background": "sglang_sentinel.collect.source",
        "CollectionFailed": "sglang_sentinel.collect.source",
        "Source": "sglang_sentinel.collect.source",
        "Timestamped": "sglang_sentinel.collect.source",
    },
)
