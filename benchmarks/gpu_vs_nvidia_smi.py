"""Run sentinel's GPU collector on real GPUs and compare every series with ``nvidia-smi``.

On a GPU machine (the lent H200s), in one command:

    PYTHONPATH=daemon python3 benchmarks/gpu_vs_nvidia_smi.py --load-seconds 40 --out "$OUT"

Phases:
1. idle: a few collector cycles, then ``nvidia-smi --query-gpu`` right after the last one;
2. load: a PyTorch matmul + host-to-device copy loop on GPU 0 (other GPUs stay idle), the
   collector's background thread running at a 1 s interval, then the same comparison;
3. parallelism: the same full per-GPU read done one GPU after another in one thread, then all GPUs
   at once from one thread per GPU, to show whether NVML serialises per-GPU workers;
4. per-call NVML timings (median over cycles), /metrics render time from real snapshots.

Prints Markdown tables and writes ``gpu_vs_nvidia_smi.{md,json}`` to ``--out``. Without a GPU,
``--fake N`` runs the same code on the fake backend (sample latencies), to check the script.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.collect.gpu import FakeNvml, GpuCollector, GpuPoller, read_device
from sglang_sentinel.collect.source import CollectionFailed

# nvidia-smi field → (our series, factor from our value to nvidia-smi's unit, tolerance kind)
FIELDS: list[tuple[str, str | None, float, str]] = [
    ("index", None, 1, "label"),
    ("uuid", None, 1, "label"),
    ("name", None, 1, "label"),
    ("pci.bus_id", None, 1, "label"),
    ("utilization.gpu", "sentinel_gpu_utilization_ratio", 100, "util"),
    ("utilization.memory", "sentinel_gpu_memory_utilization_ratio", 100, "util"),
    ("memory.used", "sentinel_gpu_memory_used_bytes", 1 / 2**20, "mem"),
    ("memory.total", "sentinel_gpu_memory_total_bytes", 1 / 2**20, "exact1"),
    ("memory.reserved", "sentinel_gpu_memory_reserved_bytes", 1 / 2**20, "exact1"),
    ("power.draw", "sentinel_gpu_power_watts", 1, "power"),
    ("power.draw.instant", "sentinel_gpu_power_watts", 1, "power"),
    ("enforced.power.limit", "sentinel_gpu_power_limit_watts", 1, "exact1"),
    ("temperature.gpu", "sentinel_gpu_temperature_celsius", 1, "temp"),
    ("fan.speed", "sentinel_gpu_fan_speed_ratio", 100, "util"),
    ("clocks.sm", "sentinel_gpu_sm_clock_hertz", 1e-6, "clock"),
    ("clocks.mem", "sentinel_gpu_memory_clock_hertz", 1e-6, "clock"),
    ("clocks.max.sm", "sentinel_gpu_sm_clock_max_hertz", 1e-6, "exact1"),
    ("pstate", "sentinel_gpu_performance_state", 1, "exact"),
    ("pcie.link.gen.current", "sentinel_gpu_pcie_link_generation", 1, "exact"),
    ("pcie.link.gen.max", "sentinel_gpu_pcie_link_max_generation", 1, "exact"),
    ("pcie.link.width.current", "sentinel_gpu_pcie_link_width", 1, "exact"),
    ("pcie.link.width.max", "sentinel_gpu_pcie_link_max_width", 1, "exact"),
    ("ecc.mode.current", "sentinel_gpu_ecc_enabled", 1, "exact"),
    ("ecc.errors.corrected.volatile.total", "sentinel_gpu_ecc_corrected_errors_total", 1, "exact"),
    ("ecc.errors.uncorrected.volatile.total", "sentinel_gpu_ecc_uncorrected_errors_total", 1, "exact"),
    ("clocks_event_reasons.active", "clock_events", 1, "bits"),
]
REASON_BITS = {
    "gpu_idle": 0x1,
    "clocks_setting": 0x2,
    "power_cap": 0x4,
    "hw_slowdown": 0x8,
    "sync_boost": 0x10,
    "sw_thermal": 0x20,
    "hw_thermal": 0x40,
    "hw_power_brake": 0x80,
    "display_clocks": 0x100,
}
TOLERANCE = {"util": 15.0, "mem": 0.02, "power": 0.25, "temp": 2.0, "clock": 0.15}

LOAD_SCRIPT = r"""
import os, sys, time, torch
dev = torch.device("cuda:0")
end = time.time() + float(sys.argv[1])
a = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
b = torch.randn(8192, 8192, device=dev, dtype=torch.bfloat16)
host = torch.empty(512 * 2**20, dtype=torch.uint8).pin_memory()
dst = torch.empty_like(host, device=dev)
copy = torch.cuda.Stream()
print("load running", flush=True)
while time.time() < end:
    with torch.cuda.stream(copy):
        dst.copy_(host, non_blocking=True)
    for _ in range(20):
        c = a @ b
    torch.cuda.synchronize()
"""


def nvidia_smi(fields: list[str]) -> tuple[list[str], list[list[str]], float]:
    """Query what this driver supports of ``fields``; returns (fields, rows, seconds)."""
    t0 = time.perf_counter()
    proc = subprocess.run(
        ["nvidia-smi", f"--query-gpu={','.join(fields)}", "--format=csv,noheader,nounits"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    took = time.perf_counter() - t0
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout + proc.stderr)
    rows = [[c.strip() for c in line.split(",")] for line in proc.stdout.strip().splitlines()]
    return fields, rows, took


def supported_fields() -> list[str]:
    names = [f[0] for f in FIELDS]
    ok = []
    for name in names:
        try:
            nvidia_smi([name])
            ok.append(name)
        except RuntimeError:
            print(f"nvidia-smi: field {name} not supported by this driver", flush=True)
    return ok


def scrape(collector: GpuCollector) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    class One:
        def collect(self) -> Any:
            out = []
            try:
                for m in collector.collect():
                    out.append(m)
            except CollectionFailed as exc:
                print(f"collector failure: {exc}", flush=True)
            return out

    reg = CollectorRegistry()
    reg.register(One())
    text = generate_latest(reg).decode()
    series: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            series.setdefault(s.name, {})[tuple(sorted(s.labels.items()))] = s.value
    return series


def ours(series: dict[str, Any], name: str, gpu: str) -> float | None:
    for labels, value in series.get(name, {}).items():
        d = dict(labels)
        if d.get("gpu") == gpu:
            return float(value)
    return None


def compare(series: dict[str, Any], fields: list[str], rows: list[list[str]]) -> list[dict[str, Any]]:
    out = []
    by_field = {f[0]: f for f in FIELDS}
    for row in rows:
        values = dict(zip(fields, row, strict=False))
        gpu = values.get("index", "0")
        info = next(
            (dict(lab) for lab in series.get("sentinel_gpu_info", {}) if dict(lab).get("gpu") == gpu), {}
        )
        for fname in fields:
            _, metric, factor, kind = by_field[fname]
            smi = values[fname]
            if kind == "label":
                label = {"index": "gpu", "pci.bus_id": "pci_bus_id"}.get(fname, fname)
                mine_text = info.get(label, "")
                ok = mine_text.lower() == smi.lower() or mine_text.lower().endswith(smi.lower()[-12:])
                out.append({"gpu": gpu, "field": fname, "nvidia_smi": smi, "sentinel": mine_text, "ok": ok})
                continue
            if kind == "bits":
                mine_bits = 0
                seen = False
                for labels, v in series.get("sentinel_gpu_clock_event_active", {}).items():
                    d = dict(labels)
                    if d.get("gpu") == gpu:
                        seen = True
                        if v:
                            mine_bits |= REASON_BITS.get(d["reason"], 0)
                try:
                    smi_bits = int(smi, 16) & 0x1FF
                except ValueError:
                    smi_bits = -1
                out.append(
                    {
                        "gpu": gpu,
                        "field": fname,
                        "nvidia_smi": smi,
                        "sentinel": hex(mine_bits) if seen else "absent",
                        "ok": seen and mine_bits == smi_bits,
                    }
                )
                continue
            assert metric is not None
            mine = ours(series, metric, gpu)
            mine_val = None if mine is None else mine * factor
            smi_text = smi.strip()
            if smi_text.startswith("P") and fname == "pstate":
                smi_text = smi_text[1:]
            smi_text = {"Enabled": "1", "Disabled": "0"}.get(smi_text, smi_text)
            try:
                smi_val: float | None = float(smi_text)
            except ValueError:
                smi_val = None  # [N/A], [Not Supported]
            if smi_val is None or mine_val is None:
                ok = smi_val is None and mine_val is None  # both absent = correct absence
            elif kind in ("exact", "exact1"):
                ok = abs(smi_val - mine_val) <= (1.0 if kind == "exact1" else 0.0)
            elif kind in ("util", "temp"):
                ok = abs(smi_val - mine_val) <= TOLERANCE[kind]
            else:
                ok = abs(smi_val - mine_val) <= TOLERANCE[kind] * max(abs(smi_val), 1.0)
            out.append(
                {
                    "gpu": gpu,
                    "field": fname,
                    "nvidia_smi": smi,
                    "sentinel": "absent" if mine_val is None else f"{mine_val:.6g}",
                    "ok": ok,
                }
            )
    return out


def table(rows: list[dict[str, Any]], title: str) -> str:
    lines = [
        f"### {title}",
        "",
        "| gpu | nvidia-smi field | nvidia-smi | sentinel | agree |",
        "|---|---|---|---|---|",
    ]
    for r in rows:
        agree = "yes" if r["ok"] else "NO"
        lines.append(f"| {r['gpu']} | {r['field']} | {r['nvidia_smi']} | {r['sentinel']} | {agree} |")
    return "\n".join(lines)


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    if not values:
        return float("nan")
    k = min(len(values) - 1, max(0, round(q * (len(values) - 1))))
    return values[k]


def parallelism(poller: GpuPoller, nvml: Any, rounds: int) -> dict[str, Any]:
    """Full per-GPU reads: one GPU after another in one thread vs all GPUs at once, one thread each."""
    devices = poller._devices  # the benchmark looks inside on purpose
    seq_cycle: list[float] = []
    par_cycle: list[float] = []
    seq_per_gpu: list[float] = []
    par_per_gpu: list[float] = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for d in devices:
            r = read_device(nvml, d.handle, d.identity)
            seq_per_gpu.append(r.duration_seconds)
        seq_cycle.append(time.perf_counter() - t0)
        results: list[float] = []

        def one(d: Any, results: list[float] = results) -> None:
            results.append(read_device(nvml, d.handle, d.identity).duration_seconds)

        threads = [threading.Thread(target=one, args=(d,)) for d in devices]
        t0 = time.perf_counter()
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        par_cycle.append(time.perf_counter() - t0)
        par_per_gpu.extend(results)
    return {
        "gpus": len(devices),
        "sequential_cycle_ms_median": statistics.median(seq_cycle) * 1e3,
        "parallel_cycle_ms_median": statistics.median(par_cycle) * 1e3,
        "per_gpu_read_ms_alone_median": statistics.median(seq_per_gpu) * 1e3,
        "per_gpu_read_ms_concurrent_median": statistics.median(par_per_gpu) * 1e3,
        "speedup": statistics.median(seq_cycle) / statistics.median(par_cycle),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--fake", type=int, default=0, help="use N fake GPUs (no GPU needed)")
    ap.add_argument("--cycles", type=int, default=5)
    ap.add_argument("--load-seconds", type=float, default=40.0)
    ap.add_argument("--rounds", type=int, default=8, help="parallelism rounds")
    ap.add_argument(
        "--soak", type=float, default=10.0, help="seconds of background-mode collection under load"
    )
    ap.add_argument("--out", type=Path, default=Path(os.environ.get("OUT", ".")))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    if args.fake:
        fake = FakeNvml(args.fake, "busy", latency=True)

        def factory() -> Any:
            return fake
    else:
        import pynvml

        def factory() -> Any:
            return pynvml

    have_smi = shutil.which("nvidia-smi") is not None and not args.fake
    report: dict[str, Any] = {"argv": sys.argv, "started": time.time()}
    md: list[str] = []
    if have_smi:
        report["nvidia_smi_L"] = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True).stdout
        print(report["nvidia_smi_L"], flush=True)

    poller = GpuPoller(factory, interval=1.0, timeout=5.0)
    collector = GpuCollector(poller)
    t0 = time.perf_counter()
    snap = poller.run_cycle()
    report["first_cycle_incl_init_s"] = time.perf_counter() - t0
    print(f"nvml status={snap.status} gpus={snap.visible_devices} driver={snap.driver_version}", flush=True)
    if snap.status != "ok":
        print(f"detail: {snap.detail}")
        return 1
    nvml = poller._nvml
    fields = supported_fields() if have_smi else []

    def phase(name: str) -> None:
        cycles = []
        per_gpu: dict[str, list[float]] = {}
        for _ in range(args.cycles):
            s = poller.run_cycle()
            cycles.append(s.cycle_duration_seconds or 0.0)
            for st in s.devices:
                if st.ok and st.reading is not None:
                    per_gpu.setdefault(str(st.identity.index), []).append(st.reading.duration_seconds)
        series = scrape(collector)
        entry: dict[str, Any] = {
            "cycle_ms_median": statistics.median(cycles) * 1e3,
            "cycle_ms_max": max(cycles) * 1e3,
            "per_gpu_read_ms_median": {g: statistics.median(v) * 1e3 for g, v in per_gpu.items()},
        }
        if fields:
            f, rows, took = nvidia_smi(fields)
            entry["nvidia_smi_seconds"] = took
            cmp_rows = compare(series, f, rows)
            entry["comparison"] = cmp_rows
            md.append(table(cmp_rows, f"{name}: sentinel vs nvidia-smi (queried right after the cycle)"))
            print(md[-1], flush=True)
        # Per-call timings of the last cycle, median across GPUs.
        calls: dict[str, list[float]] = {}
        for st in poller.snapshot.devices:
            if st.reading is not None:
                for k, v in st.reading.timings.items():
                    calls.setdefault(k, []).append(v)
        entry["per_call_ms"] = {k: statistics.median(v) * 1e3 for k, v in sorted(calls.items())}
        entry["field_errors"] = {f"{k}": v for k, v in poller.snapshot.field_errors_total.items()}
        report[name] = entry
        print(
            f"{name}: cycle median {entry['cycle_ms_median']:.1f} ms, "
            f"per GPU {entry['per_gpu_read_ms_median']}",
            flush=True,
        )

    phase("idle")
    report["parallel_idle"] = parallelism(poller, nvml, args.rounds)
    print("parallelism (idle):", report["parallel_idle"], flush=True)

    load = None
    if not args.fake and args.load_seconds > 0:
        load = subprocess.Popen(
            [sys.executable, "-c", LOAD_SCRIPT, str(args.load_seconds)],
            env={**os.environ, "CUDA_VISIBLE_DEVICES": os.environ.get("LOAD_GPU", "0")},
        )
        time.sleep(8)  # model of a steady state: clocks and power settle
    # Background mode for a while (--soak seconds, 1 s interval): the way the daemon runs it.
    poller.start()
    time.sleep(1.5)
    first = {st.identity.index: st.reading for st in poller.snapshot.devices if st.reading}
    cycles: dict[float, float] = {}
    reads: dict[int, dict[float, float]] = {}
    power: dict[int, list[float]] = {}
    soak_end = time.monotonic() + args.soak
    while time.monotonic() < soak_end:
        time.sleep(0.5)
        s = poller.snapshot
        if s.cycle_duration_seconds is not None:
            cycles[s.cycle_timestamp] = s.cycle_duration_seconds
        for st in s.devices:
            if st.reading is not None:
                reads.setdefault(st.identity.index, {})[st.reading.timestamp] = st.reading.duration_seconds
                if st.reading.power_watts is not None:
                    power.setdefault(st.identity.index, []).append(st.reading.power_watts)
    last = {st.identity.index: st.reading for st in poller.snapshot.devices if st.reading}
    report["xid_watcher_registered"] = list(poller._xid.registered) if poller._xid else []
    poller.stop(5.0)
    cyc = list(cycles.values())
    energy_rate = {}
    for k, r1 in last.items():
        r0 = first.get(k)
        if r0 is not None and r0.energy_joules is not None and r1.energy_joules is not None:
            energy_rate[k] = (r1.energy_joules - r0.energy_joules) / max(1e-9, r1.timestamp - r0.timestamp)
    report["background"] = {
        "soak_seconds": args.soak,
        "cycles": len(cyc),
        "cycle_ms": {"p50": pct(cyc, 0.5) * 1e3, "p99": pct(cyc, 0.99) * 1e3, "max": max(cyc) * 1e3},
        "per_gpu_read_ms": {
            k: {
                "p50": pct(list(v.values()), 0.5) * 1e3,
                "p99": pct(list(v.values()), 0.99) * 1e3,
                "max": max(v.values()) * 1e3,
            }
            for k, v in reads.items()
        },
        "mean_power_w": {k: statistics.mean(v) for k, v in power.items()},
        "energy_counter_rate_w": energy_rate,
        "failures": {f"{k}": v for k, v in poller.snapshot.read_failures_total.items()},
    }
    print("background:", json.dumps(report["background"], default=str), flush=True)
    # Collector-side render cost from the real snapshot.
    renders = []
    reg = CollectorRegistry()

    class Wrap:
        def collect(self) -> Any:
            try:
                return list(collector.collect())
            except CollectionFailed:
                return []

    reg.register(Wrap())
    for _ in range(200):
        t = time.perf_counter()
        generate_latest(reg)
        renders.append(time.perf_counter() - t)
    report["render_ms"] = {"p50": pct(renders, 0.5) * 1e3, "p99": pct(renders, 0.99) * 1e3}
    # Re-init the poller for direct cycles after stop() shut NVML down.
    poller = GpuPoller(factory, interval=1.0, timeout=5.0)
    collector = GpuCollector(poller)
    poller.run_cycle()
    nvml = poller._nvml
    if load is not None and load.poll() is None:
        phase("load")
        report["parallel_load"] = parallelism(poller, nvml, args.rounds)
        print("parallelism (load):", report["parallel_load"], flush=True)
        if have_smi:
            dmon = subprocess.run(
                ["nvidia-smi", "dmon", "-s", "t", "-c", "2"], capture_output=True, text=True
            )
            report["dmon_pcie"] = dmon.stdout
            print(dmon.stdout, flush=True)
            pcie = {
                st.identity.index: (st.reading.pcie_rx_bytes_per_second, st.reading.pcie_tx_bytes_per_second)
                for st in poller.snapshot.devices
                if st.reading
            }
            report["sentinel_pcie_rx_tx_bytes_per_s"] = pcie
            print("sentinel pcie rx/tx B/s:", pcie, flush=True)
        load.terminate()
        load.wait(10)
    poller.stop(5.0)

    summary = ["### GPU collection timing", "", "| what | value |", "|---|---|"]
    summary.append(f"| first cycle incl. nvmlInit | {report['first_cycle_incl_init_s'] * 1e3:.1f} ms |")
    for ph in ("idle", "load"):
        if ph in report:
            e = report[ph]
            summary.append(
                f"| {ph}: cycle median / max | {e['cycle_ms_median']:.1f} / {e['cycle_ms_max']:.1f} ms |"
            )
            for g, v in e["per_gpu_read_ms_median"].items():
                summary.append(f"| {ph}: GPU {g} full read (median) | {v:.1f} ms |")
    for key in ("parallel_idle", "parallel_load"):
        if key in report:
            p = report[key]
            summary.append(
                f"| {key}: {p['gpus']} GPUs sequential / parallel cycle | "
                f"{p['sequential_cycle_ms_median']:.1f} / {p['parallel_cycle_ms_median']:.1f} ms "
                f"(speedup {p['speedup']:.2f}×; per-GPU read alone "
                f"{p['per_gpu_read_ms_alone_median']:.1f} ms, "
                f"concurrent {p['per_gpu_read_ms_concurrent_median']:.1f} ms) |"
            )
    bg = report["background"]
    summary.append(
        f"| background soak {bg['soak_seconds']:g} s under load: {bg['cycles']} cycles p50 / p99 / max | "
        f"{bg['cycle_ms']['p50']:.1f} / {bg['cycle_ms']['p99']:.1f} / {bg['cycle_ms']['max']:.1f} ms |"
    )
    for k, v in bg["per_gpu_read_ms"].items():
        summary.append(
            f"| soak: GPU {k} read p50 / p99 / max | {v['p50']:.1f} / {v['p99']:.1f} / {v['max']:.1f} ms |"
        )
    for k, v in bg["energy_counter_rate_w"].items():
        summary.append(
            f"| soak: GPU {k} energy counter rate vs mean power | "
            f"{v:.1f} W vs {bg['mean_power_w'].get(k, 0):.1f} W |"
        )
    summary.append(
        f"| GPU series, uncached prometheus_client render, p50 / p99 | "
        f"{report['render_ms']['p50']:.2f} / "
        f"{report['render_ms']['p99']:.2f} ms |"
    )
    md.insert(0, "\n".join(summary))
    calls = report.get("load", report["idle"])["per_call_ms"]
    md.append(
        "### NVML per-call time (median across GPUs, last cycle)\n\n| call | ms |\n|---|---|\n"
        + "\n".join(f"| {k} | {v:.2f} |" for k, v in sorted(calls.items(), key=lambda kv: -kv[1]))
    )
    text = "\n\n".join(md)
    print(text)
    (args.out / "gpu_vs_nvidia_smi.md").write_text(text + "\n")
    (args.out / "gpu_vs_nvidia_smi.json").write_text(json.dumps(report, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
