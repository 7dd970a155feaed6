#!/usr/bin/env python3
"""Writes the provisioned dashboards (grafana/dashboards/*.json) from this one description.

Dashboards as code keeps every panel consistent (datasource variable, units, descriptions,
legend format) and reviewable as a diff; tests/grafana checks the JSON files are what this
script writes, that every expression parses (promtool) and names only metrics that exist.

    python3 grafana/generate.py          # rewrite the JSON files
    python3 grafana/generate.py --check  # exit 1 if they are out of date
"""

from __future__ import annotations

import json
import sys
import zlib
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
DS = {"type": "prometheus", "uid": "${datasource}"}
# The oldest Grafana these dashboards are written for (schemaVersion 39; stated in __requires).
MIN_GRAFANA = "10.4.0"
# Every query carries the fleet-wide matchers: `cluster` (opt-in: a hidden variable whose All value
# `.*` also matches series without the label, so single-cluster setups need nothing) and `job`
# (the scrape job, e.g. the chart's jobLabel), then the dashboard's own variables.
FLEET = 'cluster=~"$cluster", job=~"$job"'


def match(*labels: str) -> str:
    """The label matchers of a query: the fleet-wide ones and one per named variable."""
    return ", ".join([FLEET, *(f'{label}=~"${label}"' for label in labels)])


INST = match("instance")
PROF = match("instance", "profile")
# SGLang's own series (re-exposed by sentinel) carry model_name (--served-model-name).
SGL = match("instance", "model_name")
SGLANG_TTFT = "sglang:time_to_first_token_seconds_bucket"
# SGLang writes one scheduler figure over several series, depending on its launch flags
# (sglang_sentinel.sglang.series does the same in Python, docs/sglang-versions.md):
# - --enable-priority-scheduling (0.5.23): the queue gauges once as the total under priority=""
#   and once more per priority: a plain sum counts every request twice. priority="" also matches
#   servers without the label (an empty label is an absent one).
# - --enable-metrics-for-all-schedulers: every TP (and PP/EP) rank of a data-parallel replica
#   writes the replica's figure: a plain sum counts it TP times. `max without` the rank labels
#   keeps one per replica (dp_rank, when there is one, is not dropped); the ranks write at their
#   own log events, so max errs high by at most one log interval. Replicas are then summed.
SCHED_RANKS = "tp_rank, pp_rank, moe_ep_rank, attn_cp_rank, attn_tp_rank"


def sched_total(metric: str, sel: str) -> str:
    """The server-wide total of an SGLang scheduler gauge, right for every launch variant."""
    return f'sum by (instance) (max without ({SCHED_RANKS}) ({metric}{{{sel}, priority=""}}))'


def _query_variable(
    name: str, label: str, query: str, *, hide: int = 0, all_value: str = ".+"
) -> dict[str, Any]:
    """A multi-value query variable (All = ``all_value``) over ``label_values(query, label)``."""
    definition = f"label_values({query}, {label})"
    return {
        "name": name,
        "label": name.replace("_", " ").capitalize(),
        "type": "query",
        "datasource": DS,
        "query": {"query": definition, "refId": name},
        "definition": definition,
        "refresh": 2,
        "multi": True,
        "includeAll": True,
        "allValue": all_value,
        "current": {},
        "sort": 1,
        "hide": hide,
    }


def _variables(with_profile: bool, extra: tuple[dict[str, Any], ...] = ()) -> list[dict[str, Any]]:
    variables: list[dict[str, Any]] = [
        {
            "name": "datasource",
            "label": "Data source",
            "type": "datasource",
            "query": "prometheus",
            "current": {},
            "hide": 0,
            "refresh": 1,
        },
        # Hidden (opt-in): show it in the dashboard settings where Prometheus adds a cluster
        # label (external_labels, Thanos, Mimir); its All (.*) matches series without one.
        _query_variable("cluster", "cluster", "sentinel_server_up", hide=2, all_value=".*"),
        _query_variable("job", "job", 'sentinel_server_up{cluster=~"$cluster"}'),
        _query_variable("instance", "instance", f"sentinel_server_up{{{FLEET}}}"),
        *extra,
    ]
    if with_profile:
        variables += [
            _query_variable("profile", "profile", f"sentinel_load_runs_total{{{INST}}}")
            | {"label": "Load profile"},
            {
                # Reference runs are minutes apart: latency quantiles and outcome counts need a window
                # that spans several runs, not Grafana's scrape-sized $__rate_interval.
                "name": "window",
                "label": "Run window",
                "type": "interval",
                "query": "30m,1h,3h,6h,1d",
                "current": {"text": "1h", "value": "1h"},
                "options": [],
                "refresh": 2,
                "auto": False,
            },
        ]
    return variables


def stable_id(key: str) -> int:
    """A panel id from the panel's row and title: the same on every regeneration, and unmoved
    when panels are added or reordered elsewhere (a link with ``viewPanel=<id>`` keeps working)."""
    return zlib.crc32(key.encode()) % 1_000_000_000 + 1


class Board:
    def __init__(self) -> None:
        self.panels: list[dict[str, Any]] = []
        self.y = 0
        self.x = 0
        self.row_h = 0
        self._row = ""
        self._ids: dict[int, str] = {}

    def _id(self, title: str) -> int:
        key = f"{self._row}/{title}"
        pid = stable_id(key)
        if pid in self._ids:
            raise ValueError(f"panel id {pid} of {key!r} taken by {self._ids[pid]!r}: rename one")
        self._ids[pid] = key
        return pid

    def row(self, title: str) -> None:
        self._newline()
        self._row = title
        self.panels.append(
            {
                "id": self._id(""),
                "type": "row",
                "title": title,
                "collapsed": False,
                "gridPos": {"h": 1, "w": 24, "x": 0, "y": self.y},
                "panels": [],
            }
        )
        self.y += 1

    def _newline(self) -> None:
        if self.x:
            self.y += self.row_h
            self.x = 0
            self.row_h = 0

    def panel(
        self,
        kind: str,
        title: str,
        description: str,
        unit: str,
        targets: list[tuple[str, str]],
        w: int = 12,
        h: int = 8,
        **extra: Any,
    ) -> None:
        if self.x + w > 24:
            self._newline()
        panel: dict[str, Any] = {
            "id": self._id(title),
            "type": kind,
            "title": title,
            "description": description,
            "datasource": DS,
            "gridPos": {"h": h, "w": w, "x": self.x, "y": self.y},
            "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
            "options": {},
            "targets": [
                {"datasource": DS, "expr": expr, "legendFormat": legend, "refId": chr(ord("A") + i)}
                for i, (expr, legend) in enumerate(targets)
            ],
        }
        if kind == "timeseries":
            panel["options"] = {
                "legend": {"displayMode": "list", "placement": "bottom"},
                "tooltip": {"mode": "multi"},
            }
        if kind == "stat":
            panel["options"] = {"reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False}}
            # Grafana's default (green, red from 80) would colour a 2-minute uptime red and a
            # DOWN server green: a stat states its own colours, neutral unless given.
            panel["fieldConfig"]["defaults"]["thresholds"] = _steps(("blue", None))
            panel["fieldConfig"]["defaults"]["mappings"] = []
        for key, value in extra.items():
            if key == "defaults":
                panel["fieldConfig"]["defaults"].update(value)
            else:
                panel[key] = value
        self.panels.append(panel)
        self.x += w
        self.row_h = max(self.row_h, h)


def _q(histogram: str, q: float, sel: str) -> str:
    return f"histogram_quantile({q}, sum by (le, instance, profile) (rate({histogram}_bucket{{{sel}}}[$window])))"


def _steps(*steps: tuple[str, float | None]) -> dict[str, Any]:
    return {"mode": "absolute", "steps": [{"color": c, "value": v} for c, v in steps]}


def _map(values: dict[str, tuple[str, str]]) -> list[dict[str, Any]]:
    """Value mappings: raw value -> (text, colour)."""
    return [
        {
            "type": "value",
            "options": {
                v: {"text": text, "color": color, "index": i}
                for i, (v, (text, color)) in enumerate(values.items())
            },
        }
    ]


# Colours of the lifecycle states (the state stat shows the name of the state whose series is 1).
_STATE_COLOURS = {
    "ready": "green",
    "starting": "blue",
    "warming": "blue",
    "restarting": "orange",
    "unhealthy": "orange",
    "stopped": "red",
    "failed": "red",
}


def _energy_row(b: Board) -> None:
    """GPU energy per output token (reference runs and calibration): one self-contained row."""
    b.row("Energy per token (GPU energy counters of the server's GPUs)")
    b.panel(
        "timeseries",
        "Energy per output token",
        "GPU joules per output token of the last reference run (energy counter deltas over its "
        "measured phase), and above the idle baseline (marginal). Absent for a run whose counters "
        "reset or lost a GPU.",
        "J",
        [
            (f"sentinel_load_energy_joules_per_output_token{{{PROF}}}", "{{instance}} {{profile}}"),
            (
                f"sentinel_load_marginal_energy_joules_per_output_token{{{PROF}}}",
                "{{instance}} {{profile}} marginal",
            ),
        ],
        w=8,
    )
    b.panel(
        "timeseries",
        "GPU power: runs and idle baseline",
        "Mean GPU power over the last reference run, and the GPUs' draw with no synthetic load "
        "(measured between runs).",
        "watt",
        [
            (f"sentinel_load_power_watts{{{PROF}}}", "{{instance}} {{profile}}"),
            (f"sentinel_load_baseline_power_watts{{{INST}}}", "{{instance}} idle baseline"),
        ],
        w=8,
    )
    b.panel(
        "timeseries",
        "Energy cost per million output tokens",
        "GPU electricity only ([cost] price per kWh): not the host, cooling or hardware.",
        "short",
        [
            (
                f"sentinel_load_energy_cost_per_million_output_tokens{{{PROF}}}",
                "{{instance}} {{profile}} {{currency}}",
            )
        ],
        w=8,
    )
    b.panel(
        "stat",
        "Tokens per joule at the knee",
        "Output tokens per joule of GPU energy at the knee of the last calibration.",
        "short",
        [(f"sentinel_capacity_output_tokens_per_joule{{{INST}}}", "{{instance}}")],
        w=8,
    )
    b.panel(
        "stat",
        "Efficient concurrency",
        "Concurrency with the fewest GPU joules per output token at the last calibration: the "
        "efficient operating point, not always the knee.",
        "short",
        [(f"sentinel_capacity_efficient_concurrency{{{INST}}}", "{{instance}}")],
        w=8,
    )
    b.panel(
        "stat",
        "Runs without an energy figure",
        "Runs in the dashboard's time range whose GPU energy could not be trusted, by reason (counter_reset, gpu_lost, ...).",
        "short",
        [
            (
                f"sum by (instance, reason) (increase(sentinel_load_energy_unavailable_total{{{PROF}}}[$__range]))",
                "{{instance}} {{reason}}",
            )
        ],
        w=8,
    )


def overview() -> dict[str, Any]:
    b = Board()
    b.row("Server")
    b.panel(
        "stat",
        "Server up",
        "1 when SGLang's /health answered 200 at the last probe (sentinel_server_up).",
        "none",
        [(f"sentinel_server_up{{{INST}}}", "{{instance}}")],
        w=4,
        defaults={
            "mappings": _map({"0": ("DOWN", "red"), "1": ("UP", "green")}),
            "thresholds": _steps(("red", None), ("green", 1)),
            "color": {"mode": "thresholds"},
        },
        options={
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "background",
        },
    )
    b.panel(
        "stat",
        "Server state",
        "The supervisor's lifecycle state: starting, warming, ready, unhealthy, restarting, failed, stopped.",
        "none",
        [(f"sentinel_server_state{{{INST}}} == 1", "{{instance}} {{state}}")],
        w=5,
        options={
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "textMode": "name",
            "colorMode": "background",
        },
        fieldConfig={
            "defaults": {"unit": "none", "thresholds": _steps(("blue", None)), "mappings": []},
            "overrides": [
                {
                    "matcher": {"id": "byRegexp", "options": f".* {state}$"},
                    "properties": [{"id": "color", "value": {"mode": "fixed", "fixedColor": colour}}],
                }
                for state, colour in _STATE_COLOURS.items()
            ],
        },
    )
    b.panel(
        "stat",
        "Ready for",
        "Time since the current server life became ready (its epoch).",
        "s",
        [(f"time() - sentinel_server_ready_timestamp_seconds{{{INST}}}", "{{instance}}")],
        w=5,
    )
    b.panel(
        "stat",
        "Last time to ready",
        "Launch to /health 200 of the last start (weights, warm-up, CUDA graphs).",
        "s",
        [(f"sentinel_server_start_duration_seconds{{{INST}}}", "{{instance}}")],
        w=5,
    )
    b.panel(
        "stat",
        "Restarts in range",
        "Restarts performed by sentinel over the dashboard's time range, all reasons.",
        "none",
        [
            (
                f"round(sum by (instance) (increase(sentinel_server_restarts_total{{{INST}}}[$__range])))",
                "{{instance}}",
            )
        ],
        w=5,
        defaults={"thresholds": _steps(("green", None), ("orange", 1), ("red", 4))},
    )
    b.panel(
        "timeseries",
        "Probe and canary results",
        "1 = pass, 0 = fail, for /health, /health_generate, stall detection and each known-answer canary.",
        "none",
        [(f"sentinel_probe_success{{{INST}}}", "{{instance}} {{probe}}")],
        defaults={"min": 0, "max": 1},
    )
    b.panel(
        "timeseries",
        "Probe duration",
        "Time each probe took; a growing /health_generate time is an early sign of an overloaded server.",
        "s",
        [(f"sentinel_probe_duration_seconds{{{INST}}}", "{{instance}} {{probe}}")],
    )
    b.panel(
        "timeseries",
        "Restarts by reason",
        "Restarts per window, by crash cause or failed check.",
        "none",
        [
            (
                f"sum by (instance, reason) (increase(sentinel_server_restarts_total{{{INST}}}[$__rate_interval]))",
                "{{instance}} {{reason}}",
            )
        ],
    )
    b.panel(
        "timeseries",
        "Crashes by cause",
        "Unexpected ends of the server, classified from the exit status and the log tail.",
        "none",
        [
            (
                f"sum by (instance, reason) (increase(sentinel_server_crashes_total{{{INST}}}[$__rate_interval]))",
                "{{instance}} {{reason}}",
            )
        ],
    )

    b.row("Reference load")
    b.panel(
        "timeseries",
        "Output throughput of the last reference run",
        "Output tokens/s of each profile's last reference run (bench_serving's definition), against the "
        "calibrated saturation throughput.",
        "short",
        [
            (f"sentinel_load_output_throughput_tokens_per_second{{{PROF}}}", "{{instance}} {{profile}}"),
            # bound="lower": the sweep did not saturate, the capacity is at least this.
            (
                f"sentinel_capacity_output_throughput_tokens_per_second{{{INST}}}",
                "{{instance}} capacity ({{bound}})",
            ),
        ],
        defaults={"custom": {"drawStyle": "line", "lineInterpolation": "stepAfter"}},
    )
    b.panel(
        "timeseries",
        "Total throughput of the last reference run",
        "Input plus output tokens/s of each profile's last reference run.",
        "short",
        [(f"sentinel_load_total_throughput_tokens_per_second{{{PROF}}}", "{{instance}} {{profile}}")],
        defaults={"custom": {"drawStyle": "line", "lineInterpolation": "stepAfter"}},
    )
    b.panel(
        "timeseries",
        "Concurrency of the last reference run",
        "Mean (sum of E2E / duration) and peak requests in flight.",
        "short",
        [
            (f"sentinel_load_concurrency_mean{{{PROF}}}", "{{instance}} {{profile}} mean"),
            (f"sentinel_load_concurrency_peak{{{PROF}}}", "{{instance}} {{profile}} peak"),
        ],
    )
    b.panel(
        "timeseries",
        "Time to first token (reference runs)",
        "p50 and p99 TTFT over the synthetic requests of reference runs in the chosen window.",
        "s",
        [
            (_q("sentinel_request_ttft_seconds", 0.5, PROF), "{{instance}} {{profile}} p50"),
            (_q("sentinel_request_ttft_seconds", 0.99, PROF), "{{instance}} {{profile}} p99"),
        ],
    )
    b.panel(
        "timeseries",
        "Time per output token (reference runs)",
        "p50 and p99 TPOT ((E2E - TTFT) / (output tokens - 1)) of synthetic requests.",
        "s",
        [
            (_q("sentinel_request_tpot_seconds", 0.5, PROF), "{{instance}} {{profile}} p50"),
            (_q("sentinel_request_tpot_seconds", 0.99, PROF), "{{instance}} {{profile}} p99"),
        ],
    )
    b.panel(
        "timeseries",
        "Inter-token latency (reference runs)",
        "p50 and p99 inter-token latency, bench_serving's definition.",
        "s",
        [
            (_q("sentinel_request_itl_seconds", 0.5, PROF), "{{instance}} {{profile}} p50"),
            (_q("sentinel_request_itl_seconds", 0.99, PROF), "{{instance}} {{profile}} p99"),
        ],
    )
    b.panel(
        "timeseries",
        "End-to-end latency (reference runs)",
        "p50 and p99 end-to-end latency of synthetic requests.",
        "s",
        [
            (_q("sentinel_request_e2e_seconds", 0.5, PROF), "{{instance}} {{profile}} p50"),
            (_q("sentinel_request_e2e_seconds", 0.99, PROF), "{{instance}} {{profile}} p99"),
        ],
    )
    b.panel(
        "timeseries",
        "Runs by outcome",
        "Scheduled runs in the window: completed, aborted, failed, cancelled.",
        "none",
        [
            (
                f"sum by (instance, profile, outcome) (increase(sentinel_load_runs_total{{{PROF}}}[$window]))",
                "{{instance}} {{profile}} {{outcome}}",
            )
        ],
        w=8,
    )
    b.panel(
        "timeseries",
        "Skipped and aborted runs",
        "Why runs did not happen (skipped: busy, budget, foreign_traffic, server_not_ready, warmup) or "
        "were stopped (aborted: error_ratio, kv_usage, gpu_temperature, gpu_throttle, foreign_traffic, "
        "timeout, server_restart).",
        "none",
        [
            (
                f"sum by (instance, profile, reason) (increase(sentinel_load_skipped_total{{{PROF}}}[$window]))",
                "{{instance}} {{profile}} skipped {{reason}}",
            ),
            (
                f"sum by (instance, profile, reason) (increase(sentinel_load_aborts_total{{{PROF}}}[$window]))",
                "{{instance}} {{profile}} aborted {{reason}}",
            ),
        ],
        w=8,
    )
    b.panel(
        "timeseries",
        "Synthetic requests by outcome",
        "Requests sent by scheduled runs in the window: success or the failure reason.",
        "none",
        [
            (
                f"sum by (instance, profile, outcome) (increase(sentinel_load_requests_total{{{PROF}}}[$window]))",
                "{{instance}} {{profile}} {{outcome}}",
            )
        ],
        w=8,
    )
    b.panel(
        "timeseries",
        "Synthetic-token budget",
        "Tokens (prompt + generated) still allowed in the sliding hour, and the hourly limit.",
        "short",
        [
            (f"sentinel_budget_remaining_tokens{{{INST}}}", "{{instance}} remaining"),
            (f"sentinel_budget_limit_tokens{{{INST}}}", "{{instance}} limit"),
        ],
        w=8,
    )
    b.panel(
        "timeseries",
        "Foreign traffic",
        "Requests of other clients on the server at the last polite-injection check (running + queued "
        "minus sentinel's own).",
        "short",
        [(f"sentinel_load_foreign_requests{{{INST}}}", "{{instance}}")],
        w=8,
    )
    b.panel(
        "stat",
        "Client-bound",
        "1 when the last reference run's client lagged past its thresholds: its latencies include "
        "client delay.",
        "none",
        [(f"sentinel_load_client_bound{{{PROF}}}", "{{instance}} {{profile}}")],
        w=8,
        defaults={
            "mappings": _map({"0": ("no", "green"), "1": ("CLIENT-BOUND", "orange")}),
            "thresholds": _steps(("green", None), ("orange", 1)),
        },
        options={
            "reduceOptions": {"calcs": ["lastNotNull"], "fields": "", "values": False},
            "colorMode": "background",
        },
    )

    b.row("Capacity (calibration)")
    b.panel(
        "stat",
        "Saturation output throughput",
        "Output tokens/s at saturation, from the last calibration sweep. bound=lower: the sweep "
        "reached max_concurrency without saturating, the capacity is at least this.",
        "short",
        [(f"sentinel_capacity_output_throughput_tokens_per_second{{{INST}}}", "{{instance}} {{bound}}")],
        w=6,
    )
    b.panel(
        "stat",
        "Knee concurrency",
        "Concurrency past which latency grows faster than throughput (bound=lower: not saturated).",
        "short",
        [(f"sentinel_capacity_knee_concurrency{{{INST}}}", "{{instance}} {{bound}}")],
        w=6,
    )
    b.panel(
        "stat",
        "Max concurrency within SLO",
        "Highest concurrency that met the latency SLO at the last calibration (only with an SLO set).",
        "short",
        [(f"sentinel_capacity_slo_concurrency{{{INST}}}", "{{instance}}")],
        w=6,
        # Without [calibration.slo] targets (the built-in default) there is no such figure: say
        # so rather than "No data", which reads as broken.
        defaults={"noValue": "no SLO set ([calibration.slo])"},
    )
    b.panel(
        "stat",
        "Calibrated",
        "Time since the last calibration finished.",
        "s",
        [(f"time() - sentinel_capacity_last_calibration_timestamp_seconds{{{INST}}}", "{{instance}}")],
        w=6,
    )

    _energy_row(b)

    b.row("SGLang (re-exposed by sentinel)")
    b.panel(
        "timeseries",
        "Running and queued requests",
        "SGLang's scheduler gauges: requests decoding and requests waiting, server totals (one series "
        "per data-parallel replica, the priority total, whatever the launch flags).",
        "short",
        [
            (sched_total("sglang:num_running_reqs", SGL), "{{instance}} running"),
            (sched_total("sglang:num_queue_reqs", SGL), "{{instance}} queued"),
        ],
        w=8,
    )
    b.panel(
        "timeseries",
        "KV-cache usage",
        "Fraction of the KV-cache token pool in use (sglang:token_usage); near 1 requests get retracted.",
        "percentunit",
        [(f"max by (instance) (sglang:token_usage{{{SGL}}})", "{{instance}}")],
        w=8,
        defaults={"min": 0, "max": 1},
    )
    b.panel(
        "timeseries",
        "Generation throughput",
        "SGLang's decode throughput gauge (from its last decode log interval).",
        "short",
        [(sched_total("sglang:gen_throughput", SGL), "{{instance}}")],
        w=8,
    )
    b.panel(
        "timeseries",
        "SGLang time to first token",
        "p50 and p99 TTFT over all of the server's requests (real and synthetic).",
        "s",
        [
            (
                f"histogram_quantile(0.5, sum by (le, instance) (rate({SGLANG_TTFT}{{{SGL}}}[$__rate_interval])))",
                "{{instance}} p50",
            ),
            (
                f"histogram_quantile(0.99, sum by (le, instance) (rate({SGLANG_TTFT}{{{SGL}}}[$__rate_interval])))",
                "{{instance}} p99",
            ),
        ],
    )
    b.panel(
        "timeseries",
        "SGLang token throughput",
        "Prompt and generated tokens per second over all of the server's requests.",
        "short",
        [
            (
                f"sum by (instance) (rate(sglang:prompt_tokens_total{{{SGL}}}[$__rate_interval]))",
                "{{instance}} prompt",
            ),
            (
                f"sum by (instance) (rate(sglang:generation_tokens_total{{{SGL}}}[$__rate_interval]))",
                "{{instance}} generated",
            ),
        ],
    )

    b.row("Collectors")
    b.panel(
        "timeseries",
        "Collector success",
        "1 when the collector's last run succeeded (sglang metrics, log lines, GPU).",
        "none",
        [(f"sentinel_collector_success{{{INST}}}", "{{instance}} {{collector}}")],
        defaults={"min": 0, "max": 1},
    )
    b.panel(
        "timeseries",
        "Collector duration",
        "Time each collector took; GPU reads run in the background.",
        "s",
        [(f"sentinel_collector_duration_seconds{{{INST}}}", "{{instance}} {{collector}}")],
    )
    b.panel(
        "timeseries",
        "SGLang log lines not understood",
        "Batch lines sentinel could not parse per window, by kind and reason (a new SGLang log layout: "
        "the log-derived series of that kind freeze), and NaN-sanitized warnings (the model produced "
        "NaN logits and SGLang kept serving).",
        "none",
        [
            (
                f"sum by (instance, kind, reason) (increase(sentinel_sglang_log_lines_unparsed_total{{{INST}}}"
                "[$__rate_interval]))",
                "{{instance}} unparsed {{kind}} {{reason}}",
            ),
            (
                f"sum by (instance) (increase(sentinel_sglang_log_nan_sanitized_total{{{INST}}}[$__rate_interval]))",
                "{{instance}} NaN sanitized",
            ),
        ],
    )
    model = _query_variable("model_name", "model_name", f"sglang:num_running_reqs{{{INST}}}")
    return _dashboard(
        "sentinel-overview",
        "sglang-sentinel: server, load and capacity",
        b,
        with_profile=True,
        extra=(model,),
    )


def gpu() -> dict[str, Any]:
    b = Board()
    gsel = match("instance", "gpu")
    legend = "{{instance}} GPU {{gpu}}"
    b.row("Load")
    gpu_panels: tuple[tuple[str, str, str, str, dict[str, Any]], ...] = (
        (
            "Utilization",
            "Fraction of time a kernel was running.",
            "percentunit",
            "sentinel_gpu_utilization_ratio",
            {},
        ),
        ("Memory used", "Device memory in use.", "bytes", "sentinel_gpu_memory_used_bytes", {}),
        ("Power", "Power draw.", "watt", "sentinel_gpu_power_watts", {}),
        ("Temperature", "GPU core temperature.", "celsius", "sentinel_gpu_temperature_celsius", {}),
        ("SM clock", "Current SM clock.", "hertz", "sentinel_gpu_sm_clock_hertz", {}),
    )
    for title, desc, unit, metric, extra in gpu_panels:
        b.panel("timeseries", title, desc, unit, [(f"{metric}{{{gsel}}}", legend)], w=8, **extra)
    b.panel(
        "timeseries",
        "Clock-event reasons active",
        "Throttle reasons holding the clocks down (1 = active): thermal, power cap, hardware slowdown.",
        "none",
        [(f"sentinel_gpu_clock_event_active{{{gsel}}} == 1", "{{instance}} GPU {{gpu}} {{reason}}")],
        w=8,
    )
    b.row("PCIe (TP 8 over PCIe: every all-reduce crosses it)")
    b.panel(
        "timeseries",
        "PCIe transmit",
        "PCIe transmit throughput over NVML's 20 ms window.",
        "Bps",
        [(f"sentinel_gpu_pcie_tx_bytes_per_second{{{gsel}}}", legend)],
        w=8,
    )
    b.panel(
        "timeseries",
        "PCIe receive",
        "PCIe receive throughput over NVML's 20 ms window.",
        "Bps",
        [(f"sentinel_gpu_pcie_rx_bytes_per_second{{{gsel}}}", legend)],
        w=8,
    )
    b.panel(
        "timeseries",
        "PCIe link width (current / max)",
        "Lanes in use against the maximum; below the maximum is a degraded link.",
        "none",
        [
            (f"sentinel_gpu_pcie_link_width{{{gsel}}}", "{{instance}} GPU {{gpu}} current"),
            (f"sentinel_gpu_pcie_link_max_width{{{gsel}}}", "{{instance}} GPU {{gpu}} max"),
        ],
        w=8,
    )
    b.panel(
        "timeseries",
        "PCIe replays",
        "Link-level retransmissions per window; any sustained rate is a signal-integrity problem.",
        "none",
        [(f"increase(sentinel_gpu_pcie_replays_total{{{gsel}}}[$__rate_interval])", legend)],
        w=12,
    )
    b.panel(
        "timeseries",
        "XID errors",
        "XID errors per window, by GPU and XID.",
        "none",
        [
            (
                f"increase(sentinel_gpu_xid_errors_total{{{gsel}}}[$__rate_interval])"
                f" or on (instance) (0 * sentinel_gpu_visible_devices{{{INST}}})",
                "{{instance}} GPU {{gpu}} XID {{xid}}",
            )
        ],
        w=12,
    )
    b.row("Collection")
    b.panel(
        "stat",
        "GPUs visible / expected",
        "GPUs NVML reports now against the launch profile's count.",
        "none",
        [
            (f"sentinel_gpu_visible_devices{{{INST}}}", "{{instance}} visible"),
            (f"sentinel_gpu_expected_devices{{{INST}}}", "{{instance}} expected"),
        ],
        w=12,
    )
    b.panel(
        "timeseries",
        "GPU read duration",
        "Time of one background read per GPU (NVML calls are slow: PCIe throughput alone takes ~20 ms).",
        "s",
        [(f"sentinel_gpu_read_duration_seconds{{{gsel}}}", legend)],
        w=12,
    )
    gpus = _query_variable("gpu", "gpu", f"sentinel_gpu_temperature_celsius{{{INST}}}") | {"label": "GPU"}
    return _dashboard(
        "sentinel-gpu", "sglang-sentinel: GPUs (sentinel's NVML)", b, with_profile=False, extra=(gpus,)
    )


# dcgm-exporter's series joined to the SGLang pods sentinel watches (Kubernetes, where sentinel's
# NVML collector is off because the GPUs belong to SGLang's container). dcgm-exporter labels each
# GPU's series with the pod using it (namespace, pod, container); scraped with honorLabels: false
# (its chart's default) they arrive as exported_namespace / exported_pod, which win here when set.
# The PodMonitor gives sentinel's series the same namespace and pod: sentinel's instance label is
# copied onto the GPU series, so $job/$instance select GPUs as they select servers.
DCGM_SEL = 'cluster=~"$cluster", gpu=~"$gpu"'


def _d(metric: str) -> str:
    """A dcgm-exporter series with the dashboard's GPU matchers."""
    return f"{metric}{{{DCGM_SEL}}}"


def dcgm_series(inner: str) -> str:
    """``inner`` (over dcgm-exporter series, see :func:`_d`) for the GPUs of the selected SGLang
    pods, with sentinel's ``instance`` label."""
    own = (
        f'label_replace(label_replace({inner}, "pod", "$1", "exported_pod", "(.+)"),'
        ' "namespace", "$1", "exported_namespace", "(.+)")'
    )
    pods = f"max by (cluster, namespace, pod, instance) (sentinel_server_up{{{INST}}})"
    return f"({own} * on (cluster, namespace, pod) group_left (instance) ({pods} ^ 0))"


def dcgm() -> dict[str, Any]:
    b = Board()
    legend = "{{instance}} GPU {{gpu}}"
    b.row("Load (dcgm-exporter, GPUs of the SGLang pods)")
    used, free = _d("DCGM_FI_DEV_FB_USED"), _d("DCGM_FI_DEV_FB_FREE")
    energy = f"rate({_d('DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION')}[$__rate_interval])"
    panels: tuple[tuple[str, str, str, str], ...] = (
        ("Utilization", "Fraction of time a kernel was running (DCGM_FI_DEV_GPU_UTIL).", "percentunit",
         f"{dcgm_series(_d('DCGM_FI_DEV_GPU_UTIL'))} / 100"),
        ("Memory used", "Framebuffer memory in use (DCGM_FI_DEV_FB_USED, MiB).", "bytes",
         f"{dcgm_series(used)} * 1048576"),
        ("Memory used (fraction)", "Used over used + free framebuffer: SGLang reserves most of it at start "
         "(--mem-fraction-static), so a drop means a restarted server.", "percentunit",
         dcgm_series(f"{used} / ({used} + {free})")),
        ("Power", "Power draw (DCGM_FI_DEV_POWER_USAGE).", "watt", dcgm_series(_d("DCGM_FI_DEV_POWER_USAGE"))),
        ("Energy-derived power", "Mean power over the window from the energy counter "
         "(DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, mJ): no sample gaps, unlike the instantaneous reading.",
         "watt", f"{dcgm_series(energy)} / 1000"),
        ("SM clock", "Current SM clock (DCGM_FI_DEV_SM_CLOCK, MHz).", "hertz",
         f"{dcgm_series(_d('DCGM_FI_DEV_SM_CLOCK'))} * 1000000"),
        ("GPU temperature", "GPU core temperature (DCGM_FI_DEV_GPU_TEMP).", "celsius",
         dcgm_series(_d("DCGM_FI_DEV_GPU_TEMP"))),
        ("Memory temperature", "HBM temperature (DCGM_FI_DEV_MEMORY_TEMP).", "celsius",
         dcgm_series(_d("DCGM_FI_DEV_MEMORY_TEMP"))),
    )  # fmt: skip
    for title, desc, unit, expr in panels:
        b.panel("timeseries", title, desc, unit, [(expr, legend)], w=8)
    b.row("Errors")
    b.panel(
        "timeseries",
        "Last XID",
        "The last XID error of each GPU (DCGM_FI_DEV_XID_ERRORS, a gauge: 0 = none since the driver "
        "loaded). 48/63/64/74/79/94/95 mean a GPU that needs attention (README, GPU alerts).",
        "none",
        [(dcgm_series(_d("DCGM_FI_DEV_XID_ERRORS")), legend)],
        w=8,
    )
    b.panel(
        "timeseries",
        "PCIe replays",
        "Link-level retransmissions per window (DCGM_FI_DEV_PCIE_REPLAY_COUNTER); a sustained rate is "
        "a signal-integrity problem, and TP over PCIe crosses the link on every all-reduce.",
        "none",
        [(dcgm_series(f"increase({_d('DCGM_FI_DEV_PCIE_REPLAY_COUNTER')}[$__rate_interval])"), legend)],
        w=8,
    )
    b.panel(
        "timeseries",
        "Row remapping",
        "Uncorrectable-error rows remapped per window, and 1 when remapping failed (the GPU needs a reset "
        "or replacement).",
        "none",
        [
            (
                dcgm_series(f"increase({_d('DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS')}[$__rate_interval])"),
                "{{instance}} GPU {{gpu}} remapped",
            ),
            (dcgm_series(_d("DCGM_FI_DEV_ROW_REMAP_FAILURE")), "{{instance}} GPU {{gpu}} remap failed"),
        ],
        w=8,
    )
    b.row("Mapping")
    b.panel(
        "stat",
        "GPUs per SGLang pod",
        "GPUs dcgm-exporter attributes to each watched pod. None: dcgm-exporter is not scraped, its pod "
        "mapping is off, or the pod labels differ (README, Kubernetes).",
        "none",
        [(f"count by (instance) ({dcgm_series(_d('DCGM_FI_DEV_GPU_TEMP'))})", "{{instance}}")],
        w=24,
    )
    gpus = _query_variable("gpu", "gpu", 'DCGM_FI_DEV_GPU_TEMP{cluster=~"$cluster"}') | {"label": "GPU"}
    return _dashboard(
        "sentinel-dcgm", "sglang-sentinel: GPUs (dcgm-exporter)", b, with_profile=False, extra=(gpus,)
    )


def _annotations() -> list[dict[str, Any]]:
    # Every server (re)start on every panel: a throughput step right after one is a cold server.
    return [
        {
            "name": "Server (re)starts",
            "datasource": DS,
            "enable": True,
            "iconColor": "orange",
            "expr": f"changes(sentinel_server_ready_timestamp_seconds{{{INST}}}[$__rate_interval]) > 0",
            "step": "60s",
            "titleFormat": "server ready (new epoch)",
            "textFormat": "{{instance}}",
            "useValueForTime": False,
        }
    ]


def _dashboard(
    uid: str, title: str, board: Board, *, with_profile: bool, extra: tuple[dict[str, Any], ...] = ()
) -> dict[str, Any]:
    return {
        "__requires": [{"type": "grafana", "id": "grafana", "name": "Grafana", "version": MIN_GRAFANA}],
        "id": None,
        "uid": uid,
        "title": title,
        "tags": ["sglang", "sentinel"],
        "timezone": "browser",
        "editable": True,
        "graphTooltip": 1,
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-24h", "to": "now"},
        "links": [
            {
                "title": "Other sentinel dashboards",
                "type": "dashboards",
                "tags": ["sentinel"],
                "asDropdown": True,
            }
        ],
        "annotations": {"list": _annotations()},
        "templating": {"list": _variables(with_profile, extra)},
        "panels": board.panels,
    }


DASHBOARDS = {"sentinel-overview.json": overview, "sentinel-gpu.json": gpu, "sentinel-dcgm.json": dcgm}


def render() -> dict[str, str]:
    return {
        name: json.dumps(build(), indent=2, ensure_ascii=False) + "\n" for name, build in DASHBOARDS.items()
    }


def main(argv: list[str]) -> int:
    out = HERE / "dashboards"
    stale = []
    for name, text in render().items():
        path = out / name
        if "--check" in argv:
            if not path.is_file() or path.read_text() != text:
                stale.append(name)
        else:
            out.mkdir(exist_ok=True)
            path.write_text(text)
    if stale:
        print("out of date (run python3 grafana/generate.py): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
