"""The cached renderers must produce exactly what prometheus_client would, scrape after scrape."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics import exposition as openmetrics
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.collect.render import render, render_family
from sglang_sentinel.collect.sglang_parse import FamilyParser

SAMPLES = Path(__file__).resolve().parent / "samples"
PAYLOAD = (SAMPLES / "sglang-0.5.9-tp8-synthetic.txt").read_text()


class Fixed:
    def __init__(self, families: list[Metric]) -> None:
        self.families = families

    def collect(self) -> list[Metric]:
        return self.families


def reference(families: list[Metric], fmt: str) -> bytes:
    registry = CollectorRegistry()
    registry.register(Fixed(families))
    if fmt == "text":
        text: bytes = generate_latest(registry)
        return text
    om: bytes = openmetrics.generate_latest(registry, escaping=openmetrics.ALLOWUTF8)
    return om


def mutate(text: str, seed: int) -> str:
    """The same payload with new values, as the next scrape of a busy server would show."""
    rng = random.Random(seed)
    out = []
    for line in text.splitlines():
        if line.startswith("#") or not line:
            out.append(line)
            continue
        prefix, _, _ = line.rpartition(" ")
        out.append(f"{prefix} {rng.choice([rng.randint(0, 10**6), rng.random() * 1e3, 0.0])}")
    return "\n".join(out) + "\n"


@pytest.mark.parametrize("fmt", ["text", "openmetrics"])
def test_fast_path_equals_a_full_parse_and_render(fmt: str) -> None:
    parser = FamilyParser()
    for seed in range(4):
        text = mutate(PAYLOAD, seed)
        fast = parser.parse(text)
        slow = list(text_string_to_metric_families(text))
        assert render(Fixed(fast), fmt) == reference(slow, fmt)  # type: ignore[arg-type]
        # And the samples themselves, for consumers other than the exporter.
        assert [(s.name, s.labels, s.value) for f in fast for s in f.samples] == [
            (s.name, s.labels, s.value) for f in slow for s in f.samples
        ]
    # After the first scrape, known shapes skip prometheus_client's parser entirely.
    families = len(list(text_string_to_metric_families(PAYLOAD)))
    assert parser.full_parses == families


def test_a_new_series_reparses_only_its_family() -> None:
    parser = FamilyParser()
    parser.parse(PAYLOAD)
    before = parser.full_parses
    extra = PAYLOAD.replace(
        'sglang:num_running_reqs{engine_type="unified",',
        'sglang:num_running_reqs{engine_type="unified",model_name="other",moe_ep_rank="0",'
        'pp_rank="0",tp_rank="1"} 3.0\n'
        'sglang:num_running_reqs{engine_type="unified",',
        1,
    )
    families = parser.parse(extra)
    assert parser.full_parses == before + 1
    running = next(f for f in families if f.name == "sglang:num_running_reqs")
    assert len(running.samples) == 2


def test_timestamps_and_odd_values_take_the_full_parser() -> None:
    parser = FamilyParser()
    text = '# TYPE sglang:x gauge\nsglang:x{a="1 2"} 3 1700000000000\n'
    for _ in range(2):
        (family,) = parser.parse(text)
        assert family.samples[0].timestamp is not None
    assert parser.full_parses == 2
    ok = "# TYPE sglang:y gauge\nsglang:y 1\n"
    parser.parse(ok)
    with pytest.raises(ValueError, match="1_000"):
        parser.parse("# TYPE sglang:y gauge\nsglang:y 1_000\n")  # same shape, value not in the format
    (family,) = parser.parse("# TYPE sglang:y gauge\nsglang:y NaN\n")
    assert family.samples[0].value != family.samples[0].value


def test_render_family_caches_per_object() -> None:
    (family,) = text_string_to_metric_families("# TYPE sentinel_x gauge\nsentinel_x 1\n")
    first = render_family(family, "text")
    family.samples[0] = family.samples[0]._replace(value=2.0)  # nobody does this; the cache shows it
    assert render_family(family, "text") is first
    assert render_family(family, "openmetrics").startswith(b"# HELP sentinel_x")


def test_openmetrics_keeps_the_colon_on_sample_lines() -> None:
    """prometheus/client_python#1177: the 'underscores' escaping renamed only the sample lines."""
    (family,) = text_string_to_metric_families("# TYPE sglang:token_usage gauge\nsglang:token_usage 0.5\n")
    body = render(Fixed([family]), "openmetrics")
    assert b"\nsglang:token_usage 0.5\n" in body
    assert body.endswith(b"# EOF\n")
