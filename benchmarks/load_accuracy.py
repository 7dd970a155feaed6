"""How true are the load engine's numbers? Compared request by request with the simulator's ground truth.

Starts `sentinel sim` (subprocess, loopback, OS-assigned ports), runs scenarios with
`sglang_sentinel.load.run_load`, then reads the simulator's per-request records (`GET /requests` on the
control API) and matches them by `rid`. Times on both sides are Unix seconds on the same host.

Scenarios (each prints one table row):
- ttft-256: 256 concurrent streams (closed loop, the 512 requests after the opening burst).
  Client-added TTFT = our TTFT - the server's TTFT as its socket sees it (the simulator wrote
  the first token's chunk - the kernel received the request, `docs/sim.md` ground truth); split
  into the request leg (our send -> the sim's socket) and the response leg (the sim wrote it ->
  our stamp). The simulator's own queueing (HTTP queue before its handler, the delay between
  producing a token and writing it) is shown beside it: it is the server's, not the client's.
- poisson: >= 2000 requests, Poisson arrivals; achieved rate at the client and at the server vs
  the target, p99 schedule lag.
- tput-low / tput-sat: output token throughput, ours vs the simulator's truth for the same
  requests over the same span (first send -> last response end, both sides' own clocks).
- backends: every backend (native /generate, /v1/completions, /v1/chat/completions) at low load
  (Poisson at half the simulator's speed in req/s, 40 requests 256/256) and saturating load (128
  at once, 256/256, over the simulator's 64 running slots): mean TTFT (vs the simulator's socket:
  its first-token write - the request's kernel arrival; the engine-time figure beside it holds the
  simulator's own write delay), ITL (per request: (last - first token) / (tokens - 1), the truth's
  TPOT), E2E and output throughput, ours vs the truth, request by request; `ok` when within 1 %
  or 1 ms (throughput: 1 %, and the token totals equal). Our times never read below the truth's
  (tests/load/test_truth_under_stress.py, test_truth_invariants.py assert that per request).

Usage: .venv/bin/python benchmarks/load_accuracy.py [--speed 10] [--pin]
       [--scenarios ttft-256,poisson,tput-low,tput-sat,backends]
The host is shared and noisy: read the client-bound flag and the loop-lag column with each row.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from contextlib import AbstractContextManager
from typing import Any

import httpx

from sglang_sentinel.cli.bench import run_on_loop
from sglang_sentinel.load import ArrivalProcess, Backend, LoadSpec, RandomDataset, RunResult, run_load
from sglang_sentinel.load.stats import summarize
from sglang_sentinel_sim.testing import SimProcess, spawn_sim


def bench_sim(
    speed: float, extra: list[str], cpus: set[int] | None = None, env: dict[str, str] | None = None
) -> AbstractContextManager[SimProcess]:
    """The simulator these benchmarks measure against (killed on exit); ``env`` adds to its environment."""
    args = [
        "--speed",
        str(speed),
        "--lifetime",
        "900",
        "--disable-access-log",
        "--skip-server-warmup",
        *extra,
    ]
    return spawn_sim(*args, timeout=60, cpus=cpus, env=env)


def truth_by_rid(control_url: str, since: float) -> dict[str, dict[str, Any]]:
    data = httpx.get(control_url + "/requests", params={"since": since - 1}, timeout=30).json()
    return {r["rid"]: r for r in data["requests"]}


def pct(values: list[float], q: str) -> float:
    s = summarize(values)
    return float(getattr(s, q))


def run(spec: LoadSpec) -> RunResult:
    """On the event loop `sentinel bench` picks for the spec's arrival process."""
    return run_on_loop(run_load(spec), spec.arrival)


def scenario_ttft(base: str, control: str, speed: float) -> dict[str, Any]:
    spec = LoadSpec(
        base_url=base,
        dataset=RandomDataset(128, 64, 1.0),
        arrival=ArrivalProcess.CLOSED,
        max_concurrency=256,
        num_requests=768,
        warmup_requests=1,
        seed=3,
    )
    t = time.time()
    httpx.post(control + "/reset", timeout=30)  # restarts the simulator's loop-lag window
    res = run(spec)
    sim_lag = httpx.get(control + "/state", timeout=30).json()["loop_lag"]
    truth = truth_by_rid(control, t)
    steady: dict[str, list[float]] = {
        k: [] for k in ("added", "req", "resp", "model", "wait", "write", "e2e")
    }
    burst_added: list[float] = []
    kernel = 0
    for r in res.measured:
        tr = truth.get(r.rid)
        if not r.success or tr is None or r.ttft is None or r.latency is None:
            continue
        if tr.get("first_token_written_time") is None:
            continue
        sent = res.started_at + r.sent
        # The server's TTFT as its socket sees it: request bytes in -> first token bytes out.
        wire_ttft = tr["first_token_written_time"] - tr["arrival_time"]
        if r.index < 256:
            # The opening burst: 256 requests at once into a single-threaded HTTP server.
            burst_added.append(r.ttft - wire_ttft)
            continue
        kernel += tr["arrival_source"] == "kernel"
        steady["added"].append(r.ttft - wire_ttft)
        steady["req"].append(tr["arrival_time"] - sent)
        steady["resp"].append(sent + r.ttft - tr["first_token_written_time"])
        steady["model"].append(r.ttft - (tr["first_token_time"] - tr["arrival_time"]))
        steady["wait"].append(tr["handler_wait_s"])
        steady["write"].append(tr["first_token_written_time"] - tr["first_token_time"])
        steady["e2e"].append(r.latency - (tr["finish_time"] - tr["arrival_time"]))

    def ms(key: str, values: list[float] | None = None) -> str:
        v = steady[key] if values is None else values
        return f"{pct(v, 'median') * 1e3:.3f} / {pct(v, 'p99') * 1e3:.3f} / {max(v) * 1e3:.3f}"

    m = res.metrics
    return {
        "scenario": "ttft-256 (closed loop, 256 streams, steady state)",
        "matched (kernel-stamped arrivals)": f"{len(steady['added'])} ({kernel})",
        "client kernel receive stamps": res.kernel_timestamps,
        "client-added TTFT p50/p99/max ms": ms("added"),
        "  request leg (sim socket - our send)": ms("req"),
        "  response leg (our stamp - sim wrote)": ms("resp"),
        "same, opening burst p50/p99/max ms": ms("", burst_added),
        "server side, not ours:": "",
        "  sim HTTP queue p50/p99/max ms": ms("wait"),
        "  sim write delay p50/p99/max ms": ms("write"),
        "vs engine-time truth (holds write delay)": ms("model"),
        "E2E vs engine-time truth p50/p99/max ms": ms("e2e"),
        "client loop lag p99 ms": f"{m.loop_lag.p99 * 1e3:.2f}",
        "sim loop lag p99/max ms (last 10 s)": f"{sim_lag['p99_s'] * 1e3:.2f} / {sim_lag['max_s'] * 1e3:.2f}",
        "client bound": "; ".join(m.client_bound_reasons) if m.client_bound else "no",
    }


def scenario_poisson(base: str, control: str, speed: float, n: int, rate: float) -> dict[str, Any]:
    spec = LoadSpec(
        base_url=base,
        dataset=RandomDataset(32, 4, 1.0),
        arrival=ArrivalProcess.POISSON,
        request_rate=rate,
        num_requests=n,
        warmup_requests=1,
        seed=7,
        exact_rate=True,  # the client's accuracy, without the ±1/sqrt(N) of free draws
    )
    t = time.time()
    res = run(spec)
    truth = truth_by_rid(control, t)
    arrivals = sorted(truth[r.rid]["arrival_time"] for r in res.measured if r.rid in truth)
    server_rate = (len(arrivals) - 1) / (arrivals[-1] - arrivals[0]) if len(arrivals) > 1 else float("nan")
    m = res.metrics
    client_rate = m.achieved_request_rate or float("nan")
    return {
        "scenario": f"poisson {n} req @ {rate:g}/s",
        "matched": len(arrivals),
        "achieved rate client (err %)": f"{client_rate:.3f} ({(client_rate / rate - 1) * 100:+.2f}%)",
        "achieved rate at server (err %)": f"{server_rate:.3f} ({(server_rate / rate - 1) * 100:+.2f}%)",
        "schedule lag p50/p99/max ms": f"{m.schedule_lag.median * 1e3:.3f} / {m.schedule_lag.p99 * 1e3:.3f}"
        f" / {m.schedule_lag.max * 1e3:.3f}",
        "loop lag p99 ms": f"{m.loop_lag.p99 * 1e3:.2f}",
        "failed": m.failed,
        "client bound": "; ".join(m.client_bound_reasons) if m.client_bound else "no",
    }


def scenario_tput(base: str, control: str, speed: float, saturating: bool) -> dict[str, Any]:
    if saturating:
        spec = LoadSpec(base_url=base, dataset=RandomDataset(256, 256, 1.0), arrival=ArrivalProcess.BURST,
                        num_requests=128, warmup_requests=1, seed=11)  # fmt: skip
    else:
        spec = LoadSpec(base_url=base, dataset=RandomDataset(256, 256, 1.0), arrival=ArrivalProcess.POISSON,
                        request_rate=0.5 * speed, num_requests=40, warmup_requests=1, seed=11)  # fmt: skip
    t = time.time()
    res = run(spec)
    truth = truth_by_rid(control, t)
    ok = [r for r in res.measured if r.success and r.rid in truth]
    trs = [truth[r.rid] for r in ok]
    true_tokens = sum(tr["completion_tokens"] for tr in trs)
    true_span = max(tr["finish_time"] for tr in trs) - min(tr["arrival_time"] for tr in trs)
    true_tput = true_tokens / true_span
    m = res.metrics
    return {
        "scenario": "tput-sat (128 at once, 256/256)" if saturating else "tput-low (Poisson, 256/256)",
        "matched": len(ok),
        "output tok/s ours": f"{m.output_throughput:.1f}",
        "output tok/s truth": f"{true_tput:.1f}",
        "error %": f"{(m.output_throughput / true_tput - 1) * 100:+.2f}",
        "tokens ours/truth": f"{m.total_output_tokens}/{true_tokens}",
        "loop lag p99 ms": f"{m.loop_lag.p99 * 1e3:.2f}",
        "client bound": "; ".join(m.client_bound_reasons) if m.client_bound else "no",
    }


def _close(ours: float, truth: float, rel: float = 0.01, abs_s: float | None = 1e-3) -> bool:
    tol = rel * abs(truth)
    if abs_s is not None:
        tol = max(tol, abs_s)
    return abs(ours - truth) <= tol


def scenario_backend(
    base: str, control: str, speed: float, backend: Backend, saturating: bool
) -> dict[str, Any]:
    """Mean TTFT, ITL, E2E and output throughput of one backend vs the truth, same requests."""
    ds = RandomDataset(256, 256, 1.0)
    if saturating:
        spec = LoadSpec(base_url=base, backend=backend, dataset=ds, arrival=ArrivalProcess.BURST,
                        num_requests=128, warmup_requests=1, seed=11)  # fmt: skip
    else:
        spec = LoadSpec(base_url=base, backend=backend, dataset=ds, arrival=ArrivalProcess.POISSON,
                        request_rate=0.5 * speed, num_requests=40, warmup_requests=1, seed=11)  # fmt: skip
    t = time.time()
    res = run(spec)
    truth = truth_by_rid(control, t)
    ok = [r for r in res.measured if r.success and r.rid in truth]
    trs = [truth[r.rid] for r in ok]
    keys = ("TTFT", "TTFT (engine)", "ITL", "E2E")
    pairs: dict[str, tuple[list[float], list[float]]] = {k: ([], []) for k in keys}
    for r, tr in zip(ok, trs, strict=True):
        if (
            r.ttft is None
            or r.latency is None
            or tr["ttft_s"] is None
            or tr["first_token_written_time"] is None
        ):
            continue
        # TTFT's truth is the simulator's socket: the first token's bytes handed to the kernel.
        # The engine's stamp is the forward's scheduled end; the write follows when the loop
        # wakes (asyncio's epoll timeout is rounded up to whole ms), which is the server's time.
        pairs["TTFT"][0].append(r.ttft)
        pairs["TTFT"][1].append(tr["first_token_written_time"] - tr["arrival_time"])
        pairs["TTFT (engine)"][0].append(r.ttft)
        pairs["TTFT (engine)"][1].append(tr["ttft_s"])
        pairs["E2E"][0].append(r.latency)
        pairs["E2E"][1].append(tr["e2e_s"])
        n = tr["completion_tokens"]
        if n > 1 and len(r.chunk_times) > 1:
            pairs["ITL"][0].append((r.chunk_times[-1] - r.chunk_times[0]) / (n - 1))
            pairs["ITL"][1].append((tr["last_token_time"] - tr["first_token_time"]) / (n - 1))
    true_tokens = sum(tr["completion_tokens"] for tr in trs)
    true_span = max(tr["finish_time"] for tr in trs) - min(tr["arrival_time"] for tr in trs)
    true_tput = true_tokens / true_span
    m = res.metrics
    row: dict[str, Any] = {
        "scenario": f"{backend.value} {'saturating (128 at once)' if saturating else 'low (Poisson)'}",
        "matched": f"{len(ok)}/{len(res.measured)}",
        "tokens ours/truth": f"{m.total_output_tokens}/{true_tokens}",
    }
    verdicts = []
    for key, (mine, theirs) in pairs.items():
        a, b = sum(mine) / len(mine), sum(theirs) / len(theirs)
        good = _close(a, b)
        informational = key == "TTFT (engine)"
        if not informational:
            verdicts.append(good)
        row[f"mean {key} ms ours/truth (err)"] = (
            f"{a * 1e3:.3f} / {b * 1e3:.3f} ({(a - b) * 1e3:+.3f} ms, {(a / b - 1) * 100:+.2f} %)"
            f" {'(server write delay inside)' if informational else 'ok' if good else 'OFF'}"
        )
    good = _close(m.output_throughput, true_tput, abs_s=None)
    verdicts.append(good and m.total_output_tokens == true_tokens)
    row["output tok/s ours/truth (err)"] = (
        f"{m.output_throughput:.1f} / {true_tput:.1f} ({(m.output_throughput / true_tput - 1) * 100:+.2f} %)"
        f" {'ok' if good else 'OFF'}"
    )
    row["all within 1 % or 1 ms"] = "yes" if all(verdicts) else "NO"
    row["client bound"] = "; ".join(m.client_bound_reasons) if m.client_bound else "no"
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speed", type=float, default=10.0)
    ap.add_argument("--scenarios", default="ttft-256,poisson,tput-low,tput-sat,backends")
    ap.add_argument("--poisson-requests", type=int, default=2000)
    ap.add_argument("--poisson-rate", type=float, default=100.0)
    ap.add_argument(
        "--pin",
        action="store_true",
        help="run the simulator on CPU 0 and this client on CPU 1, so neither queues behind the other",
    )
    args = ap.parse_args()
    wanted = args.scenarios.split(",")
    if args.pin:
        os.sched_setaffinity(0, {1})
    rows: list[dict[str, Any]] = []
    with bench_sim(args.speed, [], {0} if args.pin else None) as sim:
        base, control, profile = sim.base_url, sim.control_url, sim.info["profile"]
        for name in wanted:
            if name == "ttft-256":
                rows.append(scenario_ttft(base, control, args.speed))
            elif name == "poisson":
                rows.append(
                    scenario_poisson(base, control, args.speed, args.poisson_requests, args.poisson_rate)
                )
            elif name in ("tput-low", "tput-sat"):
                rows.append(scenario_tput(base, control, args.speed, name == "tput-sat"))
            elif name == "backends":
                # Its own simulator, 64 running slots: 128 at once saturates it (requests queue).
                with bench_sim(args.speed, ["--max-running-requests", "64"], {0} if args.pin else None) as s2:
                    for backend in (Backend.SGLANG, Backend.OPENAI_COMPLETIONS, Backend.OPENAI_CHAT):
                        for saturating in (False, True):
                            rows.append(
                                scenario_backend(s2.base_url, s2.control_url, args.speed, backend, saturating)
                            )
                            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
                continue
            else:
                raise SystemExit(f"unknown scenario {name}")
            print(json.dumps(rows[-1]), file=sys.stderr, flush=True)
    print(f"\nsentinel.load vs simulator ground truth (speed {args.speed:g}, profile {profile})")
    for row in rows:
        print("-" * 72)
        for k, v in row.items():
            print(f"{k:<36} {v}")
    print("-" * 72)


if __name__ == "__main__":
    main()
