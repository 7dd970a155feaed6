"""How many concurrent streams and SSE events per second does one simulator process sustain?

The simulator is one asyncio process (one core). This starts ``sentinel sim`` with a fast
profile at a high ``--speed`` (so that demand exceeds what it can serve), drives it from separate
client processes with a minimal raw-socket SSE reader (so that the client is not what is
measured), and prints per concurrency level: SSE events/s received, tokens/s, tokens per event
(> 1 once the engine coalesces steps to keep up), the simulator's CPU use (from /proc), events
per simulator CPU-second (its one-core capacity), and the engine's worst lag behind schedule.

    .venv/bin/python benchmarks/sim_throughput.py [--streams 32 128 512] [--seconds 6]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import time
from pathlib import Path
from typing import Any

from sglang_sentinel_sim.testing import spawn_sim

_CLK_TCK = os.sysconf("SC_CLK_TCK")


def _cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK  # utime + stime


async def _stream_forever(host: str, port: int, body: bytes, stop_at: float, counts: list[int]) -> None:
    request = (
        f"POST /generate HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body
    while time.monotonic() < stop_at:
        reader, writer = await asyncio.open_connection(host, port)
        writer.write(request)
        try:
            while True:
                chunk = await reader.read(65536)
                if not chunk:
                    break
                counts[0] += chunk.count(b"data: ")
                if b"data: [DONE]" in chunk:
                    break
        finally:
            writer.close()


def _client(host: str, port: int, streams: int, seconds: float, max_tokens: int, out: Any) -> None:
    body = json.dumps(
        {
            "input_ids": [1, 2, 3, 4],
            "sampling_params": {"max_new_tokens": max_tokens, "ignore_eos": True},
            "stream": True,
        }
    ).encode()
    counts = [0]

    async def main() -> None:
        stop_at = time.monotonic() + seconds
        await asyncio.gather(*(_stream_forever(host, port, body, stop_at, counts) for _ in range(streams)))

    asyncio.run(main())
    out.put(counts[0])


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--streams", type=int, nargs="+", default=[32, 128, 512])
    parser.add_argument("--seconds", type=float, default=6.0)
    parser.add_argument("--speed", type=float, default=50.0)
    parser.add_argument("--profile", default="tiny-llama-1x-h200")
    parser.add_argument("--clients", type=int, default=2, help="client processes")
    parser.add_argument("--max-tokens", type=int, default=256)
    args = parser.parse_args()
    import httpx

    print(
        f"profile {args.profile}, speed {args.speed:g}, {args.seconds:g} s per level, "
        f"{args.clients} client processes, {args.max_tokens}-token streams"
    )
    from sglang_sentinel_sim.profiles import get_profile

    prof = get_profile(args.profile)
    print(
        f"{'streams':>8} {'demand ev/s':>11} {'events/s':>10} {'tokens/s':>10} {'tok/event':>9} "
        f"{'sim CPU':>8} "
        f"{'events/CPU-s':>13} {'max lag s':>9}"
    )
    sim_args = ("--speed", str(args.speed), "--profile", args.profile, "--disable-access-log",
                "--lifetime", "900", "--enable-metrics")  # fmt: skip
    for streams in args.streams:
        with spawn_sim(*sim_args, timeout=120) as sim:
            proc, info = sim.process, sim.info
            host, port = sim.host, sim.port
            per_client = max(1, streams // args.clients)
            queue: Any = mp.Queue()
            cpu0 = _cpu_seconds(proc.pid)
            tokens0 = httpx.get(info["control_url"] + "/state").json()["engine"]["generated_tokens"]
            t0 = time.monotonic()
            workers = [
                mp.Process(
                    target=_client, args=(host, port, per_client, args.seconds, args.max_tokens, queue)
                )
                for _ in range(args.clients)
            ]
            for w in workers:
                w.start()
            events = sum(queue.get() for _ in workers)
            for w in workers:
                w.join()
            elapsed = time.monotonic() - t0
            cpu = _cpu_seconds(proc.pid) - cpu0
            state = httpx.get(info["control_url"] + "/state").json()["engine"]
            tokens = state["generated_tokens"] - tokens0
            eps = events / elapsed
            n = per_client * args.clients
            # What the schedule asks for: one event per stream per decode step.
            step = (
                prof.decode_base_s
                + prof.decode_per_req_s * n
                + prof.decode_per_kv_token_s * n * (4 + args.max_tokens / 2)
            ) / args.speed
            print(
                f"{n:>8} {n / step:>11.0f} {eps:>10.0f} {tokens / elapsed:>10.0f} "
                f"{tokens / max(events, 1):>9.2f} {cpu / elapsed:>7.0%} {events / max(cpu, 1e-9):>13.0f} "
                f"{state['max_lag_s']:>9.3f}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
