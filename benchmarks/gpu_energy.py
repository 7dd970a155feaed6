"""GPU energy from the counters (what runs record) against mean power x time, on a real GPU.

On a GPU machine (the lent H200), in one command:

    PYTHONPATH=daemon python3 benchmarks/gpu_energy.py --out "$OUT"

It reads the energy counter through sentinel's own code (``GpuPoller.read_energy``, the call a
run makes at its two ends) and the power through the collector's per-GPU read
(``read_device``'s ``power_watts``, which is ``nvmlDeviceGetPowerUsage``) every ``--interval``
seconds, over three windows on GPU 0:

1. idle: no load (the baseline a run's marginal energy is taken against);
2. steady: PyTorch bf16 matmuls back to back, the window opening ``--settle`` seconds into
   the load so that both ends are at a steady draw;
3. varying: matmuls for 0.25 s, nothing for 0.25 s, over and over: a draw that swings every
   read, where power x time needs many reads and the counter none.

For each it prints counter energy, mean power x time and their difference; the steady window
must agree within ``--tolerance`` (2 %): the check of the figure that runs record. The edges of
the whole load (power ramps up and down) are reported but not judged: a power reading is the
driver's average over its own window, so at a step the two tell apart by design.

``--fake`` runs the same code on the fake NVML (no GPU, no torch), to check the script.
Writes ``gpu_energy.json`` to ``--out``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

from sglang_sentinel.collect.gpu import FakeNvml, GpuPoller, read_device
from sglang_sentinel.collect.gpu.energy import energy_between


class PowerSampler(threading.Thread):
    """Reads the collector's power field of GPU 0 every ``interval`` s while running."""

    def __init__(self, poller: GpuPoller, interval: float) -> None:
        super().__init__(name="power-sampler", daemon=True)
        self.poller = poller
        self.interval = interval
        self.samples: list[tuple[float, float]] = []
        self.stop_event = threading.Event()

    def run(self) -> None:
        device = self.poller._devices[0]
        nvml = self.poller._nvml
        while not self.stop_event.is_set():
            started = time.monotonic()
            r = read_device(nvml, device.handle, device.identity, pcie_throughput=False, processes=False)
            if r.power_watts is not None:
                self.samples.append((time.time(), r.power_watts))
            self.stop_event.wait(max(0.0, self.interval - (time.monotonic() - started)))

    def mean_between(self, start: float, end: float) -> tuple[float, int]:
        inside = [w for t, w in self.samples if start <= t <= end]
        return (statistics.fmean(inside) if inside else float("nan")), len(inside)


class Load:
    """PyTorch matmuls on GPU 0 in a thread: ``duty`` of each 0.5 s period busy (1.0: always)."""

    def __init__(self, duty: float = 1.0, size: int = 8192) -> None:
        import torch  # type: ignore[import-not-found]  # on the GPU machine only

        self.torch = torch
        self.duty = duty
        self.a = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        self.b = torch.randn(size, size, device="cuda", dtype=torch.bfloat16)
        self.stop_event = threading.Event()
        self.products = 0
        self.thread = threading.Thread(target=self._run, name="load", daemon=True)

    def _run(self) -> None:
        torch = self.torch
        period = 0.5
        while not self.stop_event.is_set():
            t0 = time.monotonic()
            while time.monotonic() - t0 < period * self.duty and not self.stop_event.is_set():
                for _ in range(4):
                    self.a @ self.b
                torch.cuda.synchronize()
                self.products += 4
            rest = period * (1 - self.duty) - (time.monotonic() - t0 - period * self.duty)
            if self.duty < 1.0 and rest > 0:
                self.stop_event.wait(rest)

    def __enter__(self) -> Load:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        self.thread.join()
        self.torch.cuda.synchronize()


def window(poller: GpuPoller, sampler: PowerSampler, seconds: float, name: str) -> dict[str, Any]:
    read_t0 = time.perf_counter()
    start = poller.read_energy(("0",))
    read_cost = time.perf_counter() - read_t0
    time.sleep(seconds)
    end = poller.read_energy(("0",))
    delta = energy_between(start, end)
    mean_w, n = sampler.mean_between(start.timestamp, end.timestamp)
    power_x_time = mean_w * delta.seconds
    diff = (delta.joules - power_x_time) / power_x_time if delta.joules is not None and power_x_time else None
    row = {
        "window": name,
        "seconds": round(delta.seconds, 3),
        "counter_joules": delta.joules,
        "counter_mean_watts": delta.mean_power_watts,
        "power_samples": n,
        "sampled_mean_watts": mean_w,
        "power_x_time_joules": power_x_time,
        "difference": diff,
        "reason": delta.reason,
        "energy_read_ms": read_cost * 1e3,
    }
    joules = delta.joules if delta.joules is not None else float("nan")
    pct = diff * 100 if diff is not None else float("nan")
    print(
        f"| {name} | {delta.seconds:.2f} | {joules:.1f} | {power_x_time:.1f} | {mean_w:.1f} | {n} "
        f"| {pct:+.2f} % |",
        flush=True,
    )
    return row


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, default=Path("."))
    parser.add_argument("--idle-seconds", type=float, default=10.0)
    parser.add_argument("--steady-seconds", type=float, default=30.0)
    parser.add_argument("--varying-seconds", type=float, default=20.0)
    parser.add_argument("--settle", type=float, default=5.0)
    parser.add_argument("--interval", type=float, default=0.02, help="power read interval, s")
    parser.add_argument("--tolerance", type=float, default=0.02)
    parser.add_argument("--fake", action="store_true", help="fake NVML at a steady 651.5 W, no load")
    args = parser.parse_args()

    if args.fake:
        fake = FakeNvml(devices=1, sample="busy")
        fake.energy_watts = 651.508  # the counter runs at the sample's power: both must agree
        factory: Any = lambda: fake  # noqa: E731
    else:
        import pynvml

        factory = lambda: pynvml  # noqa: E731
    poller = GpuPoller(factory, interval=1.0, timeout=2.0, pcie_throughput=False, xid_events=False)
    snap = poller.run_cycle()
    if snap.status != "ok":
        print(f"NVML unusable: {snap.status} {snap.detail}", file=sys.stderr)
        return 2
    ident = snap.devices[0].identity
    print(f"GPU 0: {ident.name} {ident.uuid}, driver {snap.driver_version}")
    sampler = PowerSampler(poller, args.interval)
    sampler.start()
    rows = []
    print("| window | s | counter J | mean power x time J | mean W | reads | difference |")
    print("|---|---|---|---|---|---|---|")
    rows.append(window(poller, sampler, args.idle_seconds, "idle"))
    products = 0
    if args.fake:
        rows.append(window(poller, sampler, args.steady_seconds, "steady"))
    else:
        edge_start = poller.read_energy(("0",))
        with Load(1.0) as load:
            time.sleep(args.settle)
            rows.append(window(poller, sampler, args.steady_seconds, "steady"))
            products = load.products
        time.sleep(2.0)
        edge_end = poller.read_energy(("0",))
        delta = energy_between(edge_start, edge_end)
        mean_w, n = sampler.mean_between(edge_start.timestamp, edge_end.timestamp)
        edges = {
            "window": "whole_load_with_edges",
            "seconds": delta.seconds,
            "counter_joules": delta.joules,
            "power_x_time_joules": mean_w * delta.seconds,
            "difference": (delta.joules - mean_w * delta.seconds) / (mean_w * delta.seconds)
            if delta.joules is not None
            else None,
            "power_samples": n,
        }
        print(f"whole load with its edges: {json.dumps(edges)}")
        rows.append(edges)
        with Load(0.5):
            time.sleep(1.0)
            rows.append(window(poller, sampler, args.varying_seconds, "varying"))
    sampler.stop_event.set()
    sampler.join()
    poller.stop(2.0)
    steady = next(r for r in rows if r["window"] == "steady")
    ok = steady["difference"] is not None and abs(steady["difference"]) <= args.tolerance
    result = {
        "gpu": ident.name,
        "driver": snap.driver_version,
        "interval_s": args.interval,
        "matmuls_8192_bf16": products,
        "windows": rows,
        "tolerance": args.tolerance,
        "steady_within_tolerance": ok,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "gpu_energy.json").write_text(json.dumps(result, indent=2) + "\n")
    print(
        f"steady window: counter {steady['counter_joules']:.1f} J vs mean power x time "
        f"{steady['power_x_time_joules']:.1f} J: {steady['difference'] * 100:+.2f} % "
        f"({'within' if ok else 'OUTSIDE'} {args.tolerance * 100:g} %)"
    )
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
