"""How fast `sglang_sentinel.sglang.logparse.parse_line` is, per kind of SGLang log line.

    .venv/bin/python benchmarks/logparse_speed.py

It runs on every line the supervised server prints, so it must stay far below the server's log
rate (a busy SGLang prints a few lines per second: one Decode line per 40 steps, one Prefill line
per batch, one access line per request). The table shows µs per line (best of several repeats)
and, to read through machine noise, the ratio to ``len(line.split(", "))`` on the same line — the
cheapest thing any parser must at least do.
"""

from __future__ import annotations

import functools
import timeit
from collections.abc import Callable

from sglang_sentinel.sglang.logparse import parse_line

LINES = {
    "decode (v0.5.9, TP0)": "[2026-04-08 14:05:21 TP0] Decode batch, #running-req: 5, #token: 20800, "
    "token usage: 0.29, cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0",
    "decode (spec, DP/EP)": "[2026-07-21 15:00:13 DP0 TP0 EP0] Decode batch, #running-req: 24, "
    "#token: 233600, token usage: 0.66, accept len: 3.05, accept rate: 0.68, npu graph: True, "
    "gen throughput (token/s): 239.06, #queue-req: 2",
    "prefill (v0.5.9)": "[2026-05-15 12:50:14] Prefill batch, #new-seq: 1, #new-token: 2048, "
    "#cached-token: 0, token usage: 0.01, #running-req: 0, #queue-req: 0, "
    "input throughput (token/s): 46.36, cuda graph: False",
    "uvicorn access": '[2026-05-07 13:40:40] INFO:     127.0.0.1:47108 - "POST /generate HTTP/1.1" 200 OK',
    "ready milestone": "[2026-11-30 01:00:00] The server is fired up and ready to roll!",
    "traceback frame": '  File "/usr/lib/python3/dist-packages/sglang/srt/managers/scheduler.py", '
    "line 2243, in run",
    "CUDA OOM": "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
    "capacity of 94.97 GiB of which 1.10 GiB is free.",
    "unrelated warning": "[2026-11-30 01:00:00] WARNING: The tokenizer chat template was overridden "
    "by a file.",
}


def best_us(fn: Callable[[], object], number: int = 20000, repeat: int = 5) -> float:
    return min(timeit.repeat(fn, number=number, repeat=repeat)) / number * 1e6


def main() -> None:
    print(f"{'line kind':<24} {'parsed as':<16} {'µs/line':>8} {'lines/s':>10} {'× split':>8}")
    for name, line in LINES.items():
        event = parse_line(line)
        parse = best_us(functools.partial(parse_line, line))
        split = best_us(functools.partial(str.split, line, ", "))
        kind = type(event).__name__ if event is not None else "None"
        print(f"{name:<24} {kind:<16} {parse:>8.1f} {1e6 / parse:>10,.0f} {parse / split:>8.1f}")


if __name__ == "__main__":
    main()
