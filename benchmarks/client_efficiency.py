"""Streamed tokens per client CPU-second: sentinel bench vs bench_serving (Python and Rust client),
and the simulator's own events per CPU-second, at one token per event, in one run.

One `sentinel sim --stream-interval 1` serves every client in turn, for each backend (native
/generate, /v1/completions, /v1/chat/completions), `--repeat` rounds, the clients alternating:

- `sentinel bench` (this checkout; uvloop, as it runs for unscheduled arrivals);
- bench_serving 0.5.23's Python client (`python -m sglang.benchmark.serving`, through
  `peer_shim_0523.py`, which only skips the torch-importing package inits);
- bench_serving 0.5.23 `--rust-client` (the wheel's compiled `_bench` extension, Tokio threads);
- bench_serving 0.5.9 (`python -m sglang.bench_serving`, unchanged; the README's earlier figure);
- `floor` (`floor_client.py`): the same requests and connections, read by an epoll loop that
  only calls `recvmsg` (same ancillary buffer, same 1 ms polling) and counts bytes: no HTTP or
  SSE parsing, no records. The kernel + syscall + minimal-interpreter cost per token, the least
  any Python client spends.

Each client is a separate process with the same workload: `random-ids` prompts, fixed lengths
(`--random-range-ratio 1`), ignore_eos, `--max-concurrency`, all at once, one warm-up request.
What is measured is the same for all of them and taken from outside: this process samples
`/proc/PID/stat` (user + system, every thread of the process) of the client and of the simulator
every 10 ms, and the measured span is the simulator's ground truth for the run's requests (after
the warm-up): first request's arrival at the simulator's socket -> last request's finish. So
imports, tokenizer loading, dataset building and post-run metrics are outside every figure, and
the Rust client's worker threads are inside its. Tokens and events come from the truth too
(`completion_tokens`, `token_events`): the `tok/ev` column must read 1.00 (the simulator kept up
and never merged two tokens into one event), else the row says so.

- `client tok/CPU-s` = streamed tokens ÷ the client's CPU-seconds over the span;
- `sim ev/CPU-s` = SSE token events ÷ the simulator's CPU-seconds over the same span;
- `headroom` = sim ev/CPU-s ÷ sentinel bench's tok/CPU-s (≥ 2: the simulator can feed twice what
  the most efficient client consumes, so the client is what is measured);
- `ratio` = sentinel bench's tok/CPU-s ÷ that client's, same round, same backend;
- `floor÷` = the floor's tok/CPU-s ÷ that client's (same round): how many times the floor's CPU
  per token the client spends; on the Rust client's row, the most any Python client could reach
  against it (3x needs floor÷ >= 3 there).

Needs the peers: `bash benchmarks/peer_setup.sh`. A peer that cannot run prints why in its row.
Usage: .venv/bin/python benchmarks/client_efficiency.py [--speed 1.5] [--num-prompts 192]
       [--input-len 256] [--output-len 512] [--max-concurrency 48] [--repeat 2]
       [--backends sglang,sglang-oai,sglang-oai-chat] [--clients sentinel,bs23,rust,bs59,floor] [--pin]
       [--profile tiny-llama-1x-h200] [--baseline DIR] [--sim-from DIR]
`--baseline DIR` adds the client `base`: `sentinel bench` of another checkout (DIR, e.g. one of
main made with `git archive`), run from its `daemon/` with this venv, so that a change to the
client is measured before/after in one run (its ratio column reads sentinel ÷ baseline).
`--sim-from DIR` runs the simulator of another checkout (DIR's `daemon/` first on its path): the
simulator's before/after is two runs, compared by `sim ev/CPU-s`.
The box is shared: the load average is printed with the table; compare ratios within one run.
"""

from __future__ import annotations

import argparse
import bisect
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))

from load_accuracy import bench_sim
from peer_cpu import OFFLINE_ENV, SHIM, PeerNotReady, peer_dir, peer_python, peer_tokenizer

HERE = Path(__file__).resolve().parent
SHIM_0523 = HERE / "peer_shim_0523.py"
SENTINEL = Path(sys.executable).with_name("sentinel")
_CLK_TCK = os.sysconf("SC_CLK_TCK")
CLIENTS = {
    "sentinel": "sentinel bench",
    "bs23": "bench_serving 0.5.23",
    "rust": "bench_serving 0.5.23 --rust-client",
    "bs59": "bench_serving 0.5.9",
    "base": "sentinel bench --baseline",
    "floor": "floor (recvmsg only)",
}
THINKING_OFF = {"chat_template_kwargs": {"enable_thinking": False}}


def proc_cpu_s(pid: int) -> float | None:
    """User + system CPU-seconds of every thread of ``pid`` (exited ones included)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / _CLK_TCK


class CpuSampler:
    """Samples the CPU time of a few processes every ``interval`` s on a thread: (unix time, cpu)."""

    def __init__(self, pids: dict[str, int], interval: float = 0.01) -> None:
        self.pids = pids
        self.interval = interval
        self.samples: dict[str, list[tuple[float, float]]] = {k: [] for k in pids}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def __enter__(self) -> CpuSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _loop(self) -> None:
        while not self._stop.is_set():
            now = time.time()
            for name, pid in self.pids.items():
                cpu = proc_cpu_s(pid)
                if cpu is not None:
                    self.samples[name].append((now, cpu))
            self._stop.wait(self.interval)

    def cpu_between(self, name: str, start: float, end: float) -> float:
        return _interp(self.samples[name], end) - _interp(self.samples[name], start)


def _interp(samples: list[tuple[float, float]], t: float) -> float:
    times = [s[0] for s in samples]
    i = bisect.bisect_left(times, t)
    if i <= 0:
        return samples[0][1]
    if i >= len(samples):
        return samples[-1][1]
    (t0, c0), (t1, c1) = samples[i - 1], samples[i]
    return c0 + (c1 - c0) * (t - t0) / (t1 - t0) if t1 > t0 else c1


@dataclass(frozen=True)
class Row:
    backend: str
    client: str
    round: int
    error: str | None = None
    tokens: int = 0
    events: int = 0
    requests: int = 0
    client_cpu: float = 0.0
    sim_cpu: float = 0.0
    span: float = 0.0

    @property
    def tps(self) -> float:
        return self.tokens / self.client_cpu if self.client_cpu > 0 else 0.0

    @property
    def sim_eps(self) -> float:
        return self.events / self.sim_cpu if self.sim_cpu > 0 else 0.0


def client_argv(client: str, backend: str, base_url: str, args: argparse.Namespace, out: Path) -> list[str]:
    common = [
        "--backend", backend,
        "--base-url", base_url,
        "--dataset-name", "random-ids",
        "--num-prompts", str(args.num_prompts),
        "--random-input-len", str(args.input_len),
        "--random-output-len", str(args.output_len),
        "--random-range-ratio", "1",
        "--max-concurrency", str(args.max_concurrency),
        "--request-rate", "inf",
        "--warmup-requests", "1",
        "--seed", "1",
        "--disable-tqdm",
        "--output-file", str(out),
    ]  # fmt: skip
    if backend == "sglang":
        common.append("--tokenize-prompt")
    if backend == "sglang-oai-chat":
        # Same body for every client; 0.5.9's bench_serving ignores reasoning_content anyway.
        common += ["--extra-request-body", json.dumps(THINKING_OFF)]
    if client == "sentinel":
        return [str(SENTINEL), "bench", "--log-level", "warning", *common]
    if client == "floor":
        return [sys.executable, str(HERE / "floor_client.py"), *common]
    if client == "base":
        if not args.baseline:
            raise PeerNotReady("client base needs --baseline DIR")
        main = "import sys; from sglang_sentinel.cli import main; sys.argv[0] = 'sentinel'; sys.exit(main())"
        return [sys.executable, "-c", main, "bench", "--log-level", "warning", *common]
    tokenizer = ["--tokenizer", str(peer_tokenizer())]
    if client == "bs59":
        return [str(peer_python()), str(SHIM), *common, *tokenizer]
    py23 = peer_dir() / "venv23" / "bin" / "python"
    if not py23.is_file():
        raise PeerNotReady(f"{py23} missing; run benchmarks/peer_setup.sh (needs python3.11)")
    argv = [str(py23), str(SHIM_0523), *common, *tokenizer]
    return [*argv, "--rust-client"] if client == "rust" else argv


def run_one(sim: Any, client: str, backend: str, rnd: int, args: argparse.Namespace) -> Row:
    with tempfile.TemporaryDirectory(prefix="sentinel-eff-") as tmp:
        try:
            argv = client_argv(client, backend, sim.base_url, args, Path(tmp) / "out.jsonl")
        except PeerNotReady as exc:
            return Row(backend, client, rnd, error=str(exc))
        t0 = time.time()
        # SENTINEL_PEER_DIR is this benchmark's, not a setting: `sentinel bench` refuses
        # SENTINEL_* variables it does not know.
        env = {k: v for k, v in os.environ.items() if k != "SENTINEL_PEER_DIR"} | OFFLINE_ENV
        if client == "base":  # the baseline's package first on the path, ahead of this checkout's
            env["PYTHONPATH"] = str(Path(args.baseline, "daemon").resolve())
        with tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, cwd=tmp, env=env)
            with CpuSampler({"client": proc.pid, "sim": sim.pid}) as sampler:
                try:
                    rc = proc.wait(timeout=900)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
                    return Row(backend, client, rnd, error="did not finish within 900 s")
            err.seek(0)
            stderr = err.read().decode(errors="replace")
    if rc != 0:
        return Row(backend, client, rnd, error=f"exit {rc}: {stderr.strip().splitlines()[-1:]}")
    recs = httpx.get(sim.control_url + "/requests", params={"since": t0 - 1}, timeout=30).json()["requests"]
    recs = sorted((r for r in recs if r["arrival_time"] >= t0), key=lambda r: r["arrival_time"])
    if len(recs) < 2:
        return Row(backend, client, rnd, error=f"{len(recs)} requests reached the simulator")
    warm_end = recs[0]["finish_time"] or recs[0]["arrival_time"]
    run = [r for r in recs[1:] if r["arrival_time"] > warm_end]
    ok = [r for r in run if r["status"] == "ok" and r["finish_time"] is not None]
    if len(ok) != args.num_prompts:
        return Row(backend, client, rnd, error=f"{len(ok)}/{args.num_prompts} requests ok at the simulator")
    start = min(r["arrival_time"] for r in ok)
    end = max(r["finish_time"] for r in ok)
    return Row(
        backend,
        client,
        rnd,
        tokens=sum(r["completion_tokens"] for r in ok),
        events=sum(r["token_events"] or 0 for r in ok),
        requests=len(ok),
        client_cpu=sampler.cpu_between("client", start, end),
        sim_cpu=sampler.cpu_between("sim", start, end),
        span=end - start,
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--speed", type=float, default=1.5)
    ap.add_argument("--profile", default="tiny-llama-1x-h200")
    ap.add_argument("--num-prompts", type=int, default=192)
    ap.add_argument("--input-len", type=int, default=256)
    ap.add_argument("--output-len", type=int, default=512)
    ap.add_argument("--max-concurrency", type=int, default=48)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--backends", default="sglang,sglang-oai,sglang-oai-chat")
    ap.add_argument("--clients", default=",".join(c for c in CLIENTS if c != "base"))
    ap.add_argument("--pin", action="store_true", help="simulator on CPU 0, clients on CPU 1")
    ap.add_argument("--baseline", help="a checkout whose sentinel bench is client `base`")
    ap.add_argument("--sim-from", help="a checkout whose simulator serves the run (default: this one)")
    args = ap.parse_args()
    backends = args.backends.split(",")
    clients = args.clients.split(",")
    if args.baseline and "base" not in clients:
        clients.append("base")
    for c in clients:
        if c not in CLIENTS:
            raise SystemExit(f"unknown client {c!r}; known: {', '.join(CLIENTS)}")
    if args.pin:
        os.sched_setaffinity(0, {1})  # the clients inherit it
    rows: list[Row] = []
    load0 = os.getloadavg()
    extra = ["--stream-interval", "1", "--profile", args.profile]
    sim_env = {"PYTHONPATH": str(Path(args.sim_from, "daemon").resolve())} if args.sim_from else None
    with bench_sim(args.speed, extra, {0} if args.pin else None, sim_env) as sim:
        profile = sim.info["profile"]
        for rnd in range(1, args.repeat + 1):
            for backend in backends:
                for client in clients:
                    row = run_one(sim, client, backend, rnd, args)
                    rows.append(row)
                    print(row, file=sys.stderr, flush=True)
    load1 = os.getloadavg()
    print(
        f"\nStreamed tokens per client CPU-second at one token per event: sentinel sim {profile}"
        f"{f' (from {args.sim_from})' if args.sim_from else ''}, "
        f"speed {args.speed:g}, --stream-interval 1; {args.num_prompts} prompts "
        f"{args.input_len}/{args.output_len}, max concurrency {args.max_concurrency}, all at once; "
        f"{args.repeat} round(s), medians. Load average 1 min {load0[0]:.2f} before, {load1[0]:.2f} after."
    )
    hdr = (
        f"{'backend':<16} {'client':<34} {'tokens':>8} {'tok/ev':>6} {'client CPU s':>12} "
        f"{'client tok/CPU-s':>16} {'ratio':>7} {'floor÷':>7} {'sim ev/CPU-s':>12} {'headroom':>8}"
    )
    print(hdr)
    print("-" * len(hdr))
    for backend in backends:
        ours = [r for r in rows if r.backend == backend and r.client == "sentinel" and not r.error]
        ours_by_round = {r.round: r.tps for r in ours}
        ours_tps = statistics.median(r.tps for r in ours) if ours else 0.0
        floor_by_round = {
            r.round: r.tps for r in rows if r.backend == backend and r.client == "floor" and not r.error
        }
        for client in clients:
            mine = [r for r in rows if r.backend == backend and r.client == client]
            good = [r for r in mine if not r.error]
            if not good:
                err = mine[0].error if mine else "not run"
                print(f"{backend:<16} {CLIENTS[client]:<34} cannot run here: {err}")
                continue
            tokens = sum(r.tokens for r in good)
            tok_ev = tokens / max(1, sum(r.events for r in good))
            tps = statistics.median(r.tps for r in good)
            sim_eps = statistics.median(r.sim_eps for r in good)
            ratios = [ours_by_round[r.round] / r.tps for r in good if r.round in ours_by_round and r.tps]
            ratio = "" if client == "sentinel" or not ratios else f"{statistics.median(ratios):.2f}x"
            floors = [floor_by_round[r.round] / r.tps for r in good if r.round in floor_by_round and r.tps]
            floor_x = "" if client == "floor" or not floors else f"{statistics.median(floors):.2f}x"
            headroom = f"{sim_eps / ours_tps:.2f}x" if ours_tps else "-"
            cpu = statistics.median(r.client_cpu for r in good)
            flag = "" if abs(tok_ev - 1.0) < 0.005 else "  (merged events: simulator fell behind)"
            print(
                f"{backend:<16} {CLIENTS[client]:<34} {tokens // len(good):>8} {tok_ev:>6.2f} {cpu:>12.2f} "
                f"{tps:>16,.0f} {ratio:>7} {floor_x:>7} {sim_eps:>12,.0f} {headroom:>8}{flag}"
            )
    print(
        "ratio = sentinel bench's tok/CPU-s ÷ the client's (same round); floor÷ = the floor client's "
        "tok/CPU-s ÷ the client's (same round); headroom = the simulator's events per CPU-s (that "
        "row's run) ÷ sentinel bench's tokens per CPU-s"
    )


if __name__ == "__main__":
    main()
