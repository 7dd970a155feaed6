"""Client CPU per streamed token: our load engine vs SGLang's bench_serving, side by side on one simulator.

Both clients run the same workload against the same `sentinel sim` (native /generate, token
ids, fixed lengths, ignore_eos), alternating, `--repeat` times. CPU = user + system seconds of
the benchmark phase: for bench_serving the `asyncio.run(benchmark(...))` call (warm-up, run,
its metrics; imports, tokenizer load and dataset building excluded: `peer_shim.py`); for us
`run_load` (warm-up, connection pre-warm, run, metrics). The figure is streamed output tokens
per CPU-second (higher is better); the ratio is ours / bench_serving's within the same round
(ours on uvloop, as `sentinel bench` runs; the last column is ours on asyncio's default loop).

Needs the peer: `bash benchmarks/peer_setup.sh` (builds benchmarks/.peer/).
Usage: .venv/bin/python benchmarks/load_efficiency.py [--speed 20] [--num-prompts 256]
       [--input-len 256] [--output-len 256] [--max-concurrency 64] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import resource
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load_accuracy import bench_sim
from peer_cpu import PeerNotReady, run_bench_serving
from sglang_sentinel.load import ArrivalProcess, LoadSpec, RandomDataset, run_load
from sglang_sentinel.load.stats import summarize


def ours(base_url: str, args: argparse.Namespace, use_uvloop: bool) -> tuple[int, float, float, int]:
    spec = LoadSpec(
        base_url=base_url,
        dataset=RandomDataset(args.input_len, args.output_len, 1.0),
        arrival=ArrivalProcess.BURST,
        max_concurrency=args.max_concurrency,
        num_requests=args.num_prompts,
        warmup_requests=1,
        seed=1,
    )
    r0 = resource.getrusage(resource.RUSAGE_SELF)
    w0 = time.perf_counter()
    if use_uvloop:
        import uvloop

        res = uvloop.run(run_load(spec))
    else:
        res = asyncio.run(run_load(spec))
    r1 = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)
    return res.metrics.total_output_tokens, cpu, time.perf_counter() - w0, res.metrics.completed


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speed", type=float, default=20.0)
    ap.add_argument("--num-prompts", type=int, default=256)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=256)
    ap.add_argument("--max-concurrency", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    rows = []
    with bench_sim(args.speed, []) as sim:
        info = sim.info
        for i in range(args.repeat):
            try:
                peer = run_bench_serving(
                    info["base_url"],
                    backend="sglang",
                    num_prompts=args.num_prompts,
                    input_len=args.input_len,
                    output_len=args.output_len,
                    range_ratio=1.0,
                    max_concurrency=args.max_concurrency,
                    tokenize_prompt=True,
                )
            except PeerNotReady as exc:
                raise SystemExit(f"{exc}") from None
            if not peer.benchmark_cpu_s or not peer.completed:
                raise SystemExit(f"bench_serving failed (rc {peer.returncode}):\n{peer.stderr[-2000:]}")
            tokens, cpu, wall, done = ours(info["base_url"], args, use_uvloop=True)
            a_tokens, a_cpu, _, _ = ours(info["base_url"], args, use_uvloop=False)
            row: dict[str, Any] = {
                "round": i + 1,
                "peer_tokens": peer.output_tokens,
                "peer_cpu": peer.benchmark_cpu_s,
                "peer_wall": peer.benchmark_wall_s or 0.0,
                "peer_tps": peer.output_tokens / peer.benchmark_cpu_s,
                "our_tokens": tokens,
                "our_cpu": cpu,
                "our_wall": wall,
                "our_tps": tokens / cpu,
                "completed": f"{peer.completed}/{done}",
                "asyncio_tps": a_tokens / a_cpu,
            }
            row["ratio"] = row["our_tps"] / row["peer_tps"]
            rows.append(row)
            print(row, file=sys.stderr, flush=True)
    print(
        f"\nStreamed output tokens per client CPU-second, native /generate, {args.num_prompts} prompts "
        f"{args.input_len}/{args.output_len}, max concurrency {args.max_concurrency}, "
        f"sim speed {args.speed:g}"
    )
    hdr = f"{'round':>5} {'done b/s':>9} {'bench_serving tok':>17} {'CPU s':>7} {'tok/CPU-s':>10} "
    hdr += f"{'sentinel tok':>12} {'CPU s':>7} {'tok/CPU-s':>10} {'ratio':>6} {'asyncio loop':>13}"
    print(hdr)
    for r in rows:
        print(
            f"{r['round']:>5} {r['completed']:>9} {r['peer_tokens']:>17} {r['peer_cpu']:>7.2f} "
            f"{r['peer_tps']:>10,.0f} "
            f"{r['our_tokens']:>12} {r['our_cpu']:>7.2f} {r['our_tps']:>10,.0f} {r['ratio']:>5.2f}x"
            f" {r['asyncio_tps'] / r['peer_tps']:>12.2f}x"
        )
    ratios = summarize([r["ratio"] for r in rows])
    print(
        f"ratio median {ratios.median:.2f}x (min {min(r['ratio'] for r in rows):.2f}x, max {ratios.max:.2f}x)"
    )


if __name__ == "__main__":
    main()
