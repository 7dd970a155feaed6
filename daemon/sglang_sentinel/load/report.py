"""bench_serving's printed result block, label for label, then our own figures below it.

The first block reproduces SGLang 0.5.23 `bench_serving` (`sglang.benchmark.serving`,
`{:<40} {:<10}` columns, same labels, same order, same conditions: "Accept length" with spec
decoding, the Goodput section with --goodput, Cache Hit Details with --cache-report) so that an
operator can diff the two tools' outputs line by line (`tests/load/test_bench_flags.py`).
"Total generated tokens (retokenized)" needs a client tokenizer (--tokenizer), else n/a; the cache
section has no device/host/storage split (that needs SGLang's `cached_tokens_details`).
The GPU energy section (none in bench_serving) is in our block, in its style, when the run was
metered (docs/energy.md).
"""

from __future__ import annotations

import math
from typing import Any

from sglang_sentinel.load.result import RunResult
from sglang_sentinel.load.spec import ArrivalProcess
from sglang_sentinel.load.turns import per_turn_lines

__all__ = ["format_result_block"]


def _row(label: str, value: object, fmt: str = "") -> str:
    if fmt and isinstance(value, int | float):
        return "{:<40} {:<10{}}".format(label, value, fmt)
    return f"{label:<40} {value!s:<10}"


def _title(text: str, fill: str) -> str:
    return "{s:{c}^{n}}".format(s=text, n=50, c=fill)


def _cache_totals(result: RunResult) -> tuple[int, int]:
    """bench_serving's --cache-report sums: prompt and cached tokens of successful requests."""
    ok = [r for r in result.measured if r.success]
    prompt = sum(r.prompt_tokens if r.prompt_tokens is not None else r.prompt_len for r in ok)
    return prompt, sum(r.cached_tokens or 0 for r in ok)


def format_result_block(result: RunResult, *, cache_report: bool = False) -> str:
    m = result.metrics
    spec = result.spec
    rate: float | str = (
        spec.request_rate if spec.arrival in (ArrivalProcess.POISSON, ArrivalProcess.CONSTANT) else math.inf
    )
    if spec.arrival is ArrivalProcess.TRACE:
        rate = "trace"  # bench_serving's label when trace timestamps drive the arrivals
    retok = result.retokenized_output_tokens
    lines = [
        "",
        _title(" Serving Benchmark Result ", "="),
        _row("Backend:", str(spec.backend)),
        _row("Traffic request rate:", rate),
        _row("Max request concurrency:", spec.max_concurrency if spec.max_concurrency else "not set"),
        _row("Successful requests:", m.completed),
        _row("Benchmark duration (s):", m.duration, ".2f"),
        _row("Total input tokens:", m.total_input_tokens),
        _row("Total input text tokens:", m.total_input_tokens),
        _row("Total generated tokens:", m.total_output_tokens),
        _row("Total generated tokens (retokenized):", "n/a" if retok is None else retok),
        _row("Request throughput (req/s):", m.request_throughput, ".2f"),
        _row("Input token throughput (tok/s):", m.input_throughput, ".2f"),
        _row("Output token throughput (tok/s):", m.output_throughput, ".2f"),
        _row("Peak output token throughput (tok/s):", m.max_output_tokens_per_s, ".2f"),
        _row("Peak concurrent requests:", m.max_concurrent_requests),
        _row("Total token throughput (tok/s):", m.total_throughput, ".2f"),
        _row("Concurrency:", m.concurrency, ".2f"),
    ]
    if result.accept_length:
        lines.append(_row("Accept length:", result.accept_length, ".2f"))
    if m.goodput is not None:
        g = m.goodput
        lines += [
            _title("Goodput", "-"),
            _row("SLOs (ms):", " ".join(f"{k}:{v:g}" for k, v in g.slos_ms.items())),
            _row("Request goodput (req/s):", g.request_goodput, ".2f"),
            _row("SLO attainment (%):", g.slo_attainment * 100, ".2f"),
        ]
        lines += [
            _row(f"{k.upper()} SLO attainment (%):", v * 100, ".2f")
            for k, v in g.attainment_by_metric.items()
        ]
    ms = 1e3
    lines += [
        _title("End-to-End Latency", "-"),
        _row("Mean E2E Latency (ms):", m.e2e.mean * ms, ".2f"),
        _row("Median E2E Latency (ms):", m.e2e.median * ms, ".2f"),
        _row("P90 E2E Latency (ms):", m.e2e.p90 * ms, ".2f"),
        _row("P95 E2E Latency (ms):", m.e2e.p95 * ms, ".2f"),
        _row("P99 E2E Latency (ms):", m.e2e.p99 * ms, ".2f"),
        _title("Time to First Token", "-"),
        _row("Mean TTFT (ms):", m.ttft.mean * ms, ".2f"),
        _row("Median TTFT (ms):", m.ttft.median * ms, ".2f"),
        _row("P90 TTFT (ms):", m.ttft.p90 * ms, ".2f"),
        _row("P95 TTFT (ms):", m.ttft.p95 * ms, ".2f"),
        _row("P99 TTFT (ms):", m.ttft.p99 * ms, ".2f"),
        _title("Time per Output Token (excl. 1st token)", "-"),
        _row("Mean TPOT (ms):", m.tpot.mean * ms, ".2f"),
        _row("Median TPOT (ms):", m.tpot.median * ms, ".2f"),
        _row("P90 TPOT (ms):", m.tpot.p90 * ms, ".2f"),
        _row("P95 TPOT (ms):", m.tpot.p95 * ms, ".2f"),
        _row("P99 TPOT (ms):", m.tpot.p99 * ms, ".2f"),
        _title("Inter-Token Latency", "-"),
        _row("Mean ITL (ms):", m.itl.mean * ms, ".2f"),
        _row("Median ITL (ms):", m.itl.median * ms, ".2f"),
        _row("P90 ITL (ms):", m.itl.p90 * ms, ".2f"),
        _row("P95 ITL (ms):", m.itl.p95 * ms, ".2f"),
        _row("P99 ITL (ms):", m.itl.p99 * ms, ".2f"),
        _row("Max ITL (ms):", m.itl.max * ms, ".2f"),
    ]
    if cache_report:
        prompt, cached = _cache_totals(result)
        lines += [
            _title("Cache Hit Details", "-"),
            _row("Total prompt tokens:", prompt),
            _row("Total cached tokens:", cached),
            "{:<40} {:.1f}%".format("Cache hit rate:", cached / prompt * 100 if prompt > 0 else 0.0),
        ]
    lines.append("=" * 50)
    lines += _extras(result)
    return "\n".join(lines)


def _extras(result: RunResult) -> list[str]:
    m = result.metrics
    ms = 1e3
    failures = ", ".join(f"{k}={v}" for k, v in m.failures.items()) or "none"
    lines = [
        _title(" Sentinel ", "="),
        _row("Failed requests:", m.failed),
        _row("Failures by reason:", failures),
    ]
    if m.cancelled or result.cancelled:
        lines.append(_row("Cancelled requests:", m.cancelled))
    if m.ttfc.count:
        lines += [
            _row("Mean TTFC, first content (ms):", m.ttfc.mean * ms, ".2f"),
            _row("P99 TTFC, first content (ms):", m.ttfc.p99 * ms, ".2f"),
        ]
    if m.reasoning_tokens:
        lines += [
            _row("Reasoning tokens:", m.reasoning_tokens),
            _row("Content tokens:", m.content_tokens),
        ]
    lines += [
        _row("Mean tokens per chunk:", m.tokens_per_chunk.mean, ".2f"),
        _row("Median decode rate (tok/s/req):", m.decode_rate.median, ".2f"),
        _row("Peak in flight (exact):", m.peak_in_flight),
    ]
    if m.steady_state is not None:
        ss = m.steady_state
        lines.append(_row("Steady-state output tput (tok/s):", ss.output_throughput, ".2f"))
        lines.append(_row("Steady-state window (s):", ss.end - ss.start, ".2f"))
    if m.achieved_request_rate is not None and result.spec.arrival in (
        ArrivalProcess.POISSON,
        ArrivalProcess.CONSTANT,
    ):
        lines.append(_row("Achieved request rate (req/s):", m.achieved_request_rate, ".3f"))
    if result.spec.arrival is ArrivalProcess.POISSON:
        lines.append(
            _row("Poisson gaps:", "rescaled to the exact rate" if result.spec.exact_rate else "free draws")
        )
    if m.cache_hit_ratio is not None:
        lines.append(_row("Prefix cache hit ratio:", m.cache_hit_ratio, ".3f"))
    if m.queue_wait.max > 0:
        lines.append(_row("P99 client queue wait (ms):", m.queue_wait.p99 * ms, ".2f"))
    lines += [
        _row("P99 schedule lag (ms):", m.schedule_lag.p99 * ms, ".3f"),
        _row("P99 client send delay (ms):", m.send_delay.p99 * ms, ".3f"),
        _row("P99 event-loop lag (ms):", m.loop_lag.p99 * ms, ".3f"),
        _row("Token timestamps:", "kernel receive" if result.kernel_timestamps else "user space"),
        _row("Events sharing a read (%):", m.shared_read_ratio * 100, ".2f"),
        _row("Client-bound:", "YES - " + "; ".join(m.client_bound_reasons) if m.client_bound else "no"),
    ]
    if result.energy is not None:
        lines += _energy_lines(result.energy)
    lines += per_turn_lines(result.measured)
    lines.extend(f"note: {n}" for n in result.notes)
    if result.energy is None and result.energy_note:
        lines.append(f"note: GPU energy not measured: {result.energy_note}")
    lines.append("=" * 50)
    return lines


def _energy_lines(e: dict[str, Any]) -> list[str]:
    """The measured phase's GPU energy (``collect.gpu.energy.energy_figures``' keys)."""
    lines = [_title("GPU energy", "-"), _row("GPUs metered:", len(e["gpus"]) or "none")]
    if e["joules"] is None or e["joules_per_output_token"] is None:
        why = e["reason"] + (f" ({e['detail']})" if e.get("detail") else "")
        return [*lines, _row("GPU energy:", "not known: " + why)]
    lines += [
        _row("Energy window (s):", e["seconds"], ".2f"),
        _row("GPU energy (J):", e["joules"], ".2f"),
        _row("Mean GPU power (W):", e["mean_power_watts"], ".2f"),
        _row("Energy per output token (J):", e["joules_per_output_token"], ".4f"),
        _row("Output tokens per joule:", e["output_tokens_per_joule"], ".3f"),
    ]
    if e["baseline_power_watts"] is None:
        lines.append(_row("Idle GPU power (W):", e.get("baseline_reason") or "not measured"))
    else:
        lines += [
            _row("Idle GPU power (W):", e["baseline_power_watts"], ".2f"),
            _row("Marginal energy per output token (J):", e["marginal_joules_per_output_token"], ".4f"),
        ]
    cost = e.get("energy_cost_per_million_output_tokens")
    if cost is not None:
        # Labelled as what it is: the GPUs' electricity only, not the host, cooling or hardware.
        lines.append(_row(f"GPU energy cost /1M output tok ({e['currency']}):", cost, ".4f"))
    return lines
