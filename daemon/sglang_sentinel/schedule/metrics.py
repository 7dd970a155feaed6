"""The series of scheduled load, budget, polite injection and capacity: one definition each.

All are held by :class:`ScheduleMetrics`, a prometheus_client Collector the daemon registers on
the exporter's registry. Every decision the scheduler takes is a series: a skipped firing is
``sentinel_load_skipped_total{profile,reason}``, an aborted run
``sentinel_load_aborts_total{profile,reason}``, a firing that arrived while a run was going on
``sentinel_schedule_coalesced_total{job}``.

"Reference" series (last-run gauges and the request histograms) are fed only by full-size runs
that started outside the post-restart window: they are what dashboards compare over weeks, so a
shrunk run or a cold server must not move them. The counters see every synthetic request.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from prometheus_client import Counter, Gauge, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

__all__ = [
    "ABORT_REASONS",
    "ENERGY_REASONS",
    "EXCLUDE_REASONS",
    "SHRINK_REASONS",
    "SKIP_REASONS",
    "RequestTimings",
    "RunFigures",
    "ScheduleMetrics",
]

# Label values the scheduler uses, exported at 0 per profile from start (declare_profiles).
SKIP_REASONS = (
    "busy",
    "misfire",
    "budget",
    "foreign_traffic",
    "server_not_ready",
    "warmup",
    "load_unknown",
)
SHRINK_REASONS = ("budget", "foreign_traffic")
ABORT_REASONS = (
    "error_ratio",
    "kv_usage",
    "gpu_temperature",
    "gpu_throttle",
    "foreign_traffic",
    "timeout",
    "server_restart",
    "shutdown",
)
# Why a run's GPU energy is unknown (collect.gpu.energy), at 0 per profile once runs are metered.
ENERGY_REASONS = ("counter_reset", "counter_not_advanced", "gpu_lost", "read_failed", "gpus_changed")
# canary_failed: counted when a run already in the series is taken back out (schedule/revoke.py).
EXCLUDE_REASONS = ("restart_window", "shrunk", "canary_failed")

# Buckets sized for the flagship deployment (~12.5 tok/s per stream, 256-token answers, TTFT of
# a 744B MoE from tens of ms idle to seconds when queued) and still useful on faster servers.
_TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 80.0)
_ITL_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.15, 0.2, 0.3, 0.5, 1.0, 2.5)
_CAPACITY_HELP = {
    "sentinel_capacity_output_throughput_tokens_per_second": "Saturation output throughput found by the last "
    "calibration (bound=lower: it did not saturate, the capacity is at least this).",
    "sentinel_capacity_knee_concurrency": "Concurrency past which latency grows faster than throughput (last "
    "calibration; bound=lower: it did not saturate).",
    # sentinel_capacity_slo_concurrency exists only when a latency SLO is configured.
    "sentinel_capacity_slo_concurrency": "Highest concurrency that met the latency SLO (last calibration).",
    "sentinel_capacity_last_calibration_timestamp_seconds": "When the last calibration finished.",
    # Metered sweeps only (the server's GPUs' energy counters per step).
    "sentinel_capacity_output_tokens_per_joule": "Output tokens per joule of GPU energy at the knee "
    "(last calibration).",
    "sentinel_capacity_efficient_concurrency": "Concurrency with the fewest GPU joules per output token "
    "(last calibration): the efficient operating point.",
}
# The figures a sweep that did not saturate only bounds from below: labelled bound="lower"|"measured".
_BOUND_LABELLED = frozenset(
    {"sentinel_capacity_output_throughput_tokens_per_second", "sentinel_capacity_knee_concurrency"}
)
_E2E_BUCKETS = (0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 45.0, 60.0, 90.0, 120.0, 180.0, 300.0, 600.0)


class RunFigures:
    """The last-run figures of one completed reference run."""

    def __init__(
        self,
        output_throughput: float,
        total_throughput: float,
        concurrency_mean: float,
        concurrency_peak: float,
        client_bound: bool,
        finished_at: float,
    ) -> None:
        self.output_throughput = output_throughput
        self.total_throughput = total_throughput
        self.concurrency_mean = concurrency_mean
        self.concurrency_peak = concurrency_peak
        self.client_bound = client_bound
        self.finished_at = finished_at


class RequestTimings:
    """One successful synthetic request's latencies (seconds); ``itl`` is its list of gaps."""

    def __init__(
        self, ttft: float | None, tpot: float | None, e2e: float | None, itl: Sequence[float]
    ) -> None:
        self.ttft = ttft
        self.tpot = tpot
        self.e2e = e2e
        self.itl = itl


class ScheduleMetrics(Collector):
    def __init__(self) -> None:
        # registry=None: these belong to this collector, which the daemon registers once.
        self.runs = Counter(
            "sentinel_load_runs",
            "Scheduled load runs by how they ended.",
            ["profile", "outcome"],
            registry=None,
        )
        self.requests = Counter(
            "sentinel_load_requests",
            "Synthetic requests sent by scheduled runs, by outcome (success or a failure reason).",
            ["profile", "outcome"],
            registry=None,
        )
        self.output_tokens = Counter(
            "sentinel_load_output_tokens",
            "Tokens generated for synthetic requests.",
            ["profile"],
            registry=None,
        )
        self.input_tokens = Counter(
            "sentinel_load_input_tokens", "Prompt tokens of synthetic requests.", ["profile"], registry=None
        )
        self.skipped = Counter(
            "sentinel_load_skipped",
            "Load firings that did not run, by reason (busy, budget, foreign_traffic, server_not_ready, "
            "warmup, load_unknown).",
            ["profile", "reason"],
            registry=None,
        )
        self.shrunk = Counter(
            "sentinel_load_shrunk",
            "Runs scaled down before they started, by reason (budget, foreign_traffic).",
            ["profile", "reason"],
            registry=None,
        )
        self.aborts = Counter(
            "sentinel_load_aborts",
            "Runs stopped early by the circuit breaker, polite injection, a timeout, a server restart "
            "or shutdown, by reason.",
            ["profile", "reason"],
            registry=None,
        )
        self.excluded = Counter(
            "sentinel_load_runs_excluded",
            "Completed runs kept out of the reference series, by reason (restart_window, shrunk, "
            "time_gap: sentinel was stopped or frozen during the run, canary_failed: taken back out "
            "once a canary confirmed garbage answers).",
            ["profile", "reason"],
            registry=None,
        )
        self.coalesced = Counter(
            "sentinel_schedule_coalesced",
            "Firings dropped because the same job was still running, or fired too late (misfire).",
            ["job", "reason"],
            registry=None,
        )
        self.job_errors = Counter(
            "sentinel_schedule_job_errors", "Scheduled jobs that raised an error.", ["job"], registry=None
        )
        self.output_throughput = Gauge(
            "sentinel_load_output_throughput_tokens_per_second",
            "Output tokens per second of the last reference run (bench_serving's definition).",
            ["profile"],
            registry=None,
        )
        self.total_throughput = Gauge(
            "sentinel_load_total_throughput_tokens_per_second",
            "Input plus output tokens per second of the last reference run.",
            ["profile"],
            registry=None,
        )
        self.concurrency_mean = Gauge(
            "sentinel_load_concurrency_mean",
            "Mean requests in flight in the last reference run (sum of E2E / duration).",
            ["profile"],
            registry=None,
        )
        self.concurrency_peak = Gauge(
            "sentinel_load_concurrency_peak",
            "Peak requests in flight in the last reference run.",
            ["profile"],
            registry=None,
        )
        self.last_run = Gauge(
            "sentinel_load_last_run_timestamp_seconds",
            "When the last reference run of the profile finished.",
            ["profile"],
            registry=None,
        )
        # A label on the last-run series themselves would start new series at the first run after
        # a restart (and break `for:` and the 7-day medians across it): a gauge of its own says it.
        self.last_run_restored = Gauge(
            "sentinel_load_last_run_restored",
            "1 when the profile's last-run series (timestamp, throughput, concurrency, client-bound,"
            " energy) were restored at start-up from the stored run history: no reference run has"
            " completed since sentinel started; 0 once one has.",
            ["profile"],
            registry=None,
        )
        self.client_bound = Gauge(
            "sentinel_load_client_bound",
            "1 when the last reference run's client lagged past its thresholds (its latencies include "
            "client delay), else 0.",
            ["profile"],
            registry=None,
        )
        self.running = Gauge(
            "sentinel_load_running",
            "1 while a run of the profile is in progress.",
            ["profile"],
            registry=None,
        )
        self.foreign = Gauge(
            "sentinel_load_foreign_requests",
            "Requests of other clients on the server at the last polite-injection check.",
            registry=None,
        )
        self.budget_limit = Gauge(
            "sentinel_budget_limit_tokens", "Synthetic tokens allowed per sliding hour.", registry=None
        )
        self.budget_remaining = Gauge(
            "sentinel_budget_remaining_tokens",
            "Synthetic tokens still allowed in the current sliding hour.",
            registry=None,
        )
        self.ttft = Histogram(
            "sentinel_request_ttft_seconds",
            "Time to first token of successful synthetic requests in reference runs.",
            ["profile"],
            buckets=_TTFT_BUCKETS,
            registry=None,
        )
        self.itl = Histogram(
            "sentinel_request_itl_seconds",
            "Inter-token latencies (bench_serving's definition) of synthetic requests in reference runs.",
            ["profile"],
            buckets=_ITL_BUCKETS,
            registry=None,
        )
        self.tpot = Histogram(
            "sentinel_request_tpot_seconds",
            "Time per output token after the first, per synthetic request in reference runs.",
            ["profile"],
            buckets=_ITL_BUCKETS,
            registry=None,
        )
        self.e2e = Histogram(
            "sentinel_request_e2e_seconds",
            "End-to-end latency of successful synthetic requests in reference runs.",
            ["profile"],
            buckets=_E2E_BUCKETS,
            registry=None,
        )
        # GPU energy of the last reference run's measured phase (the server's GPUs, from NVML's
        # energy counters). Absent, never 0, when the run had no trustworthy figure.
        self.energy = Gauge(
            "sentinel_load_energy_joules",
            "GPU energy of the server's GPUs over the last reference run's measured phase "
            "(energy counter deltas).",
            ["profile"],
            registry=None,
        )
        self.energy_per_token = Gauge(
            "sentinel_load_energy_joules_per_output_token",
            "GPU energy per output token of the last reference run.",
            ["profile"],
            registry=None,
        )
        self.tokens_per_joule = Gauge(
            "sentinel_load_output_tokens_per_joule",
            "Output tokens per joule of GPU energy in the last reference run.",
            ["profile"],
            registry=None,
        )
        self.power = Gauge(
            "sentinel_load_power_watts",
            "Mean GPU power of the server's GPUs over the last reference run's measured phase.",
            ["profile"],
            registry=None,
        )
        self.marginal_energy_per_token = Gauge(
            "sentinel_load_marginal_energy_joules_per_output_token",
            "GPU energy per output token of the last reference run above the idle baseline.",
            ["profile"],
            registry=None,
        )
        self.energy_cost = Gauge(
            "sentinel_load_energy_cost_per_million_output_tokens",
            "GPU electricity cost per million output tokens of the last reference run (energy cost "
            "only: [cost] price per kWh; not the host, cooling or hardware).",
            ["profile", "currency"],
            registry=None,
        )
        self.energy_unavailable = Counter(
            "sentinel_load_energy_unavailable",
            "Runs whose GPU energy could not be trusted, by reason (counter_reset, gpu_lost, "
            "read_failed, gpus_changed, ...).",
            ["profile", "reason"],
            registry=None,
        )
        self.baseline_power = Gauge(
            "sentinel_load_baseline_power_watts",
            "GPU power of the server's GPUs with no synthetic load, measured between runs.",
            registry=None,
        )
        self.energy_alert_ratio = Gauge(
            "sentinel_load_energy_alert_ratio",
            "The configured rise of energy per token over its trailing baseline that alerts ([energy] "
            "alert_ratio).",
            registry=None,
        )
        # Set by the daemon when runs are metered: only then are the energy reasons declared at 0.
        self.energy_metered = False
        # name -> value; an unknown figure is absent, not 0 (a 0 capacity would page someone).
        self._capacity: dict[str, float] = {}
        self._capacity_bound = "measured"
        self.calibrations = Counter(
            "sentinel_calibration_runs",
            "Calibration sweeps by how they ended (inconclusive: finished without a capacity finding, "
            "e.g. client-bound; the capacity gauges keep the last conclusive result).",
            ["outcome"],
            registry=None,
        )
        for outcome in ("completed", "aborted", "failed", "cancelled", "inconclusive"):
            self.calibrations.labels(outcome)
        self._all: tuple[MetricWrapperBase, ...] = tuple(
            v for v in vars(self).values() if isinstance(v, MetricWrapperBase)
        )

    def collect(self) -> Iterator[Metric]:
        for metric in self._all:
            yield from metric.collect()
        for name, value in sorted(self._capacity.items()):
            if name in _BOUND_LABELLED:
                family = GaugeMetricFamily(name, _CAPACITY_HELP[name], labels=["bound"])
                family.add_metric([self._capacity_bound], value)
            else:
                family = GaugeMetricFamily(name, _CAPACITY_HELP[name])
                family.add_metric([], value)
            yield family

    def declare_profiles(self, profiles: Iterable[str]) -> None:
        """Create the zero-valued series of each profile so dashboards and rate() see them at once."""
        for profile in profiles:
            for outcome in ("completed", "aborted", "failed", "cancelled"):
                self.runs.labels(profile, outcome)
            self.requests.labels(profile, "success")
            # Every known reason at 0 too: a counter born at 1 with its first event is invisible
            # to increase()/rate(), and the alert on a first breaker trip or budget skip would miss it.
            for reason in SKIP_REASONS:
                self.skipped.labels(profile, reason)
            for reason in SHRINK_REASONS:
                self.shrunk.labels(profile, reason)
            for reason in ABORT_REASONS:
                self.aborts.labels(profile, reason)
            for reason in EXCLUDE_REASONS:
                self.excluded.labels(profile, reason)
            if self.energy_metered:
                for reason in ENERGY_REASONS:
                    self.energy_unavailable.labels(profile, reason)
            self.output_tokens.labels(profile)
            self.input_tokens.labels(profile)
            self.running.labels(profile).set(0)

    def set_figures(self, profile: str, figures: RunFigures, *, restored: bool = False) -> None:
        """The last reference run's figures; ``restored``: read back from the run history at start-up."""
        self.output_throughput.labels(profile).set(figures.output_throughput)
        self.total_throughput.labels(profile).set(figures.total_throughput)
        self.concurrency_mean.labels(profile).set(figures.concurrency_mean)
        self.concurrency_peak.labels(profile).set(figures.concurrency_peak)
        self.client_bound.labels(profile).set(1 if figures.client_bound else 0)
        self.last_run.labels(profile).set(figures.finished_at)
        self.last_run_restored.labels(profile).set(1 if restored else 0)

    def clear_figures(self, profile: str) -> None:
        """No reference run left for ``profile``: its last-run gauges go absent (not 0)."""
        for gauge in (
            self.output_throughput,
            self.total_throughput,
            self.concurrency_mean,
            self.concurrency_peak,
            self.client_bound,
            self.last_run,
            self.last_run_restored,
        ):
            with contextlib.suppress(KeyError):
                gauge.remove(profile)
        self.clear_energy(profile)

    def set_energy(self, profile: str, energy: Mapping[str, Any]) -> None:
        """A reference run's energy figures; each one it lacks goes absent."""
        self.clear_energy(profile)
        for gauge, key in (
            (self.energy, "joules"),
            (self.energy_per_token, "joules_per_output_token"),
            (self.tokens_per_joule, "output_tokens_per_joule"),
            (self.power, "mean_power_watts"),
            (self.marginal_energy_per_token, "marginal_joules_per_output_token"),
        ):
            if energy.get(key) is not None:
                gauge.labels(profile).set(energy[key])
        if energy.get("energy_cost_per_million_output_tokens") is not None:
            self.energy_cost.labels(profile, str(energy.get("currency", ""))).set(
                energy["energy_cost_per_million_output_tokens"]
            )
        if energy.get("baseline_power_watts") is not None:
            self.baseline_power.set(energy["baseline_power_watts"])

    def clear_energy(self, profile: str) -> None:
        for gauge in (
            self.energy,
            self.energy_per_token,
            self.tokens_per_joule,
            self.power,
            self.marginal_energy_per_token,
        ):
            with contextlib.suppress(KeyError):
                gauge.remove(profile)
        for labels in list(self.energy_cost._metrics):
            if labels[0] == profile:
                self.energy_cost.remove(*labels)

    def observe(self, profile: str, timings: Iterable[RequestTimings]) -> None:
        ttft, itl, tpot, e2e = (h.labels(profile) for h in (self.ttft, self.itl, self.tpot, self.e2e))
        for t in timings:
            if t.ttft is not None:
                ttft.observe(t.ttft)
            if t.tpot is not None:
                tpot.observe(t.tpot)
            if t.e2e is not None:
                e2e.observe(t.e2e)
            for gap in t.itl:
                itl.observe(gap)

    def set_capacity(
        self,
        output_throughput: float | None,
        knee_concurrency: float | None,
        slo_concurrency: float | None,
        finished_at: float | None,
        bound: str = "measured",
        *,
        knee_tokens_per_joule: float | None = None,
        efficient_concurrency: float | None = None,
    ) -> None:
        """``bound``: "measured" (the sweep saturated the server, or stopped at its SLO) or "lower"
        (it reached max_concurrency first: the real figures are higher)."""
        self._capacity_bound = bound
        values = dict(
            zip(
                _CAPACITY_HELP,
                (
                    output_throughput,
                    knee_concurrency,
                    slo_concurrency,
                    finished_at,
                    knee_tokens_per_joule,
                    efficient_concurrency,
                ),
                strict=True,
            )
        )
        self._capacity = {k: float(v) for k, v in values.items() if v is not None}
