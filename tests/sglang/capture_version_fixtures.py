"""Capture log lines, /metrics, /v1/loads documents and crash texts from SGLang's own code.

Usage::

    python tests/sglang/capture_version_fixtures.py WHEELS/s59/sglang WHEELS/s23/sglang

(the two arguments are the ``sglang/`` directories of unpacked 0.5.9 and 0.5.23 wheels). Writes
``tests/sglang/fixtures/versions/``. The wheels' modules import torch, so nothing is imported:

- functions and classes that do not need torch are cut out of the source with ``ast`` and executed
  as they are (``PoolStats`` usage fragments, ``QueueCount`` + ``_log_gauge_queue_count`` on real
  prometheus_client gauges, 0.5.9's ``_compute_aggregate``, ``_scheduler_died_error``, the
  subprocess watchdog's ``_check_processes`` with a fake ``os``);
- the rest (the batch-line scaffolding around the pool fragments, the retraction line, the NaN
  texts) is rebuilt from format strings copied from the source, and every copied fragment is
  checked to occur verbatim in that source — a wheel that changed them fails here.
"""

# ruff: noqa: E501  (fixture literals copied from SGLang's source stay on one line)
from __future__ import annotations

import ast
import dataclasses
import json
import signal
import sys
import types
from collections import Counter
from pathlib import Path
from typing import Any

from prometheus_client import CollectorRegistry, Gauge, generate_latest

OUT = Path(__file__).resolve().parent / "fixtures" / "versions"


def _source(root: Path, rel: str) -> str:
    return (root / rel).read_text()


def _cut(text: str, name: str, cls: str | None = None) -> str:
    """The source of top-level ``name`` (or method ``name`` of class ``cls``), decorators dropped."""
    tree = ast.parse(text)
    body = tree.body
    if cls is not None:
        body = next(n for n in body if isinstance(n, ast.ClassDef) and n.name == cls).body
    node = next(n for n in body if isinstance(n, ast.FunctionDef | ast.ClassDef) and n.name == name)
    segment = ast.get_source_segment(text, node)
    assert segment is not None
    if cls is not None:  # a method: dedent to module level
        lines = segment.splitlines()
        segment = "\n".join(line[4:] if line.startswith("    ") else line for line in lines)
    return segment


def _require(text: str, *fragments: str) -> None:
    for fragment in fragments:
        if fragment not in text:
            raise SystemExit(f"format changed: {fragment!r} not in the source")


def pool_fragments(s23: Path) -> dict[str, dict[str, list[str]]]:
    """0.5.23 ``PoolStats`` executed as shipped: the usage part of Decode/Prefill lines per pool kind."""
    text = _source(s23, "srt/managers/scheduler_components/pool_stats_observer.py")
    ns: dict[str, Any] = {"dataclasses": dataclasses, "__name__": __name__}
    exec("from typing import Any, List, Optional, Tuple\n" + _cut(text, "PoolStats"), ns)
    pool = dataclasses.dataclass(ns["PoolStats"])  # its decorator (@dataclasses.dataclass) was cut off
    base = {
        "full_num_used": 20800,
        "full_token_usage": 0.29,
        "full_available_size": 1,
        "full_evictable_size": 0,
    }
    kinds = {
        "plain": pool(**base),
        "hybrid_swa": pool(**base, is_hybrid_swa=True, swa_num_used=4096, swa_token_usage=0.41),
        "hybrid_ssm": pool(**base, is_hybrid_ssm=True, mamba_num_used=12, mamba_usage=0.05),
        "hisparse": pool(
            **base,
            is_hisparse=True,
            hisparse_device_tokens=8192,
            hisparse_device_token_usage=0.62,
            hisparse_host_tokens=65536,
            hisparse_host_token_usage=0.13,
        ),
    }
    return {
        k: {"decode": p.get_decode_usage_msg_parts(), "prefill": p.get_prefill_usage_msg_parts()}
        for k, p in kinds.items()
    }


def log_lines(s59: Path, s23: Path, pools: dict[str, dict[str, list[str]]]) -> list[str]:
    rep = _source(s23, "srt/managers/scheduler_components/metrics_reporter.py")
    _require(
        rep,
        'msg = f"Decode batch{iter_msg}, #running-req: {num_running_reqs}, {token_usage_msg}"',
        'token_usage_msg = ", ".join(pool_stats.get_decode_usage_msg_parts()) + ", "',
        'f"{self._graph_backend_label}: {can_run_cuda_graph}, "',
        'f"gen throughput (token/s): {self.last_gen_throughput:.2f}, "',
        'f"#queue-req: {len(self.scheduler.waiting_queue)}"',
        'f"Prefill batch{iter_msg}, "',
        'f"#new-seq: {prefill_stats.num_new_seqs}, "',
        'f"#pending-token: {prefill_stats.num_pending_tokens}, "',
        'msg += f"#bootstrap-req: {len(self.scheduler.disagg_prefill_bootstrap_queue.queue)}, "',
        'msg += f"#optimistic-req: {num_optimistic}, "',
        'msg += f"input throughput (token/s): {self.last_input_throughput:.2f}"',
        'msg += f"accept len: {spec_accept_length:.2f}, accept rate: {spec_accept_rate:.2f}, "',
        'msg += f"#prealloc-req: {len(self.scheduler.disagg_decode_prealloc_queue.queue)}, "',
    )
    prefix = "[2026-10-30 12:00:00 TP0] "
    out: list[str] = []
    for kind, parts in pools.items():
        usage = ", ".join(parts["decode"]) + ", "
        out.append(
            f"{prefix}Decode batch, #running-req: 5, {usage}cuda graph: True, "
            f"gen throughput (token/s): 144.95, #queue-req: 0  # 0.5.23 decode {kind}"
        )
        usage = ", ".join(parts["prefill"]) + ", "
        out.append(
            f"{prefix}Prefill batch, #new-seq: 1, #new-token: 2048, #cached-token: 0, {usage}"
            f"#running-req: 0, #queue-req: 0, #pending-token: 0, cuda graph: False, "
            f"input throughput (token/s): 46.36  # 0.5.23 prefill {kind}"
        )
    out.append(
        f"{prefix}Prefill batch, #new-seq: 2, #new-token: 4096, #cached-token: 64, token usage: 0.10, "
        "#running-req: 2, #queue-req: 1, #pending-token: 512, #bootstrap-req: 3, #inflight-req: 1, "
        "#optimistic-req: 2, cuda graph: False, input throughput (token/s): 1000.00"
        "  # 0.5.23 PD prefill"
    )
    out.append(
        f"{prefix}Decode batch, #running-req: 24, #token: 233600, token usage: 0.66, accept len: 3.05, "
        "accept rate: 0.68, pre-allocated usage: 0.02, #prealloc-req: 1, #transfer-req: 0, "
        "#retracted-req: 0, cuda graph: True, gen throughput (token/s): 239.06, #queue-req: 2"
        "  # 0.5.23 PD decode + spec"
    )
    old = _source(s59, "srt/managers/scheduler_metrics_mixin.py")
    _require(old, 'msg += f"#prealloc-req: {len(self.disagg_prefill_bootstrap_queue.queue)}, "')
    out.append(
        f"{prefix}Prefill batch, #new-seq: 2, #new-token: 4096, #cached-token: 64, token usage: 0.10, "
        "#running-req: 2, #queue-req: 1, #prealloc-req: 3, #inflight-req: 1, "
        "input throughput (token/s): 1000.00, cuda graph: False  # 0.5.9 PD prefill"
    )
    sched = _source(s23, "srt/managers/scheduler.py")
    _require(
        sched,
        '"KV cache pool is full. Retract requests. "',
        'msg_details = f"#retracted_reqs: {len(retracted_reqs)}, #new_tokens_gained: {new_token_gained}"',
        'msg_details += f", #mamba_num_gained: {mamba_num_gained}"',
        'f", #new_token_ratio: {old_ratio:.4f} -> {new_token_ratio:.4f}"',
    )
    out.append(
        "[2026-10-30 12:00:01 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
        "#new_tokens_gained: 1024, #mamba_num_gained: 2, #new_token_ratio: 0.7000 -> 0.9000  # 0.5.23 retract"
    )
    return out


def crash_lines(s59: Path, s23: Path) -> list[str]:
    engine = _source(s23, "srt/entrypoints/engine.py")
    ns: dict[str, Any] = {}
    exec(_cut(engine, "_scheduler_died_error"), ns)
    proc = types.SimpleNamespace(exitcode=-9, join=lambda timeout=None: None)
    out = [f"RuntimeError: {ns['_scheduler_died_error'](0, proc)}  # 0.5.23 engine.py"]

    watchdog = _source(s23, "srt/utils/watchdog.py")
    logged: list[str] = []
    fake_os = types.SimpleNamespace(getpid=lambda: 0, kill=lambda pid, sig: None)  # no SIGQUIT sent
    logger = types.SimpleNamespace(error=lambda msg, *a, **k: logged.append(msg))
    ns = {"os": fake_os, "signal": signal, "logger": logger}
    exec(_cut(watchdog, "_check_processes", cls="SubprocessWatchdog"), ns)
    crashed = types.SimpleNamespace(is_alive=lambda: False, exitcode=-11, pid=4242)
    this = types.SimpleNamespace(_processes=[crashed], _names=["scheduler_3"])
    ns["_check_processes"](this)
    out += [f"[2026-10-30 12:00:02] {m}  # 0.5.23 watchdog.py" for m in logged]

    probe = _source(s23, "srt/utils/async_probe.py")
    _require(probe, 'message = f"NaN detected! {msg}"')
    tree = ast.parse(probe)
    warn = next(
        n.args[0]
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and getattr(n.func, "attr", "") == "warning" and n.args
    )
    template = ast.literal_eval(warn)
    out.append(f"[2026-10-30 12:00:03 TP0] {template % 'sampler: next_token_logits'}  # 0.5.23 sanitize")
    out.append(
        "/sglang/srt/utils/async_probe.py:117: _assert_no_nan_kernel: block: [0,0,0], thread: [0,0,0] "
        "Assertion `NaN detected! sampler: next_token_logits` failed.  # 0.5.23 device assert (triton)"
    )
    for root, version in ((s59, "0.5.9"), (s23, "0.5.23")):
        _require(
            _source(root, "srt/managers/tokenizer_manager.py"),
            'f"TokenizerManager hit an exception: {traceback}"',
        )
        out.append(
            f"[2026-10-30 12:00:04] TokenizerManager hit an exception: Traceback (most recent call last):  # {version}"
        )
    return out


def metrics_payloads(s23: Path) -> dict[str, str]:
    """0.5.23's queue gauges written by its own ``_log_gauge_queue_count``."""
    text = _source(s23, "srt/observability/metrics_collector.py")
    ns: dict[str, Any] = {"__name__": __name__, "field": dataclasses.field, "Counter": Counter}
    exec("from typing import Dict, List, Optional\nReq = object\n" + _cut(text, "QueueCount"), ns)
    exec(_cut(text, "_log_gauge_queue_count", cls="SchedulerMetricsCollector"), ns)
    queue_count, log_queue = dataclasses.dataclass(ns["QueueCount"]), ns["_log_gauge_queue_count"]
    out: dict[str, str] = {}
    scenarios = {
        # --enable-priority-scheduling: 6 running (4 at priority 0, 2 at 1), 3 waiting at priority 1.
        "priority": [({"tp_rank": "0"}, [0, 0, 0, 0, 1, 1], [1, 1, 1])],
        # --enable-metrics-for-all-schedulers at TP=4, EP=4: every rank writes the same replica figures.
        "all_schedulers_tp4": [
            ({"tp_rank": str(r), "moe_ep_rank": str(r)}, [0] * 5, [0] * 2) for r in range(4)
        ],
        # DP attention (dp_rank per replica) x all schedulers x priority.
        "dp2_priority_all": [
            ({"tp_rank": str(r), "dp_rank": str(r // 2)}, [0] * (3 + r // 2), [1] * (r // 2))
            for r in range(4)
        ],
    }
    for name, ranks in scenarios.items():
        registry = CollectorRegistry()
        base = ["model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank", "priority"]
        extra = sorted({k for labels, _, _ in ranks for k in labels} - set(base))
        gauges = {
            g: Gauge(g, doc, labelnames=base + extra, registry=registry)
            for g, doc in (
                ("sglang:num_running_reqs", "The number of running requests."),
                ("sglang:num_queue_reqs", "The number of requests in the waiting queue."),
            )
        }
        for labels, running, waiting in ranks:
            full = {
                "model_name": "glm-5",
                "engine_type": "unified",
                "pp_rank": "0",
                "moe_ep_rank": "0",
                "priority": "",
            }
            full.update(labels)
            this = types.SimpleNamespace(labels=full, _known_priorities=set())
            for gauge, prios in (
                (gauges["sglang:num_running_reqs"], running),
                (gauges["sglang:num_queue_reqs"], waiting),
            ):
                reqs = [types.SimpleNamespace(priority=p) for p in prios]
                log_queue(
                    this,
                    gauge,
                    queue_count.from_reqs(reqs, enable_priority_scheduling=name != "all_schedulers_tp4"),
                )
        out[name] = generate_latest(registry).decode()
    return out


def loads_documents(s59: Path, s23: Path) -> dict[str, Any]:
    old = _source(s59, "srt/entrypoints/v1_loads.py")
    ns: dict[str, Any] = {}
    exec(_cut(old, "_compute_aggregate"), ns)
    entries = [
        {"dp_rank": 0, "num_running_reqs": 3, "num_waiting_reqs": 1, "token_usage": 0.2, "gen_throughput": 100.0,
         "utilization": 0.5},
        {"dp_rank": 1, "num_running_reqs": 4, "num_waiting_reqs": 0, "token_usage": 0.4, "gen_throughput": 120.0,
         "utilization": 0.6},
    ]  # fmt: skip
    for e in entries:
        e["num_total_reqs"] = e["num_running_reqs"] + e["num_waiting_reqs"]  # get_loads adds it (0.5.9)
    _require(old, '"dp_rank_count": len(loads)', '"aggregate": _compute_aggregate(loads)')
    v059 = {"timestamp": "2026-02-23T00:00:00+00:00", "version": "0.5.9", "dp_rank_count": 2, "loads": entries,
            "aggregate": ns["_compute_aggregate"](entries)}  # fmt: skip

    snap = _source(s23, "srt/managers/load_snapshot.py")
    cls = next(n for n in ast.parse(snap).body if isinstance(n, ast.ClassDef) and n.name == "LoadSnapshot")
    core: dict[str, Any] = {}
    sections = {"memory", "speculative", "lora", "disaggregation", "queues"}
    for stmt in cls.body:
        if (
            isinstance(stmt, ast.AnnAssign)
            and isinstance(stmt.target, ast.Name)
            and stmt.target.id not in sections
        ):
            if stmt.target.id != "timestamp":  # _CORE_KEYS keeps it; its value is the snapshot time
                core[stmt.target.id] = ast.literal_eval(stmt.value) if stmt.value is not None else None
            else:
                core["timestamp"] = 1793000000.0
    new_entries = []
    for e in entries:
        d = dict(core)
        d.update({k: e[k] for k in ("dp_rank", "num_running_reqs", "num_waiting_reqs", "token_usage", "gen_throughput",
                                    "utilization")})  # fmt: skip
        new_entries.append(d)
    new = _source(s23, "srt/entrypoints/v1_loads.py")
    _require(new, '"accelerator": _accelerator_name()', '"num_accelerators": _num_accelerators_per_dp_rank()')
    v023 = {"timestamp": "2026-10-30T00:00:00+00:00", "version": "0.5.23", "accelerator": "NVIDIA RTX PRO 6000",
            "num_accelerators": 1, "loads": new_entries}  # fmt: skip
    return {"0.5.9": v059, "0.5.23": v023}


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    s59, s23 = Path(argv[1]), Path(argv[2])
    OUT.mkdir(parents=True, exist_ok=True)
    pools = pool_fragments(s23)
    (OUT / "pool_usage_parts_0.5.23.json").write_text(json.dumps(pools, indent=1) + "\n")
    (OUT / "log_lines.txt").write_text("\n".join(log_lines(s59, s23, pools)) + "\n")
    (OUT / "crash_lines.txt").write_text("\n".join(crash_lines(s59, s23)) + "\n")
    for name, payload in metrics_payloads(s23).items():
        (OUT / f"metrics_0.5.23_{name}.txt").write_text(payload)
    for version, doc in loads_documents(s59, s23).items():
        (OUT / f"v1_loads_{version}.json").write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
