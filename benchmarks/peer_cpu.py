"""Run SGLang's ``bench_serving`` (the peer) against a server and measure what it cost the client.

Used by ``bench_serving_vs_sim.py`` (format/number agreement with the simulator), by the opt-in
``tests/peer`` test, and by the load-engine benchmark that compares client CPU efficiency side by
side with bench_serving.

API::

    from peer_cpu import run_bench_serving, PeerNotReady, BenchServingRun
    run = run_bench_serving("http://127.0.0.1:30000", backend="sglang", num_prompts=256,
                            input_len=256, output_len=256, request_rate=float("inf"))
    run.completed, run.failures            # successful requests; error strings of failed ones
    run.output_tokens                      # Σ output tokens bench_serving counted
    run.run_cpu_s                          # CPU s of the run itself: first send → last request done
    run.tokens_per_run_cpu_s               # output tokens ÷ run_cpu_s  (the efficiency figure)
    run.benchmark_cpu_s                    # + warm-up, /get_server_info, metrics, retokenising, dump
    run.process_cpu_s                      # the whole child (also imports, tokenizer, dataset)
    run.result                             # bench_serving's JSONL object (its own keys, + details)

The child is ``benchmarks/.peer/venv/bin/python benchmarks/peer_shim.py <bench_serving args>``;
``peer_setup.sh`` builds that venv. Process CPU comes from ``os.wait4`` (the child's own rusage),
the run and benchmark-phase CPU from the shim (see its docstring for the exact boundaries).
Import this module by path (``sys.path`` must contain ``benchmarks/``): the benchmarks directory
is not a package.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

__all__ = [
    "BenchServingRun",
    "PeerNotReady",
    "peer_dir",
    "peer_python",
    "peer_tokenizer",
    "run_bench_serving",
]

HERE = Path(__file__).resolve().parent
SHIM = HERE / "peer_shim.py"
# bench_serving asks the HF hub for the served model's tokenizer config (check_chat_template) and
# may try ShareGPT downloads; offline flags make those fail fast instead of retrying.
OFFLINE_ENV = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


class PeerNotReady(RuntimeError):
    """The peer venv or tokenizer is missing: run benchmarks/peer_setup.sh."""


def peer_dir() -> Path:
    return Path(os.environ.get("SENTINEL_PEER_DIR", HERE / ".peer"))


def peer_python() -> Path:
    path = peer_dir() / "venv" / "bin" / "python"
    if not path.is_file():
        raise PeerNotReady(f"{path} missing; run benchmarks/peer_setup.sh")
    return path


def peer_tokenizer() -> Path:
    path = peer_dir() / "tokenizer"
    if not (path / "tokenizer.json").is_file():
        raise PeerNotReady(f"{path}/tokenizer.json missing; run benchmarks/peer_setup.sh")
    return path


@dataclass(frozen=True)
class BenchServingRun:
    backend: str
    argv: tuple[str, ...]
    returncode: int
    #: bench_serving's JSONL object for this run (None if it wrote none, e.g. it crashed).
    result: dict[str, Any] | None
    stdout: str
    stderr: str
    #: Unix time just before the child was started, and its wall time.
    started_at: float
    wall_s: float
    process_cpu_s: float
    benchmark_cpu_s: float | None
    benchmark_wall_s: float | None
    run_cpu_s: float | None
    run_wall_s: float | None

    @property
    def completed(self) -> int:
        return int(self.result["completed"]) if self.result else 0

    @property
    def failures(self) -> list[str]:
        """Error strings of failed requests (needs output details, which run_bench_serving requests)."""
        if not self.result:
            return []
        return [e for e in self.result.get("errors", []) if e]

    @property
    def output_tokens(self) -> int:
        return int(self.result["total_output_tokens"]) if self.result else 0

    @property
    def tokens_per_run_cpu_s(self) -> float | None:
        """Output tokens bench_serving consumed per CPU-second of its run (None if not measured)."""
        if not self.run_cpu_s:
            return None
        return self.output_tokens / self.run_cpu_s


def run_bench_serving(
    base_url: str,
    *,
    backend: str = "sglang",
    num_prompts: int = 64,
    input_len: int = 256,
    output_len: int = 256,
    range_ratio: float = 0.0,
    request_rate: float = math.inf,
    max_concurrency: int | None = None,
    seed: int = 1,
    warmup_requests: int = 1,
    tokenize_prompt: bool = False,
    extra_request_body: Mapping[str, Any] | None = None,
    extra_args: Sequence[str] = (),
    timeout_s: float = 600.0,
    env: Mapping[str, str] | None = None,
) -> BenchServingRun:
    """Run bench_serving once (``--dataset-name random-ids``, output details on, tqdm off)."""
    python = peer_python()
    tokenizer = peer_tokenizer()
    with tempfile.TemporaryDirectory(prefix="sentinel-peer-") as tmp:
        result_file = Path(tmp) / "result.jsonl"
        cpu_file = Path(tmp) / "cpu.json"
        argv = [
            str(python),
            str(SHIM),
            "--backend", backend,
            "--base-url", base_url.rstrip("/"),
            "--dataset-name", "random-ids",
            "--tokenizer", str(tokenizer),
            "--num-prompts", str(num_prompts),
            "--random-input-len", str(input_len),
            "--random-output-len", str(output_len),
            "--random-range-ratio", str(range_ratio),
            "--request-rate", "inf" if math.isinf(request_rate) else str(request_rate),
            "--seed", str(seed),
            "--warmup-requests", str(warmup_requests),
            "--output-file", str(result_file),
            "--output-details",
            "--disable-tqdm",
        ]  # fmt: skip
        if max_concurrency is not None:
            argv += ["--max-concurrency", str(max_concurrency)]
        if tokenize_prompt:
            argv.append("--tokenize-prompt")
        if extra_request_body:
            argv += ["--extra-request-body", json.dumps(dict(extra_request_body))]
        argv += list(extra_args)
        child_env = {**os.environ, **OFFLINE_ENV, "SENTINEL_PEER_CPU_FILE": str(cpu_file), **(env or {})}
        started = time.time()
        wall0 = time.perf_counter()
        with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
            proc = subprocess.Popen(argv, stdout=out, stderr=err, env=child_env, cwd=tmp)
            deadline = time.monotonic() + timeout_s
            status, rusage = _wait4(proc.pid, deadline)
            if status is None:
                proc.kill()
                _, status, rusage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            wall = time.perf_counter() - wall0
            out.seek(0)
            err.seek(0)
            stdout = out.read().decode(errors="replace")
            stderr = err.read().decode(errors="replace")
        result = None
        if result_file.is_file():
            lines = [line for line in result_file.read_text().splitlines() if line.strip()]
            if lines:
                result = json.loads(lines[-1])
        cpu = json.loads(cpu_file.read_text()) if cpu_file.is_file() else {}

    def cpu_of(prefix: str) -> float | None:
        if f"{prefix}_cpu_user_s" not in cpu:
            return None
        return float(cpu[f"{prefix}_cpu_user_s"]) + float(cpu[f"{prefix}_cpu_system_s"])

    return BenchServingRun(
        backend=backend,
        argv=tuple(argv),
        returncode=proc.returncode,
        result=result,
        stdout=stdout,
        stderr=stderr,
        started_at=started,
        wall_s=wall,
        process_cpu_s=rusage.ru_utime + rusage.ru_stime,
        benchmark_cpu_s=cpu_of("benchmark"),
        benchmark_wall_s=cpu.get("benchmark_wall_s"),
        run_cpu_s=cpu_of("run"),
        run_wall_s=cpu.get("run_wall_s"),
    )


def _wait4(pid: int, deadline: float) -> tuple[int | None, Any]:
    """Wait for the child until ``deadline``; returns (status, rusage) or (None, None) on timeout."""
    while True:
        wpid, status, rusage = os.wait4(pid, os.WNOHANG)
        if wpid == pid:
            return status, rusage
        if time.monotonic() >= deadline:
            return None, None
        time.sleep(0.02)


def main(argv: Sequence[str] | None = None) -> int:
    """``python benchmarks/peer_cpu.py --base-url URL [...]``: print bench_serving's client cost."""
    import argparse

    p = argparse.ArgumentParser(description="bench_serving's client CPU cost against a running server")
    p.add_argument("--base-url", required=True)
    p.add_argument("--backend", default="sglang")
    p.add_argument("--num-prompts", type=int, default=256)
    p.add_argument("--random-input-len", type=int, default=256)
    p.add_argument("--random-output-len", type=int, default=256)
    p.add_argument("--random-range-ratio", type=float, default=0.0)
    p.add_argument("--request-rate", type=float, default=math.inf)
    p.add_argument("--max-concurrency", type=int, default=None)
    args = p.parse_args(argv)
    try:
        run = run_bench_serving(
            args.base_url,
            backend=args.backend,
            num_prompts=args.num_prompts,
            input_len=args.random_input_len,
            output_len=args.random_output_len,
            range_ratio=args.random_range_ratio,
            request_rate=args.request_rate,
            max_concurrency=args.max_concurrency,
            tokenize_prompt=args.backend == "sglang",
        )
    except PeerNotReady as exc:
        print(f"peer_cpu: {exc}", file=sys.stderr)
        return 2
    rows = [
        ("completed / failed", f"{run.completed} / {len(run.failures)}"),
        ("output tokens", str(run.output_tokens)),
        ("run CPU s (first send → last done)", _f(run.run_cpu_s)),
        ("run wall s", _f(run.run_wall_s)),
        ("output tokens per run CPU-s", _f(run.tokens_per_run_cpu_s, 0)),
        ("benchmark-phase CPU s", _f(run.benchmark_cpu_s)),
        ("whole-process CPU s", _f(run.process_cpu_s)),
    ]
    print(f"bench_serving 0.5.9 --backend {args.backend} against {args.base_url}")
    for name, value in rows:
        print(f"{name:<38} {value:>12}")
    if run.returncode != 0:
        print(run.stderr[-2000:], file=sys.stderr)
    return 0 if run.returncode == 0 and not run.failures else 1


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


if __name__ == "__main__":
    sys.exit(main())
