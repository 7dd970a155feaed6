"""Write ``samples/sglang-0.5.9-tp8-synthetic.txt``: a complete SGLang 0.5.9 ``/metrics`` payload.

The real samples are excerpts; tests of the exporter and ``benchmarks/exporter_latency.py`` need a
whole, well-formed payload of realistic size. This builds one with prometheus_client itself (as
SGLang does), from ``support.sglang_metricnames`` (every family a default TP=8 launch creates,
with its labels and buckets): scheduler series from TP rank 0, and the three families v0.5.9
writes on every rank (queue_time_seconds, cuda_graph_passes_total, cache_config_info) on all 8.
Values are deterministic. No ``_created`` series (SGLang's multiprocess mode has none).

Run: ``PYTHONPATH=tests .venv/bin/python tests/collect/make_sglang_payload.py``
"""

from __future__ import annotations

import random
from pathlib import Path

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
)

from support.sglang_metricnames import of_version

ALL_RANKS = {"sglang:queue_time_seconds", "sglang:cuda_graph_passes_total", "sglang:cache_config_info"}
MODEL = "zai-org/GLM-5-NVFP4"
EXTRA = {
    "mode": ["decode_cuda_graph", "decode_none", "prefill_compute", "prefill_cache", "decode"],
    "stage": ["prefill_forward", "decode_forward", "tokenize", "detokenize"],
    "cache_source": ["device", "total"],
    "endpoint": ["/generate", "/v1/chat/completions", "/health", "/metrics"],
    "method": ["POST"],
    "status_code": ["200", "503"],
    "name": ["generate_request"],
    "page_size": ["64"],
    "num_pages": ["2048"],
}


def main() -> None:
    disable_created_metrics()
    rng = random.Random(7)
    registry = CollectorRegistry()
    seen: set[str] = set()
    for fam in of_version("0.5.9"):  # the payload is a 0.5.9 server's
        if fam.condition is not None or fam.component not in {"scheduler", "tokenizer", "http"}:
            continue
        if fam.name in seen or fam.type not in {"gauge", "counter", "histogram"}:
            continue
        if fam.type == "histogram" and not fam.buckets:
            continue
        base_labels = {"model_name", "engine_type", "tp_rank", "pp_rank", "moe_ep_rank"}
        if not set(fam.labels) <= base_labels | set(EXTRA):
            continue  # DP-cooperation / device-timer families: not in a default launch's output
        seen.add(fam.name)
        name = fam.name.removesuffix("_total") if fam.type == "counter" else fam.name
        cls = {"gauge": Gauge, "counter": Counter, "histogram": Histogram}[fam.type]
        kwargs = {"buckets": fam.buckets} if fam.type == "histogram" else {}
        metric = cls(name, fam.documentation, list(fam.labels), registry=registry, **kwargs)
        ranks = range(8) if fam.name in ALL_RANKS else range(1)
        for rank in ranks:
            base = {"model_name": MODEL, "engine_type": "unified", "tp_rank": str(rank), "pp_rank": "0",
                    "moe_ep_rank": "0"}  # fmt: skip
            extras = [label for label in fam.labels if label in EXTRA]
            combos: list[dict[str, str]] = [{}]
            for label in extras:
                combos = [
                    {**c, label: v} for c in combos for v in EXTRA[label][: 2 if label == "mode" else 4]
                ]
            for combo in combos:
                labels = {k: v for k, v in {**base, **combo}.items() if k in fam.labels}
                child = metric.labels(**labels) if fam.labels else metric
                if fam.type == "gauge":
                    child.set(round(rng.uniform(0, 200), 3))
                elif fam.type == "counter":
                    child.inc(rng.randint(0, 10**6))
                else:
                    top = fam.buckets[-1] if fam.buckets else 10
                    for _ in range(50):
                        child.observe(rng.uniform(0, top / 4))
    out = Path(__file__).resolve().parent / "samples" / "sglang-0.5.9-tp8-synthetic.txt"
    out.write_bytes(generate_latest(registry))
    print(f"{out}: {out.stat().st_size} bytes, {len(seen)} families")


if __name__ == "__main__":
    main()
