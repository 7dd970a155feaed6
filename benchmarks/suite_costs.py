"""The CPU the test suite's two per-process mechanisms save, measured side by side in one run: a
simulator started as ``python -m sglang_sentinel_sim`` against one forked from the suite's zygote
(tests/support/sim_zygote.py), and an httpx client that builds its own TLS context against one
given sentinel's shared context (``sglang_sentinel.httpread.tls_context``).

    .venv/bin/python benchmarks/suite_costs.py                 # 20 simulators each way, 200 clients
    .venv/bin/python benchmarks/suite_costs.py --sims 40 --clients 500

CPU seconds (user + system, ``getrusage`` of this process and of its reaped children: a forked
simulator is reaped by the zygote, the zygote by this process when it closes, so its own imports
count) per simulator started and ready, and per client made and closed. The pytest phase of
``bash scripts/test`` is CPU-bound on a 2-core box: these are what its wall time is made of. A
noisy box moves both columns: compare the ratio of one run.
"""

from __future__ import annotations

import argparse
import resource
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests"))

from sglang_sentinel.httpread import tls_context  # noqa: E402
from sglang_sentinel_sim.testing import Spawner, start_sim  # noqa: E402
from support.sim_zygote import Zygote  # noqa: E402


def _cpu() -> float:
    total = 0.0
    for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN):
        r = resource.getrusage(who)
        total += r.ru_utime + r.ru_stime
    return total


def _sims(n: int, spawner: Spawner | None, log_dir: Path) -> None:
    for i in range(n):
        sim = start_sim(
            "--speed", "100", "--lifetime", "120", log_dir=log_dir, name=f"s{i}", cwd=REPO, spawner=spawner
        )
        sim.kill()


def _per_start(n: int, spawner: Callable[[], tuple[Spawner | None, Callable[[], None]]]) -> float:
    with tempfile.TemporaryDirectory(prefix="suite-costs-") as tmp:
        cpu0 = _cpu()
        spawn, close = spawner()
        _sims(n, spawn, Path(tmp))
        close()
        return (_cpu() - cpu0) / n


def _per_client(n: int, make: Callable[[], httpx.Client]) -> float:
    cpu0 = _cpu()
    for _ in range(n):
        make().close()
    return (_cpu() - cpu0) / n


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sims", type=int, default=20, help="simulators started each way (default 20)")
    parser.add_argument("--clients", type=int, default=200, help="httpx clients made each way (default 200)")
    args = parser.parse_args()
    if args.sims < 1 or args.clients < 1:
        parser.error("--sims and --clients must be at least 1")

    def popen() -> tuple[Spawner | None, Callable[[], None]]:
        return None, lambda: None

    def zygote() -> tuple[Spawner | None, Callable[[], None]]:
        z = Zygote()
        return z.spawn, z.close

    t0 = time.monotonic()
    fresh = _per_start(args.sims, popen)
    forked = _per_start(args.sims, zygote)
    own = _per_client(args.clients, httpx.Client)
    shared = _per_client(args.clients, lambda: httpx.Client(verify=tls_context()))
    print(f"{'':34} {'CPU s each':>10} {'ratio':>7}")
    print(f"{'simulator, python -m':34} {fresh:10.3f}")
    print(f"{'simulator, forked from the zygote':34} {forked:10.3f} {forked / fresh:7.2f}")
    print(f"{'httpx client, its own TLS context':34} {own:10.4f}")
    print(f"{'httpx client, tls_context()':34} {shared:10.4f} {shared / own:7.2f}")
    print(
        f"({args.sims} simulators each way, {args.clients} clients each way, {time.monotonic() - t0:.0f} s)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
