"""What a collector is: a prometheus_client Collector, plus optional background and staleness hooks."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol, runtime_checkable

from prometheus_client.metrics_core import Metric

__all__ = ["Background", "CollectionFailed", "NotApplicable", "Source", "Timestamped"]


class CollectionFailed(Exception):
    """Raised by ``collect()`` (possibly after yielding what is still valid) when a source failed.

    The message is a short human reason ("sglang /metrics: connect refused"); the registry logs
    it on change and reports ``sentinel_collector_success{collector} 0``.
    """


class NotApplicable(Exception):
    """Raised by ``collect()`` when there is nothing for this source to read on this host, and
    none was expected (the GPU collector without an NVIDIA driver, where the launch needs no GPU).

    Not a failure: the registry reports ``sentinel_collector_state{state="not_applicable"} 1``
    and no ``sentinel_collector_success`` for it (not collected is not "failed"), the status page
    shows it grey. The message says why ("no NVIDIA driver ...; the launch needs no GPU").
    """


@runtime_checkable
class Source(Protocol):
    """A collector in prometheus_client's sense: fresh metric families on every call."""

    def collect(self) -> Iterable[Metric]: ...


@runtime_checkable
class Background(Protocol):
    """A source that does its work off the scrape path (threads), started and stopped by its owner."""

    def start(self) -> None: ...

    def stop(self, timeout: float) -> None: ...


@runtime_checkable
class Timestamped(Protocol):
    """A source that knows when it last got good data (exported as a timestamp, so age is alertable)."""

    def last_success_timestamp(self) -> float | None: ...
