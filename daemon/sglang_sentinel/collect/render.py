"""Exposition rendering with a per-family cache, so a scrape costs little more than a copy.

prometheus_client renders every sample of every family on every scrape; on this project's
reference box that is ~30 µs per sample, i.e. ~30 ms for 8 GPUs plus SGLang's ~750 samples —
three times the 10 ms budget of a scrape. Families here are immutable once yielded, so their
rendering can be kept with them:

- background collectors (GPU) return the *same* family objects until their snapshot changes and
  render them in their own thread when it does;
- SGLang's families are rebuilt per scrape from a template per family *shape* (the text of a
  family with the sample values removed) whose rendering is kept as line prefixes: a scrape then
  only formats numbers (see ``sglang_parse.py``).

Rendering itself is always prometheus_client's own (``generate_latest`` of one family), so the
output is byte for byte what prometheus_client would produce.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Literal

from prometheus_client.exposition import generate_latest as text_generate
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample

__all__ = ["Format", "PrerenderedFamily", "render", "render_families", "render_family"]

Format = Literal["text", "openmetrics"]
_EOF = b"# EOF\n"
_ATTR = "_sentinel_rendered"


class _One:
    def __init__(self, metric: Metric) -> None:
        self._metric = metric

    def collect(self) -> Iterator[Metric]:
        yield self._metric


def _render_one(metric: Metric, fmt: Format) -> bytes:
    if fmt == "text":
        return text_generate(_One(metric))
    # No escaping: every name sentinel serves is a valid classic name (colons included), and
    # prometheus_client 0.26's "underscores" escaping renames sample lines but not their
    # HELP/TYPE lines (prometheus/client_python#1177).
    body: bytes = openmetrics.generate_latest(_One(metric), escaping=openmetrics.ALLOWUTF8)
    return body[: -len(_EOF)] if body.endswith(_EOF) else body


class PrerenderedFamily(Metric):
    """A family rendered from a template's line prefixes plus this scrape's formatted values.

    Built by the SGLang parser. The exposition is assembled on first use per format (a scrape
    asks for one), and ``samples`` is built only when something reads it — the exporter never
    does, and building ~750 namedtuples per scrape would cost more than the rendering it saves.
    """

    def __init__(
        self,
        template: Metric,
        values: list[float],
        formatted: list[bytes],
        prefixes: dict[str, tuple[bytes, tuple[bytes, ...]]],
    ) -> None:
        self._template = template
        self._values = values
        self._formatted = formatted
        self._prefixes = prefixes
        self._built: list[Sample] | None = None
        super().__init__(template.name, template.documentation, template.type, template.unit)

    def rendered(self, fmt: str) -> bytes:
        header, prefixes = self._prefixes[fmt]
        parts = [header]
        for prefix, value in zip(prefixes, self._formatted, strict=True):
            parts.append(prefix)
            parts.append(value)
        return b"".join(parts)

    @property
    def samples(self) -> list[Sample]:
        if self._built is None:
            self._built = [
                s._replace(value=v) for s, v in zip(self._template.samples, self._values, strict=True)
            ]
        return self._built

    @samples.setter
    def samples(self, value: list[Sample]) -> None:
        # Metric.__init__ assigns an empty list; the real samples come from the template.
        if value:
            self._built = value


def render_family(metric: Metric, fmt: Format) -> bytes:
    """The family's exposition in ``fmt``, rendered once per family object."""
    if isinstance(metric, PrerenderedFamily):
        return metric.rendered(fmt)
    cache: dict[str, bytes] | None = getattr(metric, _ATTR, None)
    if cache is not None:
        hit = cache.get(fmt)
        if hit is not None:
            return hit
    body = _render_one(metric, fmt)
    if cache is None:
        cache = {}
        try:
            setattr(metric, _ATTR, cache)
        except AttributeError:  # a Metric-like object with __slots__: just do not cache
            return body
    cache[fmt] = body  # races between two scrapes write the same bytes
    return body


def render_families(metrics: Iterable[Metric], fmt: Format) -> None:
    """Render ahead of time (called by background collectors from their own thread)."""
    for metric in metrics:
        render_family(metric, fmt)


def render(collector: Collector, fmt: Format) -> bytes:
    """The whole exposition of ``collector`` (e.g. a CollectorRegistry) in ``fmt``."""
    parts = [render_family(metric, fmt) for metric in collector.collect()]
    if fmt == "openmetrics":
        parts.append(_EOF)
    return b"".join(parts)
