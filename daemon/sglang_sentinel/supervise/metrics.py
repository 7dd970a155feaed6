"""The supervisor's series, as a prometheus_client Collector (register it with any registry).

``collect()`` renders the supervisor's latest :class:`SupervisorSnapshot` (no I/O, no live reads
of the supervisor's fields), so it is safe from any scrape thread. Names other components and the
dashboards rely on:

- ``sentinel_server_up``: 1 when the last /health probe answered 200.
- ``sentinel_server_state{state}``: 1 for the current lifecycle state, 0 for the others.
- ``sentinel_server_restarts_total{reason}``: restarts performed, by why (crash cause or check).
- ``sentinel_server_crashes_total{reason}``: unexpected ends (exits, failed starts), by cause.
- ``sentinel_server_stop_kills_total``: our stops that SIGTERM did not end within stop_timeout.
- ``sentinel_server_start_duration_seconds``: launch → /health 200 of the last start.
- ``sentinel_server_ready_timestamp_seconds``: when the current (or last) server became ready.
- ``sentinel_server_fallback_total{reason}``: relaunches with a known-good configuration after
  the configured one failed correctness (``garbage``, ``nan_in_sampler``); 0 from the start.
- ``sentinel_server_config_info{source,config_hash,configured_hash}``: which command runs,
  ``source="configured"`` or ``"fallback"`` (alert: SGLangServerOnFallbackConfig).
- ``sentinel_server_fallback_discarded_total{why}``: saved fallback decisions that no longer
  applied (``configuration_changed``, ``sglang_version_changed``); 0 from the start.
- ``sentinel_probe_success{probe}`` / ``sentinel_probe_duration_seconds{probe}``: the last result
  of health, health_generate, stall and each canary (``canary_<name>``). While the server is not
  serving (starting, warming, restarting, failed, stopped) only ``health`` is exported, at 0:
  the other results are about a server that is not there, so they are absent (unknown).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.registry import Collector

from sglang_sentinel.supervise.classify import CRASH_REASONS
from sglang_sentinel.supervise.fallback import DISCARD_REASONS, FALLBACK_REASONS
from sglang_sentinel.supervise.state import ServerState

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric

    from sglang_sentinel.supervise.snapshot import SupervisorSnapshot

__all__ = ["SupervisorCollector"]


class SupervisorCollector(Collector):
    """``snapshot``: returns the latest published snapshot (``Supervisor.snapshot``)."""

    def __init__(self, snapshot: Callable[[], SupervisorSnapshot]) -> None:
        self._snapshot = snapshot

    def describe(self) -> Iterator[Metric]:
        # Avoid a collect() at registration time; names only.
        return iter(())

    def collect(self) -> Iterator[Metric]:
        sup = self._snapshot()
        state = sup.state
        yield GaugeMetricFamily(
            "sentinel_server_up",
            "1 when the last /health probe of the server answered 200.",
            value=int(sup.up),
        )
        g = GaugeMetricFamily(
            "sentinel_server_state", "Lifecycle state of the server: 1 for the current one.", labels=["state"]
        )
        for st in ServerState:
            g.add_metric([st.value], int(st is state))
        yield g
        yield GaugeMetricFamily(
            "sentinel_server_state_since_timestamp_seconds",
            "When the server entered its current state.",
            value=sup.since,
        )
        c = CounterMetricFamily(
            "sentinel_server_restarts", "Restarts of the server, by reason.", labels=["reason"]
        )
        for reason, n in sorted(sup.restarts.items()):
            c.add_metric([reason], n)
        yield c
        c = CounterMetricFamily(
            "sentinel_server_crashes",
            "Unexpected ends of the server (exits, failed starts, start timeouts), by classified cause.",
            labels=["reason"],
        )
        crashes = dict.fromkeys(CRASH_REASONS, 0) | dict(sup.crashes)
        for reason, n in sorted(crashes.items()):
            c.add_metric([reason], n)
        yield c
        yield CounterMetricFamily(
            "sentinel_server_stop_kills",
            "Stops of the server SIGTERM did not end within stop_timeout (the process group SIGKILLed).",
            value=sup.stop_kills,
        )
        c = CounterMetricFamily(
            "sentinel_server_state_transitions",
            "Lifecycle state transitions.",
            labels=["from_state", "to_state"],
        )
        for (old, new), n in sorted(sup.transitions.items()):
            c.add_metric([old, new], n)
        yield c
        if sup.start_duration is not None:
            yield GaugeMetricFamily(
                "sentinel_server_start_duration_seconds",
                "Time from launch to the first /health 200 of the last start.",
                value=sup.start_duration,
            )
        if sup.ready_timestamp is not None:
            yield GaugeMetricFamily(
                "sentinel_server_ready_timestamp_seconds",
                "When the current (or last) server became ready (its epoch).",
                value=sup.ready_timestamp,
            )
        if sup.last_crash is not None:
            yield GaugeMetricFamily(
                "sentinel_server_last_crash_timestamp_seconds",
                "When the server last ended unexpectedly.",
                value=sup.last_crash.timestamp,
            )
        version = str(sup.sglang_version) if sup.sglang_version else ""
        info = GaugeMetricFamily(
            "sentinel_server_info",
            "The supervised server's configuration; always 1.",
            labels=["mode", "profile", "config_hash", "sglang_version"],
        )
        info.add_metric([sup.mode, sup.profile, sup.config_hash, version], 1)
        yield info
        yield from _fallback_series(sup)
        probes = sup.probes
        success = GaugeMetricFamily(
            "sentinel_probe_success", "1 when the last run of the probe passed.", labels=["probe"]
        )
        duration = GaugeMetricFamily(
            "sentinel_probe_duration_seconds", "How long the last run of the probe took.", labels=["probe"]
        )
        serving = state in (ServerState.READY, ServerState.UNHEALTHY)
        for name, r in sorted(probes.items()):
            if not serving and name != "health":
                # A result about a server that is gone (or not up yet) is not a verdict on this
                # one: absent ("unknown") until the checks run again, so stall/canary alerts stay
                # silent and no dashboard shows a stale pass.
                continue
            # /health while not serving: the port refuses or answers 503, whatever the last
            # check of the previous life said.
            success.add_metric([name], int(r.ok and (serving or sup.up)))
            duration.add_metric([name], r.duration)
        yield success
        yield duration
        c = CounterMetricFamily(
            "sentinel_probe_failures", "Failed probe runs, by probe and reason.", labels=["probe", "reason"]
        )
        for (probe, reason), n in sorted(sup.probe_failures.items()):
            c.add_metric([probe, reason], n)
        yield c
        pre = GaugeMetricFamily(
            "sentinel_server_preflight_success",
            "Result of the last preflight, per check: 1 passed (possibly with a warning), 0 failed.",
            labels=["check"],
        )
        seen: dict[str, int] = {}
        for check in sup.preflight:
            if check.status != "skip":
                seen[check.name] = min(seen.get(check.name, 1), int(check.status != "fail"))
        for name, v in sorted(seen.items()):
            pre.add_metric([name], v)
        yield pre
        yield CounterMetricFamily(
            "sentinel_server_log_lines", "Log lines read from the server.", value=sup.log_lines_total
        )


def _fallback_series(sup: SupervisorSnapshot) -> Iterator[Metric]:
    fb = sup.fallback
    c = CounterMetricFamily(
        "sentinel_server_fallback",
        "Relaunches with a known-good configuration after the configured one failed correctness, by why.",
        labels=["reason"],
    )
    counts = dict.fromkeys(FALLBACK_REASONS, 0) | (dict(fb.fallbacks) if fb is not None else {})
    for reason, n in sorted(counts.items()):
        c.add_metric([reason], n)
    yield c
    info = GaugeMetricFamily(
        "sentinel_server_config_info",
        "The launch configuration running now: source configured or fallback; always 1.",
        labels=["source", "config_hash", "configured_hash"],
    )
    if fb is not None:
        info.add_metric([fb.source, fb.running_hash, fb.configured_hash], 1)
    else:
        info.add_metric(["configured", sup.config_hash, sup.config_hash], 1)
    yield info
    if fb is not None:
        yield GaugeMetricFamily(
            "sentinel_server_known_good_configs",
            "Launch configurations recorded as answering right on this host (state dir).",
            value=fb.known_good,
        )
    discarded = CounterMetricFamily(
        "sentinel_server_fallback_discarded",
        "Saved fallback decisions that no longer applied (the configured launch or SGLang changed), by why.",
        labels=["why"],
    )
    gone = dict.fromkeys(DISCARD_REASONS, 0) | (dict(fb.discarded) if fb is not None else {})
    for why, n in sorted(gone.items()):
        discarded.add_metric([why], n)
    yield discarded
    yield CounterMetricFamily(
        "sentinel_server_known_good_unreadable",
        "Known-good files or records that could not be read and were set aside.",
        value=fb.unreadable if fb is not None else 0,
    )
