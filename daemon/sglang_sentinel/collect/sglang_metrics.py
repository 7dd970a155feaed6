"""The ``sglang`` collector: SGLang's own ``/metrics``, fetched at scrape time and re-exposed as is.

SGLang stays bound to loopback (its API has no auth by default), so operators see its series
through sentinel's one target. Families keep SGLang's ``sglang:*`` names and labels — SGLang's
dashboards and docs use them. The text is parsed with prometheus_client's parser, never by hand.

Nothing is cached: when the fetch fails (down, slow, not 200, too big, not the exposition format)
no ``sglang:*`` series is served for that scrape — rather a gap than silently stale numbers — and
the collector reports failure with the reason. Only families named ``sglang:*`` / ``sglang_*`` pass:
anything else (a process collector, or the URL pointing at sentinel itself) could collide with
sentinel's own names.

SGLang's version decides how its series are read (``sglang_sentinel.sglang.versions``); whoever learns it
(the supervisor detects it before launch) calls :meth:`SGLangMetricsCollector.set_sglang_version`.
``sentinel_sglang_version_known`` is 0 from the start until a version in the known range is set:
an undetected or newer-than-known server is read with the newest known behaviour, and said so.

Parsing uses prometheus_client's parser through a per-family-shape cache (``sglang_parse.py``):
a full parse of a TP=8 payload costs about ten times the scrape budget.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import TYPE_CHECKING

import httpx
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric

from sglang_sentinel.collect.histograms import DEFAULT_COARSE_BUCKETS, HistogramFilter
from sglang_sentinel.collect.registry import CollectorInputs, register
from sglang_sentinel.collect.sglang_parse import FamilyParser
from sglang_sentinel.collect.source import CollectionFailed
from sglang_sentinel.httpread import BlockingReader, HttpReadError
from sglang_sentinel.sglang.versions import Resolution, note_version, resolve

if TYPE_CHECKING:
    from sglang_sentinel.collect.settings import SGLangMetricsSettings

__all__ = ["SGLangMetricsCollector", "default_metrics_url"]

_PREFIXES = ("sglang:", "sglang_")
_REASONS = ("connect", "disconnected", "timeout", "http_status", "too_large", "parse", "empty")


class _FetchError(Exception):
    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def default_metrics_url(host: str, port: int) -> str:
    if ":" in host and not host.startswith("["):
        host = f"[{host}]"  # IPv6 literal
    return f"http://{host}:{port}/metrics"


class SGLangMetricsCollector:
    """Fetches ``url`` once per ``collect()`` within ``timeout`` seconds in all."""

    def __init__(
        self,
        url: str,
        *,
        timeout: float = 2.0,
        max_bytes: int = 32 * 2**20,
        transport: httpx.AsyncBaseTransport | None = None,
        histograms: HistogramFilter | None = None,
    ) -> None:
        self.url = url
        self._histograms = histograms or HistogramFilter("keep")
        self._histogram_lines_dropped: int | None = None
        self.timeout = timeout
        self.max_bytes = max_bytes
        self._reader = BlockingReader(transport=transport, name="sglang-metrics-read")
        self._lock = threading.Lock()
        self._failures = dict.fromkeys(_REASONS, 0)
        self._last_success: float | None = None
        self._parser = FamilyParser()
        self._version: Resolution = resolve(None)

    def set_sglang_version(self, version: str | None) -> None:
        """The server's SGLang version as reported (``None``: unknown). Logs an unknown one once."""
        resolution = note_version(version)
        with self._lock:
            self._version = resolution

    def close(self) -> None:
        self._reader.close()

    def last_success_timestamp(self) -> float | None:
        return self._last_success

    def _fetch(self) -> str:
        # The one bounded reader: a deadline over the whole exchange (headers that never end, a
        # body that drips forever) and a byte cap. A scrape worker must never wait longer than
        # ``timeout``: the exporter has a handful, and each one stuck is a scrape lost.
        try:
            reply = self._reader.read(
                "GET",
                self.url,
                deadline_s=self.timeout,
                max_bytes=self.max_bytes,
                headers={"Accept": "text/plain"},
            )
        except HttpReadError as exc:
            reason = "connect" if exc.reason == "error" else exc.reason
            raise _FetchError(reason, f"{reason}: {exc.detail}") from None
        if reply.status_code != 200:
            hint = " (is SGLang started with --enable-metrics?)" if reply.status_code == 404 else ""
            raise _FetchError("http_status", f"HTTP {reply.status_code}{hint}")
        try:
            return reply.content.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise _FetchError("parse", f"not UTF-8 text: {exc}") from exc

    def collect(self) -> Iterator[Metric]:
        try:
            filtered = self._histograms.apply(self._fetch())
            text = filtered.text
            try:
                families = self._parser.parse(text)
            except Exception as exc:  # the parser raises ValueError, IndexError, ... on garbage
                raise _FetchError("parse", f"not the Prometheus text format: {exc}") from exc
            kept = [f for f in families if f.name.startswith(_PREFIXES)]
            if not kept:
                raise _FetchError(
                    "empty", f"no sglang metrics in the response ({len(families)} other families)"
                )
        except _FetchError as exc:
            with self._lock:
                self._failures[exc.reason] += 1
            yield from self._own(dropped=None)
            raise CollectionFailed(f"{self.url}: {exc}") from None
        self._last_success = time.time()
        self._histogram_lines_dropped = filtered.dropped_lines
        yield from self._own(dropped=len(families) - len(kept))
        yield from kept

    def _own(self, dropped: int | None) -> Iterator[Metric]:
        failures = CounterMetricFamily(
            "sentinel_sglang_metrics_fetch_failures",
            "Failed fetches of SGLang's /metrics, by reason.",
            labels=["reason"],
        )
        with self._lock:
            for reason, count in self._failures.items():
                failures.add_metric([reason], count)
            version = self._version
        yield failures
        yield GaugeMetricFamily(
            "sentinel_sglang_version_known",
            "1 when the server's SGLang version is within the range sentinel's readers know; 0 when it is "
            "undetected, unparsable or newer (read as the newest known behaviour).",
            value=1 if version.known else 0,
        )
        info = GaugeMetricFamily(
            "sentinel_sglang_version_info",
            "The SGLang version as reported and the known one whose behaviour the readers use (constant 1).",
            labels=["reported", "behaves_as"],
        )
        info.add_metric([version.reported or "", str(version.behaves_as)], 1)
        yield info
        if dropped is not None:
            yield GaugeMetricFamily(
                "sentinel_sglang_metrics_dropped_families",
                "Families in SGLang's /metrics not named sglang:* or sglang_*, left out of this scrape.",
                value=dropped,
            )
        if dropped is not None and self._histograms.mode != "keep":
            info = GaugeMetricFamily(
                "sentinel_sglang_histogram_samples_dropped",
                "Histogram sample lines of SGLang's /metrics left out of this scrape by"
                " [collectors.sglang] histograms (coarsen: buckets; drop: whole families).",
                labels=["mode"],
            )
            info.add_metric([self._histograms.mode], self._histogram_lines_dropped or 0)
            yield info


def _section(settings: CollectorInputs) -> SGLangMetricsSettings:
    """``[collectors.sglang]`` with its URL resolved: by default the supervised server's."""
    cfg = settings.collectors.sglang
    if cfg.url:
        return cfg
    url = default_metrics_url(settings.server.host, settings.server.port)
    if getattr(settings.server, "kind", "server") == "router":
        # A router serves no /metrics; it aggregates its workers' at /engine_metrics (worker_addr label).
        url = url.removesuffix("/metrics") + "/engine_metrics"
    return cfg.model_copy(update={"url": url})


@register("sglang", section=_section)
def _factory(cfg: SGLangMetricsSettings) -> SGLangMetricsCollector:
    assert cfg.url is not None  # resolved by _section
    histograms = HistogramFilter(cfg.histograms, cfg.coarsen_buckets or DEFAULT_COARSE_BUCKETS)
    return SGLangMetricsCollector(
        cfg.url, timeout=cfg.timeout_seconds, max_bytes=cfg.max_bytes, histograms=histograms
    )
