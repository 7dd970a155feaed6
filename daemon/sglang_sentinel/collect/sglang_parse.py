"""Parsing SGLang's /metrics fast enough for every scrape, with prometheus_client's parser.

prometheus_client's text parser walks label sets character by character: ~110 ms for a TP=8
SGLang payload (114 KB, 747 samples) on the reference box, ten times the scrape budget. Yet from
one scrape to the next the *shape* of a family — its HELP/TYPE lines and every sample's name and
labels, in order — almost never changes; only the numbers do. So:

- the payload is cut into family blocks at its comment lines;
- a block's shape key is the block with each sample line's last token (the value) removed;
- a shape not seen in the previous scrape is parsed by prometheus_client's parser, and its
  prometheus_client rendering (text and OpenMetrics) is kept as one prefix per sample line;
- a known shape only needs its values: ``float()`` of each last token, formatted back with
  prometheus_client's ``floatToGoString``.

Everything that is not a plain ``name{labels} value`` line (timestamps, exemplars, a sample count
that does not match) goes through the full parser every time, so correctness never depends on
the fast path. Cache entries live for one scrape: shapes that disappear are dropped.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

from prometheus_client.metrics_core import Metric
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.utils import floatToGoString

from sglang_sentinel.collect.render import PrerenderedFamily, render_family

__all__ = ["FamilyParser"]


def _go(value: float) -> str:
    text: str = floatToGoString(value)
    return text


@dataclass(frozen=True, slots=True)
class _Template:
    families: tuple[Metric, ...]
    # Per family, per format: (header lines, one prefix per sample line); None = no fast
    # rendering for this shape (line counts did not line up): rendered per scrape instead.
    prefixes: tuple[dict[str, tuple[bytes, tuple[bytes, ...]]] | None, ...]


def _split_rendered(body: bytes, samples: int) -> tuple[bytes, tuple[bytes, ...]] | None:
    lines = body.splitlines(keepends=True)
    header = b"".join(ln for ln in lines if ln.startswith(b"#"))
    sample_lines = [ln for ln in lines if not ln.startswith(b"#")]
    if len(sample_lines) != samples:
        return None
    prefixes = []
    for ln in sample_lines:
        prefix, sep, _ = ln.rstrip(b"\n").rpartition(b" ")
        if not sep:
            return None
        prefixes.append(prefix + b" ")
    return header, tuple(prefixes)


def _template(block: str) -> _Template:
    families = tuple(text_string_to_metric_families(block))
    prefixes = []
    for family in families:
        text = _split_rendered(render_family(family, "text"), len(family.samples))
        om = _split_rendered(render_family(family, "openmetrics"), len(family.samples))
        prefixes.append({"text": text, "openmetrics": om} if text is not None and om is not None else None)
    return _Template(families, tuple(prefixes))


def _blocks(text: str) -> list[tuple[str, list[str]]]:
    """(comment lines, sample lines) per family block, in payload order."""
    blocks: list[tuple[list[str], list[str]]] = []
    comments: list[str] = []
    samples: list[str] = []
    current: str | None = None
    for line in text.splitlines():
        if not line.strip():
            continue
        if line.startswith("#"):
            parts = line.split(None, 3)
            name = parts[2] if len(parts) > 2 and parts[1] in ("HELP", "TYPE") else None
            if samples or (name is not None and current is not None and name != current):
                blocks.append((comments, samples))
                comments, samples = [], []
            if name is not None:
                current = name
            comments.append(line)
        else:
            samples.append(line)
    if comments or samples:
        blocks.append((comments, samples))
    return [("\n".join(c), s) for c, s in blocks]


class FamilyParser:
    """Parses successive payloads of one server, reusing per-shape templates between calls."""

    def __init__(self) -> None:
        self._cache: dict[str, _Template] = {}
        # Value token -> (float, formatted line end). Bucket counts repeat from scrape to scrape;
        # a token is validated by float() the first time it is seen.
        self._tokens: dict[str, tuple[float, bytes]] = {}
        self._lock = threading.Lock()
        self.full_parses = 0  # blocks that went through prometheus_client's parser (for tests)

    def parse(self, text: str) -> list[Metric]:
        """All families of ``text``. Raises ValueError (or the parser's error) on malformed input."""
        with self._lock:
            previous = self._cache
        current: dict[str, _Template] = {}
        out: list[Metric] = []
        for comments, lines in _blocks(text):
            prefixes = []
            values = []
            fast = True
            for line in lines:
                prefix, sep, value = line.rpartition(" ")
                # '}' or a bare name right before the value: no timestamp or exemplar on this line.
                if (
                    not sep
                    or not prefix
                    or "#" in value
                    or "_" in value  # Python's float() takes "1_000"; the exposition format does not
                    or prefix.endswith(" ")
                    or (" " in prefix and not prefix.endswith("}"))
                ):
                    fast = False
                    break
                prefixes.append(prefix)
                values.append(value)
            key = comments + "\n" + "\n".join(prefixes) if fast else None
            template = previous.get(key) if key is not None else None
            if template is not None:
                try:
                    numbers, formatted = self._numbers(values)
                except ValueError:
                    template = None
            if template is None:
                block = (comments + "\n" if comments else "") + "\n".join(lines) + "\n"
                template = _template(block)
                self.full_parses += 1
                if key is not None and sum(len(f.samples) for f in template.families) == len(lines):
                    current[key] = template
                out.extend(template.families)
                continue
            current[key] = template  # type: ignore[index]
            out.extend(self._instantiate(template, numbers, formatted))
        with self._lock:
            self._cache = current
        return out

    def _numbers(self, tokens: list[str]) -> tuple[list[float], list[bytes]]:
        cache = self._tokens
        if len(cache) > 50_000:  # bounded: a counter that keeps growing makes new tokens forever
            cache.clear()
        numbers: list[float] = []
        formatted: list[bytes] = []
        for token in tokens:
            hit = cache.get(token)
            if hit is None:
                number = float(token)
                hit = cache[token] = (number, _go(number).encode() + b"\n")
            numbers.append(hit[0])
            formatted.append(hit[1])
        return numbers, formatted

    @staticmethod
    def _instantiate(template: _Template, numbers: list[float], formatted: list[bytes]) -> list[Metric]:
        out: list[Metric] = []
        i = 0
        for family, pre in zip(template.families, template.prefixes, strict=True):
            n = len(family.samples)
            vals = numbers[i : i + n]
            i += n
            if pre is None:
                fresh = Metric(family.name, family.documentation, family.type, family.unit)
                fresh.samples = [s._replace(value=v) for s, v in zip(family.samples, vals, strict=True)]
                out.append(fresh)
                continue
            out.append(PrerenderedFamily(family, vals, formatted[i - n : i], pre))
        return out
