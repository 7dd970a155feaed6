"""Verdicts on one measured step: does it meet the SLO, is the server saturated, can it be trusted.

Saturation is decided from both sides, because either alone misleads:

- server: SGLang's waiting queue non-empty for most of the step (``sglang:num_queue_reqs``), the
  KV pool nearly full (``sglang:token_usage``) or requests retracted for lack of KV. These say the
  server cannot take more work in parallel, whatever the client sees.
- client: a throughput plateau (doubling concurrency bought less than ``plateau_efficiency`` of
  the linear gain; a plateau that the next step climbs out of is judged again from the step
  before it) or TTFT growing many times over while throughput barely moves — requests wait.

A plateau the client measured while it was itself lagging (the load engine's ``client_bound``)
with an idle server queue says nothing about the server: that step is *untrusted* and the search
stops with ``client-bound`` instead of reporting a fake ceiling.
"""

from __future__ import annotations

from collections.abc import Sequence

from sglang_sentinel.calibrate.model import Step, StepMeasurement
from sglang_sentinel.calibrate.settings import CalibrationSettings, SloSettings

__all__ = ["client_limited", "judge_saturation", "judge_slo", "scaling_efficiency", "trusted"]

# A step with fewer successful requests than this fraction of those sent is not judged.
_MIN_SUCCESS_RATIO = 0.5


def judge_slo(m: StepMeasurement, slo: SloSettings) -> tuple[bool, tuple[str, ...]]:
    """(ok, violations): each violation names the limit, the measured value and the limit."""
    violations: list[str] = []
    if m.error_ratio > slo.max_error_ratio:
        violations.append(f"error ratio {m.error_ratio:.3f} > {slo.max_error_ratio:.3f}")
    checks = (
        ("TTFT", m.ttft, slo.ttft_seconds, slo.ttft_percentile),
        ("TPOT", m.tpot, slo.tpot_seconds, slo.tpot_percentile),
        ("E2E", m.e2e, slo.e2e_seconds, slo.e2e_percentile),
    )
    for name, latency, limit, pct in checks:
        if limit is None:
            continue
        if latency is None:
            violations.append(f"{name} p{pct} not measured (no successful request)")
            continue
        value = latency.at(pct)
        if value > limit:
            violations.append(f"{name} p{pct} {value * 1e3:.0f} ms > {limit * 1e3:.0f} ms")
    return not violations, tuple(violations)


def client_limited(m: StepMeasurement, settings: CalibrationSettings) -> bool:
    """The client, not the server, bounded this step's throughput."""
    if not m.client_bound:
        return False
    if m.schedule_lag_p99 is None or m.e2e is None or m.e2e.mean <= 0:
        return True
    return m.schedule_lag_p99 / m.e2e.mean > settings.client_lag_tolerance


def trusted(m: StepMeasurement, settings: CalibrationSettings) -> bool:
    return not client_limited(m, settings) and m.sent > 0 and m.completed >= _MIN_SUCCESS_RATIO * m.sent


def scaling_efficiency(low: StepMeasurement, high: StepMeasurement) -> float | None:
    """Fraction of the linear gain realised from ``low`` to ``high`` concurrency.

    1.0: throughput grew in proportion to concurrency; 0: no gain; negative: it fell.
    """
    if high.concurrency <= low.concurrency or low.throughput <= 0:
        return None
    gain = high.throughput / low.throughput - 1.0
    ideal = high.concurrency / low.concurrency - 1.0
    return gain / ideal


def judge_saturation(
    m: StepMeasurement, earlier: Sequence[Step], settings: CalibrationSettings
) -> tuple[bool, bool, tuple[str, ...]]:
    """(saturated, server_said_so, reasons) for step ``m`` given the steps measured before it.

    ``server_said_so``: the verdict rests on the server's own gauges, not only on client figures.
    """
    reasons: list[str] = []
    s = m.server
    if s is not None and s.samples > 0:
        if (
            s.queue_nonzero_ratio is not None
            and s.queue_nonzero_ratio >= settings.queue_sustained_ratio
            and (s.queue_mean or 0.0) >= 0.5
        ):
            reasons.append(
                f"server queue non-empty in {s.queue_nonzero_ratio:.0%} of samples (mean {s.queue_mean:.1f})"
            )
        if s.token_usage_max is not None and s.token_usage_max >= settings.kv_usage_high:
            reasons.append(f"KV cache usage reached {s.token_usage_max:.2f}")
        if s.retractions is not None and s.retractions > 0:
            reasons.append(f"{s.retractions:.0f} requests retracted (KV full)")
    server_side = bool(reasons)
    lower = [st for st in earlier if st.trusted and st.concurrency < m.concurrency]
    if lower:
        below = max(lower, key=lambda st: st.concurrency)
        eff = scaling_efficiency(below.measurement, m)
        plateau = _plateau(below, m, settings)
        if plateau is not None:
            reasons.append(plateau)
        elif below.saturated and not below.server_saturated:
            # The step below was a plateau by the client's figures alone and this one climbed from
            # it: either that step read low (a noisy window) or the server still scales. Measured
            # from the step before the plateau the two tell apart: on a bending curve the fraction
            # of linear gain depends on the upper concurrency, not on the base (throughput
            # c/(c+K) gains K/(c+K) of linear from any lower c), and a base two steps down divides
            # the same noise by a larger ideal gain. So a step at 128 that read low, between 64
            # and 256 that together gained (say) 8% of linear, is a ceiling, not a lower bound.
            base = [st for st in lower if st.concurrency < below.concurrency]
            wide = _plateau(max(base, key=lambda st: st.concurrency), m, settings) if base else None
            if wide is not None:
                reasons.append(wide)
        ttfts = [st.measurement.ttft.p50 for st in lower if st.measurement.ttft is not None]
        if (
            m.ttft is not None
            and ttfts
            and min(ttfts) > 0
            and m.ttft.p50 >= settings.ttft_growth * min(ttfts)
            and eff is not None
            and eff < 2 * settings.plateau_efficiency
        ):
            reasons.append(f"median TTFT {m.ttft.p50 / min(ttfts):.1f}x the lowest step's at small gain")
    return bool(reasons), server_side, tuple(reasons)


def _plateau(low: Step, m: StepMeasurement, settings: CalibrationSettings) -> str | None:
    """The reason ``m`` is a throughput plateau over step ``low``, or None."""
    eff = scaling_efficiency(low.measurement, m)
    if eff is None or eff >= settings.plateau_efficiency:
        return None
    return f"throughput plateau: {low.concurrency}->{m.concurrency} gained {eff:.0%} of linear"
