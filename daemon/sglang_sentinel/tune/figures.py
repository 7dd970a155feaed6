"""Which measure a tune's figure is: the short one (the race's probe, halving's short ramp) or the
full calibration, each in its own place, never one in the other's column.

A trial's ``summary`` is of its best kind measured (halving ranks by it), so in one column it
would put a full calibration's figure beside another trial's probe: a record's full figure is
lower or higher than its probe by however the two methods differ (the probe runs one step at the
first full calibration's saturation concurrency), and an eliminated configuration could read as
faster than the winner it lost to on probes. So the document carries, per trial, ``figures``: the
summary of each measure alone, and ``ranked_by``: the measure the winner's verdict used (race:
``short``, the probes; halving: ``full``, the finals). Tables and the report show one column per
measure, named (:func:`measure_name`), the ranking one first.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from sglang_sentinel.tune.halving import summarize

__all__ = ["MEASURES", "figures_of", "measure_name", "measures_legend", "ranked_by", "shown_figures"]

MEASURES = ("short", "full")


def figures_of(rounds: Sequence[dict[str, Any]]) -> dict[str, dict[str, Any] | None]:
    """The document's ``figures``: one summary per measure (None where it was not measured)."""
    return {kind: summarize(rounds, kind=kind) for kind in MEASURES}


def ranked_by(doc: Mapping[str, Any]) -> str:
    """The measure the verdict compares (``full`` for a document that does not say)."""
    kind = doc.get("ranked_by")
    return kind if kind in MEASURES else "full"


def measure_name(doc: Mapping[str, Any], kind: str) -> str:
    """What a column of ``kind`` figures is called: ``probe@c16`` (the race's probes, at the
    concurrency they ran at), ``short`` (halving's short ramp), ``full``."""
    if kind != "short":
        return kind
    if doc.get("search") == "race" or doc.get("probe_concurrency") is not None:
        c = doc.get("probe_concurrency")
        return f"probe@c{c}" if isinstance(c, int) else "probe"
    return "short"


def shown_figures(trial: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A trial's figures by measure, read defensively (a document of an older version has only
    ``summary``: it is shown under the measure its ``kind`` names, or not at all)."""
    figures = trial.get("figures")
    if isinstance(figures, Mapping):
        return {k: v for k in MEASURES if isinstance(v := figures.get(k), Mapping)}
    summary = trial.get("summary")
    if isinstance(summary, Mapping) and summary.get("kind") in MEASURES:
        return {str(summary["kind"]): summary}
    return {}


def measures_legend(doc: Mapping[str, Any]) -> str:
    """Which measure each figure column is, and which one ranked (the table's and the report's)."""
    if ranked_by(doc) == "short":
        c = doc.get("probe_concurrency")
        at = f"concurrency {c}" if c is not None else "the first full calibration's saturation concurrency"
        return (
            f"Ranked by {measure_name(doc, 'short')}: the race's probe, one calibration step at {at} for "
            "every configuration; full: the full calibration's saturation throughput (records only)."
        )
    return (
        "Ranked by full: the full calibration's saturation throughput (the finalists); short: the short "
        "ramp every configuration got (the halving rounds ranked by it)."
    )
