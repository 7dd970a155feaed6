"""SGLang's own bench_serving against `sentinel sim`: does every request succeed, and do its numbers
agree with the simulator's ground truth?

    benchmarks/peer_setup.sh                       # once: peer venv + tokenizer
    .venv/bin/python benchmarks/bench_serving_vs_sim.py     # --speed 2, 64 prompts at 32 req/s

The defaults replay the deployment's "64 prompts at 16 req/s, 256/256" figure in server time
(--speed 2 doubles every rate), so bench_serving's own numbers can be read against the seed's
≈196 output / ≈451 total tok/s after dividing by the speed.

Starts a simulator (or uses ``--base-url``/``--control-url`` of a running one), then runs
bench_serving 0.5.9 unchanged with each backend (``sglang`` with ``--tokenize-prompt`` so input
lengths are exact; ``sglang`` with text prompts; ``sglang-oai-chat`` with thinking off, so its TTFT —
which ignores ``reasoning_content`` in 0.5.9 — is comparable; ``sglang-oai-chat`` with thinking on
for success/counts only). For each run it reads bench_serving's JSONL result and the simulator's
ground truth for the same requests (``GET /summary?since=`` after bench_serving's warm-up) and
prints one comparison table. Exit status 1 if any request failed or a compared figure is outside
its tolerance.

Tolerances (why): token totals must match exactly where both sides count the same thing
(server-reported output for native; exact ``input_ids`` lengths); throughputs and mean
concurrency within 3 % (bench_serving's duration also spans its post-run ``/get_server_info``
call and the client's receive/parse delay); latencies within 5 ms + 5 % (client-side receive
and parse time on a shared 2-core machine).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from peer_cpu import BenchServingRun, PeerNotReady, run_bench_serving

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Case:
    name: str
    backend: str
    tokenize_prompt: bool = False
    thinking: bool | None = None  # chat only: None = server default (on)

    @property
    def extra_body(self) -> dict[str, Any] | None:
        if self.thinking is False:
            return {"chat_template_kwargs": {"enable_thinking": False}}
        return None

    @property
    def exact_input(self) -> bool:
        return self.tokenize_prompt  # text prompts: client tokenizer ≠ the sim's token rule

    @property
    def comparable_ttft(self) -> bool:
        return self.backend == "sglang" or self.thinking is False


CASES = {
    "sglang-ids": Case("sglang-ids", "sglang", tokenize_prompt=True),
    "sglang-text": Case("sglang-text", "sglang"),
    "chat": Case("chat", "sglang-oai-chat", thinking=False),
    "chat-thinking": Case("chat-thinking", "sglang-oai-chat"),
}


@dataclass(frozen=True)
class Row:
    case: str
    metric: str
    client: float | None
    truth: float | None
    ok: bool | None  # None = informational, not checked

    @property
    def diff_pct(self) -> float | None:
        if self.client is None or self.truth is None or self.truth == 0:
            return None
        return 100.0 * (self.client - self.truth) / self.truth


@dataclass(frozen=True)
class CaseResult:
    case: Case
    run: BenchServingRun
    truth: dict[str, Any]
    rows: list[Row]

    @property
    def ok(self) -> bool:
        return all(r.ok is not False for r in self.rows)


@dataclass
class Sim:
    base_url: str
    control_url: str
    process: subprocess.Popen[bytes] | None = None


@contextmanager
def start_sim(args: Sequence[str], timeout: float = 60.0) -> Iterator[Sim]:
    """``sentinel sim --port 0`` in its own session; killed (whole group) on exit."""
    with tempfile.TemporaryDirectory(prefix="sentinel-peer-sim-") as tmp:
        ready = Path(tmp) / "ready.json"
        log = open(Path(tmp) / "sim.log", "wb")  # noqa: SIM115 - closed below
        cmd = [
            sys.executable,
            "-m",
            "sglang_sentinel",
            "sim",
            "--port",
            "0",
            "--ready-file",
            str(ready),
            *args,
        ]
        proc = subprocess.Popen(
            cmd, stdout=subprocess.DEVNULL, stderr=log, stdin=subprocess.DEVNULL, start_new_session=True
        )
        try:
            deadline = time.monotonic() + timeout
            while not ready.exists():
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"sentinel sim did not start: {(Path(tmp) / 'sim.log').read_text()[-2000:]}"
                    )
                time.sleep(0.02)
            info = json.loads(ready.read_text())
            sim = Sim(info["base_url"], info["control_url"], proc)
            while True:
                try:
                    if httpx.get(sim.base_url + "/health", timeout=5).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("sentinel sim never became healthy")
                time.sleep(0.05)
            yield sim
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=10)
            log.close()


def truth_after_warmup(
    control_url: str, run: BenchServingRun, warmup_requests: int
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Ground truth (summary, records) for the run's own requests: bench_serving's warm-up requests
    come first (it awaits them, then sleeps 1 s), so the run starts at the (warmup+1)-th arrival."""
    params = {"since": run.started_at}
    records = httpx.get(control_url + "/requests", params=params, timeout=30).json()["requests"]
    records.sort(key=lambda r: r["arrival_time"])
    if len(records) <= warmup_requests:
        return {"requests": 0, "completed": 0}, []
    since = records[warmup_requests]["arrival_time"]
    summary: dict[str, Any] = httpx.get(control_url + "/summary", params={"since": since}, timeout=30).json()
    return summary, records[warmup_requests:]


def client_added_ttft_ms(res: dict[str, Any], records: list[dict[str, Any]]) -> list[float]:
    """Per request: bench_serving's TTFT minus the engine's, in ms.

    bench_serving's details carry no request id, so requests are matched on the exact
    (prompt tokens, output tokens) pair — unique for random lengths except for rare collisions,
    which are skipped. Only meaningful when both sides count prompt tokens the same way.
    """
    by_pair: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for r in records:
        if r["status"] == "ok" and r["ttft_s"] is not None:
            by_pair.setdefault((r["prompt_tokens"], r["completion_tokens"]), []).append(r)
    out = []
    errors = res.get("errors") or [""] * len(res.get("ttfts", []))
    for n_in, n_out, ttft, err in zip(
        res["input_lens"], res["output_lens"], res["ttfts"], errors, strict=False
    ):
        matches = by_pair.get((n_in, n_out), [])
        if err or len(matches) != 1:
            continue
        out.append(1000.0 * (ttft - matches[0]["ttft_s"]))
    return out


def _pct(values: list[float], q: float) -> float:
    s = sorted(values)
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


def _close(client: float | None, truth: float | None, rel: float, abs_: float = 0.0) -> bool:
    if client is None or truth is None:
        return False
    return abs(client - truth) <= abs_ + rel * abs(truth)


def compare(
    case: Case, run: BenchServingRun, truth: dict[str, Any], records: list[dict[str, Any]], num_prompts: int
) -> list[Row]:
    res = run.result or {}
    rows = [
        Row(
            case.name,
            "successful requests",
            float(run.completed),
            float(num_prompts),
            run.completed == num_prompts,
        ),
        Row(case.name, "failed requests", float(len(run.failures)), 0.0, not run.failures),
        Row(
            case.name,
            "truth completed",
            float(truth.get("completed", 0)),
            float(num_prompts),
            truth.get("completed") == num_prompts,
        ),
    ]
    if not res or not truth.get("completed"):
        return rows
    ms = 1000.0

    def add(metric: str, client: float | None, t: float | None, check: bool | None) -> None:
        rows.append(Row(case.name, metric, client, t, check))

    add(
        "total output tokens",
        res["total_output_tokens"],
        truth["total_output_tokens"],
        res["total_output_tokens"] == truth["total_output_tokens"],
    )
    add(
        "total input tokens",
        res["total_input_tokens"],
        truth["total_input_tokens"],
        res["total_input_tokens"] == truth["total_input_tokens"] if case.exact_input else None,
    )
    add("duration (s)", res["duration"], truth["duration_s"], None)
    add(
        "request throughput (req/s)",
        res["request_throughput"],
        truth["request_throughput"],
        _close(res["request_throughput"], truth["request_throughput"], 0.03),
    )
    add(
        "output throughput (tok/s)",
        res["output_throughput"],
        truth["output_throughput"],
        _close(res["output_throughput"], truth["output_throughput"], 0.03),
    )
    add(
        "total throughput (tok/s)",
        res["total_throughput"],
        truth["total_throughput"],
        _close(res["total_throughput"], truth["total_throughput"], 0.03) if case.exact_input else None,
    )
    add(
        "concurrency",
        res["concurrency"],
        truth["mean_concurrency"],
        _close(res["concurrency"], truth["mean_concurrency"], 0.03),
    )
    add(
        "peak concurrent requests",
        res.get("max_concurrent_requests"),
        truth["peak_concurrency_1s_buckets"],
        None,
    )
    ttft_ok = case.comparable_ttft
    add(
        "mean TTFT (ms)",
        res["mean_ttft_ms"],
        truth["mean_ttft_s"] * ms,
        _close(res["mean_ttft_ms"], truth["mean_ttft_s"] * ms, 0.05, 5.0) if ttft_ok else None,
    )
    add("median TTFT (ms)", res["median_ttft_ms"], truth["median_ttft_s"] * ms, None)
    add("P99 TTFT (ms)", res["p99_ttft_ms"], truth["p99_ttft_s"] * ms, None)
    add(
        "mean E2E (ms)",
        res["mean_e2e_latency_ms"],
        truth["mean_e2e_s"] * ms,
        _close(res["mean_e2e_latency_ms"], truth["mean_e2e_s"] * ms, 0.05, 5.0),
    )
    add("median E2E (ms)", res["median_e2e_latency_ms"], truth["median_e2e_s"] * ms, None)
    add("P99 E2E (ms)", res["p99_e2e_latency_ms"], truth["p99_e2e_s"] * ms, None)
    tpot_truth = truth.get("mean_tpot_s")
    add(
        "mean TPOT (ms)",
        res["mean_tpot_ms"],
        None if tpot_truth is None else tpot_truth * ms,
        _close(res["mean_tpot_ms"], tpot_truth * ms, 0.05, 1.0) if ttft_ok and tpot_truth else None,
    )
    # The decode span (E2E - TTFT) cancels whatever delayed the requests' start on either side,
    # so it must agree even when a burst of arrivals makes TTFT differ.
    client_span = res["mean_e2e_latency_ms"] - res["mean_ttft_ms"]
    truth_span = (truth["mean_e2e_s"] - truth["mean_ttft_s"]) * ms
    add(
        "mean decode span E2E-TTFT (ms)",
        client_span,
        truth_span,
        _close(client_span, truth_span, 0.03, 2.0) if ttft_ok else None,
    )
    if case.exact_input and res.get("ttfts"):
        added = client_added_ttft_ms(res, records)
        if added:
            # A client cannot see a token before the engine produced it (1 ms: clock granularity).
            add("client-added TTFT min (ms)", min(added), None, min(added) >= -1.0)
            add("client-added TTFT p50 (ms)", _pct(added, 50), None, None)
            add("client-added TTFT p99 (ms)", _pct(added, 99), None, None)
            add("  (requests matched)", float(len(added)), float(num_prompts), None)
    return rows


def run_case(
    sim: Sim,
    case: Case,
    *,
    num_prompts: int,
    input_len: int,
    output_len: int,
    range_ratio: float,
    request_rate: float,
    max_concurrency: int | None,
    seed: int,
    warmup_requests: int = 1,
) -> CaseResult:
    run = run_bench_serving(
        sim.base_url,
        backend=case.backend,
        num_prompts=num_prompts,
        input_len=input_len,
        output_len=output_len,
        range_ratio=range_ratio,
        request_rate=request_rate,
        max_concurrency=max_concurrency,
        seed=seed,
        warmup_requests=warmup_requests,
        tokenize_prompt=case.tokenize_prompt,
        extra_request_body=case.extra_body,
    )
    truth, records = truth_after_warmup(sim.control_url, run, warmup_requests)
    return CaseResult(case, run, truth, compare(case, run, truth, records, num_prompts))


def _fmt(v: float | None) -> str:
    if v is None:
        return "-"
    return f"{v:.0f}" if abs(v) >= 1000 or float(v).is_integer() else f"{v:.2f}"


def print_table(results: Sequence[CaseResult], out: Any = sys.stdout) -> None:
    header = f"{'case':<14} {'metric':<28} {'bench_serving':>14} {'sim truth':>12} {'diff %':>8}  check"
    print(header, file=out)
    print("-" * len(header), file=out)
    for result in results:
        for r in result.rows:
            diff = "-" if r.diff_pct is None else f"{r.diff_pct:+.2f}"
            check = {True: "ok", False: "FAIL", None: "info"}[r.ok]
            print(
                f"{r.case:<14} {r.metric:<28} {_fmt(r.client):>14} {_fmt(r.truth):>12} {diff:>8}  {check}",
                file=out,
            )
        if result.run.failures:
            print(f"{'':<14} first error: {result.run.failures[0][-300:]!r}", file=out)
        if result.run.returncode != 0:
            print(
                f"{'':<14} bench_serving exit {result.run.returncode}: {result.run.stderr[-800:]}", file=out
            )
        run = result.run
        print(
            f"{'':<14} bench_serving CPU: run {_fmt(run.run_cpu_s)} s "
            f"({_fmt(run.tokens_per_run_cpu_s)} output tok/CPU-s), benchmark phase "
            f"{_fmt(run.benchmark_cpu_s)} s, whole process {_fmt(run.process_cpu_s)} s, "
            f"wall {_fmt(run.wall_s)} s",
            file=out,
        )
        print(file=out)


# The deployment's published bench_serving figures (server time), keyed by how they were driven:
# (num prompts, input len, output len, range ratio, server-time request rate).
DEPLOYMENT_FIGURES = {
    (32, 256, 256, 0.0, float("inf")): {"output": 144.0, "total": 304.0, "concurrency": 18.4},
    (64, 256, 256, 0.0, 16.0): {"output": 196.0, "total": 451.0},
}


def print_deployment_figures(results: Sequence[CaseResult], args: argparse.Namespace) -> None:
    """When driven like a published figure, show bench_serving's own numbers in server time."""
    key = (
        args.num_prompts,
        args.random_input_len,
        args.random_output_len,
        args.random_range_ratio,
        args.request_rate / args.speed,
    )
    figures = DEPLOYMENT_FIGURES.get(key)
    if figures is None:
        return
    print(f"Driven like the deployment's published run (server time = real ÷ speed {args.speed:g}):")
    print(f"{'case':<14} {'output tok/s':>13} {'total tok/s':>12} {'concurrency':>12}")
    deployment = (figures["output"], figures["total"], figures.get("concurrency"))
    print(f"{'deployment':<14} {deployment[0]:>13.1f} {deployment[1]:>12.1f} {_fmt(deployment[2]):>12}")
    for result in results:
        res = result.run.result
        if not res or not result.case.exact_input:  # total tok/s needs the server's prompt lengths
            continue
        print(
            f"{result.case.name:<14} {res['output_throughput'] / args.speed:>13.1f} "
            f"{res['total_throughput'] / args.speed:>12.1f} {res['concurrency']:>12.1f}"
        )
    print()


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.RawDescriptionHelpFormatter
    )
    p.add_argument("--speed", type=float, default=2.0, help="simulator --speed (default 2)")
    p.add_argument("--profile", default=None, help="simulator --profile (default: its default profile)")
    p.add_argument("--num-prompts", type=int, default=64)
    p.add_argument("--random-input-len", type=int, default=256)
    p.add_argument("--random-output-len", type=int, default=256)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument(
        "--request-rate", type=float, default=32.0, help="real req/s (default 32; inf = all at once)"
    )
    p.add_argument("--max-concurrency", type=int, default=None)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--cases", default=",".join(CASES), help=f"comma list of {', '.join(CASES)}")
    p.add_argument("--base-url", help="use a running simulator instead of starting one (needs --control-url)")
    p.add_argument("--control-url")
    p.add_argument("--json", type=Path, help="also write the rows as JSON here")
    args = p.parse_args(argv)
    try:
        cases = [CASES[name] for name in args.cases.split(",") if name]
    except KeyError as exc:
        p.error(f"unknown case {exc}")
    if bool(args.base_url) != bool(args.control_url):
        p.error("--base-url and --control-url go together")
    sim_args = ["--speed", str(args.speed), "--lifetime", "3600"]
    if args.profile:
        sim_args += ["--profile", args.profile]

    def go(sim: Sim) -> list[CaseResult]:
        results = []
        for case in cases:
            results.append(
                run_case(
                    sim,
                    case,
                    num_prompts=args.num_prompts,
                    input_len=args.random_input_len,
                    output_len=args.random_output_len,
                    range_ratio=args.random_range_ratio,
                    request_rate=args.request_rate,
                    max_concurrency=args.max_concurrency,
                    seed=args.seed,
                )
            )
        return results

    try:
        if args.base_url:
            results = go(Sim(args.base_url, args.control_url))
        else:
            with start_sim(sim_args) as sim:
                results = go(sim)
    except PeerNotReady as exc:
        print(f"bench_serving_vs_sim: {exc}", file=sys.stderr)
        return 2
    print(
        f"bench_serving 0.5.9 vs sentinel sim (--speed {args.speed}, {args.num_prompts} prompts, "
        f"{args.random_input_len}/{args.random_output_len}, range ratio {args.random_range_ratio}, "
        f"rate {args.request_rate})\n"
    )
    print_table(results)
    print_deployment_figures(results, args)
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for res in results for r in res.rows], indent=1))
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
