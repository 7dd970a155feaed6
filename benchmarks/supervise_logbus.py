"""How fast the supervisor drains a child's output: lines/s through the log bus, per stage.

    .venv/bin/python benchmarks/supervise_logbus.py [--lines 200000]

A child process writes SGLang-shaped lines (decode/prefill batch lines, uvicorn access lines,
start-up milestones, one very long ``server_args=`` line) as fast as it can into a pipe; the
parent reads them with the supervisor's :func:`pump_lines` into a :class:`LogBus` configured
with more and more of what the daemon uses: nothing, the size-rotated file, a listener that only
counts, a listener that runs ``sglang_sentinel.sglang.logparse.parse_line`` on every line (the log collector).

Why it matters: if the parent reads slower than SGLang writes, the pipe fills and the server
blocks on its own logging. A busy 8-GPU server prints well under 1000 lines/s (one access line
per request, a Decode line every 40 steps); the table shows the headroom. The machine is shared
and noisy: compare the rows of one run (the ratio column), not absolute numbers across runs.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from pathlib import Path

from sglang_sentinel.sglang.logparse import parse_line
from sglang_sentinel.supervise.logbus import LogBus, LogLine, pump_lines

SAMPLE = [
    "[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, "
    "cuda graph: False, gen throughput (token/s): 144.95, #queue-req: 0",
    "[2026-04-05 20:02:51] Prefill batch, #new-seq: 1, #new-token: 158, #cached-token: 0, token usage: 0.08, "
    "#running-req: 31, #queue-req: 0, input throughput (token/s): 559.53, cuda graph: False",
    '[2026-04-05 20:02:51] INFO:     127.0.0.1:47108 - "POST /generate HTTP/1.1" 200 OK',
    '[2026-04-05 20:02:52] INFO:     127.0.0.1:47110 - "GET /metrics HTTP/1.1" 200 OK',
    "[2026-04-05 20:02:53 TP3] Load weight end. elapsed=36.12 s, type=GlmMoeDsa, avail mem=38.2 GB",
]
LONG = (
    "[2026-04-05 20:00:00] server_args=ServerArgs(" + ", ".join(f"field_{i}=None" for i in range(4000)) + ")"
)

WRITER = r"""
import sys
lines = open(sys.argv[1]).read().splitlines()
n = int(sys.argv[2])
out = sys.stdout
block = "\n".join(lines) + "\n"
per = len(lines)
for _ in range(n // per):
    out.write(block)
out.flush()
"""


async def run(variant: str, sample_file: Path, n: int, tmp: Path) -> tuple[int, float]:
    log_file = tmp / f"{variant}.log" if variant != "bus" else None
    bus = LogBus(log_file, max_bytes=16 << 20, backups=2, tail_lines=400)
    counted = [0]
    if variant == "bus+file+listener":

        def count_line(line: LogLine) -> None:
            counted[0] += 1

        bus.add_listener(count_line)
    if variant == "bus+file+parse":

        def parse(line: LogLine) -> None:
            parse_line(line.text)

        bus.add_listener(parse)
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-c", WRITER, str(sample_file), str(n), stdout=asyncio.subprocess.PIPE, limit=1 << 20
    )
    assert proc.stdout is not None
    t0 = time.perf_counter()
    if variant == "raw readline":
        count = 0
        while await proc.stdout.readline():
            count += 1
    else:
        await pump_lines(proc.stdout, bus, "child")
        count = bus.lines_total
    elapsed = time.perf_counter() - t0
    await proc.wait()
    bus.close()
    if variant == "bus+file+listener":
        assert counted[0] == count, "the listener saw every line"
    return count, elapsed


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lines", type=int, default=200_000)
    args = ap.parse_args()
    variants = ["raw readline", "bus", "bus+file", "bus+file+listener", "bus+file+parse"]
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        sample_file = tmp / "sample.txt"
        # One long line per block keeps the over-long-line path in the measurement.
        sample_file.write_text("\n".join(SAMPLE * 40 + [LONG]) + "\n")
        rows = []
        for v in variants:
            count, elapsed = await run(v, sample_file, args.lines, tmp)
            rows.append((v, count, elapsed))
    base = rows[0][1] / rows[0][2]
    print(f"{'variant':<22} {'lines':>9} {'seconds':>8} {'lines/s':>10} {'us/line':>8} {'vs raw':>7}")
    for v, count, elapsed in rows:
        rate = count / elapsed
        print(f"{v:<22} {count:>9} {elapsed:>8.2f} {rate:>10.0f} {1e6 / rate:>8.1f} {rate / base:>7.2f}")


if __name__ == "__main__":
    asyncio.run(main())
