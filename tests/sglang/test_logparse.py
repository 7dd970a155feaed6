"""The log parser against every real SGLang log line in shared/reference/samples.

Expected values are written out by hand from the sample files, so a parser that drifts from the
real layout fails here, not in the collector at 3 a.m.
"""

from __future__ import annotations

import random
from datetime import datetime
from pathlib import Path

import pytest

from sglang_sentinel.sglang.logparse import (
    CrashKind,
    CrashSignature,
    DecodeBatch,
    Draining,
    HealthCheckFailed,
    HttpAccess,
    KvRetraction,
    Milestone,
    MilestoneKind,
    PrefillBatch,
    Ranks,
    ServerCapacity,
    classify_crash,
    parse_line,
)

# Real SGLang output (copies of the project's reference samples, kept in the repository).
SAMPLES = Path(__file__).resolve().parents[1] / "collect" / "samples"


def sample_lines(name: str) -> list[str]:
    path = SAMPLES / name
    return [line for line in path.read_text().splitlines() if line and not line.startswith("# source:")]


def test_every_sample_log_line_is_understood() -> None:
    files = sorted(SAMPLES.glob("*log*.txt"))
    assert files, SAMPLES  # shipped with the tests
    seen: dict[type, int] = {}
    for path in files:
        for line in path.read_text().splitlines():
            if not line or line.startswith("# source:"):
                continue
            event = parse_line(line)
            assert event is not None, f"{path.name}: unparsed line {line!r}"
            seen[type(event)] = seen.get(type(event), 0) + 1
    assert seen[DecodeBatch] == 37
    assert seen[PrefillBatch] == 10
    assert seen[HttpAccess] == 15


def test_decode_tp_prefix_pr22331() -> None:
    events = [parse_line(line) for line in sample_lines("sglang-decode-log-pr22331.txt")]
    first = events[0]
    assert first == DecodeBatch(
        timestamp=datetime(2026, 4, 8, 14, 5, 21),
        ranks=Ranks(tp=0),
        running_req=5,
        used_tokens=20800,
        token_usage=0.29,
        gen_throughput=144.95,
        queue_req=0,
        cuda_graph=True,
        graph_backend="cuda",
    )
    assert [e.gen_throughput for e in events if isinstance(e, DecodeBatch)] == [
        144.95, 140.27, 136.39, 139.89, 144.10, 157.64, 153.78, 157.11,
    ]  # fmt: skip


def test_decode_trailing_comma_space_pr13023() -> None:
    events = [parse_line(line) for line in sample_lines("sglang-decode-log-pr13023.txt")]
    assert all(isinstance(e, DecodeBatch) for e in events)
    decode = [e for e in events if isinstance(e, DecodeBatch)]
    assert [e.running_req for e in decode] == [46, 36, 28, 22, 20, 15, 12, 11]
    assert [e.cuda_graph for e in decode] == [False, False, True, True, True, True, True, True]
    assert decode[0].ranks == Ranks()
    assert decode[0].used_tokens == 34901
    assert decode[0].extra == ()


def test_decode_trailing_comma_kv_nearly_full_issue14972() -> None:
    event = parse_line(sample_lines("sglang-decode-log-issue14972.txt")[0])
    assert isinstance(event, DecodeBatch)
    assert (event.running_req, event.used_tokens, event.token_usage, event.queue_req) == (6, 1920, 0.94, 5)
    assert event.gen_throughput == 446.45
    assert event.extra == ()


def test_decode_old_format_with_period_issue3909() -> None:
    events = [parse_line(line) for line in sample_lines("sglang-decode-log-issue3909-old-format.txt")]
    decode = [e for e in events if isinstance(e, DecodeBatch)]
    assert len(decode) == 9
    assert decode[0].cuda_graph is None
    assert decode[0].graph_backend is None
    assert decode[0].timestamp == datetime(2025, 2, 27, 4, 46, 39)
    assert [e.used_tokens for e in decode][:3] == [62531, 62851, 63171]
    assert decode[-1].token_usage == 0.13


def test_decode_dp_pd_variant_pr17392() -> None:
    decode = [parse_line(line) for line in sample_lines("sglang-decode-log-dp-pd-pr17392.txt")]
    batches = [e for e in decode if isinstance(e, DecodeBatch)]
    assert [e.ranks for e in batches] == [
        Ranks(dp=0, tp=0, ep=0),
        Ranks(dp=2, tp=2, ep=2),
        Ranks(dp=3, tp=3, ep=3),
    ]
    first = batches[0]
    assert first.prealloc_usage == 0.0
    assert (first.prealloc_req, first.transfer_req, first.retracted_req) == (0, 0, 0)
    assert (first.running_req, first.used_tokens, first.gen_throughput) == (21, 19574, 1774.38)


def test_spec_npu_variant_pr608() -> None:
    events = [parse_line(line) for line in sample_lines("sglang-prefill-decode-log-spec-npu-pr608.txt")]
    prefill = events[0]
    assert prefill == PrefillBatch(
        timestamp=datetime(2026, 7, 21, 15, 0, 13),
        ranks=Ranks(tp=0, ep=0),
        new_seq=8,
        new_token=54400,
        cached_token=482304,
        token_usage=0.66,
        running_req=16,
        queue_req=2,
        input_throughput=2793.64,
        cuda_graph=False,
        graph_backend="npu",
        pending_token=0,
    )
    decode = events[1]
    assert isinstance(decode, DecodeBatch)
    assert (decode.accept_len, decode.accept_rate) == (3.05, 0.68)
    assert decode.graph_backend == "npu"
    assert decode.cuda_graph is True
    assert [e.accept_len for e in events if isinstance(e, DecodeBatch)] == [3.05, 2.63, 2.83]


def test_mixed_log_pr22166() -> None:
    events = [parse_line(line) for line in sample_lines("sglang-mixed-log-pr22166.txt")]
    kinds = [type(e).__name__ for e in events]
    assert kinds == ["DecodeBatch"] + ["HttpAccess", "PrefillBatch"] * 3 + ["HttpAccess"] * 3
    prefill = [e for e in events if isinstance(e, PrefillBatch)]
    assert [e.new_token for e in prefill] == [158, 290, 160]
    assert [e.input_throughput for e in prefill] == [559.53, 1670.03, 4099.38]
    assert prefill[0].cached_token == 0
    assert prefill[0].running_req == 31
    assert prefill[0].cuda_graph is True
    access = events[1]
    assert access == HttpAccess(
        datetime(2026, 4, 5, 20, 2, 51), "127.0.0.1:40052", "POST", "/v1/chat/completions", 200
    )


def test_prefill_hybrid_swa_v059_order_llama_benchy() -> None:
    events = [parse_line(line) for line in sample_lines("sglang-prefill-log-llama-benchy-issue15.txt")]
    prefill = [e for e in events if isinstance(e, PrefillBatch)]
    assert len(prefill) == 6
    first = prefill[0]
    assert (first.full_token_usage, first.swa_token_usage, first.token_usage) == (0.01, 0.02, 0.02)
    assert first.input_throughput == 46.36
    assert first.cuda_graph is False
    assert first.new_token == 2048
    assert first.pending_token is None


def test_startup_sample_issue33483() -> None:
    begin, end = (parse_line(line) for line in sample_lines("sglang-startup-log-issue33483.txt"))
    assert isinstance(begin, Milestone)
    assert begin.kind is MilestoneKind.CUDA_GRAPH_CAPTURE_BEGIN
    assert begin.timestamp is None
    assert end == ServerCapacity(
        timestamp=None,
        ranks=Ranks(),
        max_total_num_tokens=2980168,
        chunked_prefill_size=4096,
        max_prefill_tokens=16384,
        max_running_requests=4096,
        context_len=32768,
        available_gpu_mem_bytes=round(6.95 * (1 << 30)),
    )


# Lines below are built from the v0.5.9 source's f-strings (file:line noted) with plausible values.
@pytest.mark.parametrize(
    ("line", "kind"),
    [
        ("[2026-11-30 01:00:00] The server is fired up and ready to roll!", MilestoneKind.READY),
        (
            "[2026-11-30 01:00:00] server_args=ServerArgs(model_path='x', tp_size=8)",
            MilestoneKind.SERVER_ARGS,
        ),
        ("[2026-11-30 01:00:00 TP3] Init torch distributed begin.", MilestoneKind.INIT_DISTRIBUTED_BEGIN),
        (
            "[2026-11-30 01:00:00 TP3] Init torch distributed ends. elapsed=2.31 s, mem usage=0.5 GB",
            MilestoneKind.INIT_DISTRIBUTED_END,
        ),
        ("[2026-11-30 01:00:00 TP0] Load weight begin. avail mem=94.10 GB", MilestoneKind.LOAD_WEIGHT_BEGIN),
        (
            "[2026-11-30 01:00:00 TP0] Load weight end. elapsed=36.02 s, type=GlmMoeDsaForCausalLM, "
            "dtype=torch.bfloat16, avail mem=37.00 GB, mem usage=57.10 GB.",
            MilestoneKind.LOAD_WEIGHT_END,
        ),
        (
            "[2026-11-30 01:00:00 TP0] KV Cache is allocated. #tokens: 1046528, KV size: 23.50 GB",
            MilestoneKind.KV_CACHE_ALLOCATED,
        ),
        ("[2026-11-30 01:00:00 TP0] Memory pool end. avail mem=13.20 GB", MilestoneKind.MEMORY_POOL_END),
        (
            "[2026-11-30 01:00:00 TP0] Capture cuda graph bs [1, 2, 4, 8]",
            MilestoneKind.CUDA_GRAPH_CAPTURE_BEGIN,
        ),
        (
            "INFO:     Uvicorn running on http://127.0.0.1:30000 (Press CTRL+C to quit)",
            MilestoneKind.HTTP_LISTENING,
        ),
    ],
)
def test_startup_milestones(line: str, kind: MilestoneKind) -> None:
    event = parse_line(line)
    assert isinstance(event, Milestone)
    assert event.kind is kind


def test_health_check_failed_http_server_l534() -> None:
    line = (
        "[2026-11-30 03:01:02] Health check failed. Server couldn't get a response from detokenizer for last "
        "20 seconds. tic start time: 03:00:42. last_heartbeat time: 02:59:10"
    )
    assert parse_line(line) == HealthCheckFailed(
        datetime(2026, 11, 30, 3, 1, 2), Ranks(), 20.0, "03:00:42", "02:59:10"
    )


def test_retraction_and_drain() -> None:
    retract = parse_line(
        "[2026-11-30 03:01:02 TP0] KV cache pool is full. Retract requests. #retracted_reqs: 3, "
        "#new_tokens_gained: 4096, #new_token_ratio: 0.4000 -> 0.7000"
    )
    assert retract == KvRetraction(datetime(2026, 11, 30, 3, 1, 2), Ranks(tp=0), 3, 4096, 0.4, 0.7)
    drain = parse_line(
        "[2026-11-30 03:01:02] Gracefully exiting... Remaining number of requests 7. Remaining requests "
        "remaining_rids=['a', 'b']."
    )
    assert drain == Draining(datetime(2026, 11, 30, 3, 1, 2), Ranks(), 7)


def test_millisecond_timestamps_and_iteration_tag() -> None:
    event = parse_line(
        "[2026-11-30 03:01:02.045 TP0] Decode batch [1234], #running-req: 2, #token: 10, token usage: 0.00, "
        "cuda graph: False, gen throughput (token/s): 25.00, #queue-req: 0, fwd occupancy: 81%"
    )
    assert isinstance(event, DecodeBatch)
    assert event.timestamp == datetime(2026, 11, 30, 3, 1, 2, 45000)
    assert event.iteration == 1234
    assert event.extra == (("fwd occupancy", "81%"),)


def test_hybrid_swa_decode_folds_usage() -> None:
    event = parse_line(
        "[2026-11-30 03:01:02] Decode batch, #running-req: 2, #full token: 100, full token usage: 0.10, "
        "#swa token: 300, swa token usage: 0.30, cuda graph: True, gen throughput (token/s): 25.00, "
        "#queue-req: 1"
    )
    assert isinstance(event, DecodeBatch)
    assert (event.used_tokens, event.token_usage) == (300, 0.30)


@pytest.mark.parametrize(
    ("line", "kind"),
    [
        (
            "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB. GPU 0 has a total "
            "capacity of 94.97 GiB of which 1.10 GiB is free.",
            CrashKind.CUDA_OOM,
        ),
        ("RuntimeError: CUDA error: out of memory", CrashKind.CUDA_OOM),
        (
            "RuntimeError: Not enough memory. Please try to increase --mem-fraction-static. "
            "Current value: 0.5",
            CrashKind.CUDA_OOM,
        ),
        (
            "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
            CrashKind.NAN_IN_SAMPLER,
        ),
        ("ValueError: Detected errors during sampling! NaN in the logits.", CrashKind.NAN_IN_SAMPLER),
        ("RuntimeError: CUDA error: an illegal memory access was encountered", CrashKind.CUDA_ERROR),
        ("torch.AcceleratorError: CUDA error: device-side assert triggered", CrashKind.CUDA_ERROR),
        (
            "[rank0]:[E1130 03:00:00.000000000 ProcessGroupNCCL.cpp:632] [Rank 0] Watchdog caught collective "
            "operation timeout: WorkNCCL(SeqNum=5, OpType=ALLREDUCE, Timeout(ms)=600000) ran for 600005 ms",
            CrashKind.NCCL_TIMEOUT,
        ),
        (
            "torch.distributed.DistBackendError: NCCL error in: ../torch/csrc/distributed/c10d/"
            "NCCLUtils.hpp:275, unhandled system error, NCCL version 2.27.3",
            CrashKind.NCCL_ERROR,
        ),
        (
            "[2026-11-30 03:00:00 TP0] Scheduler watchdog timeout "
            "(self.watchdog_timeout=300, self.soft=False)",
            CrashKind.WATCHDOG_TIMEOUT,
        ),
        (
            "ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 30000): "
            "address already in use",
            CrashKind.PORT_IN_USE,
        ),
        (
            "RuntimeError: TllmGenFmhaRunner: Unsupported architecture",
            CrashKind.UNSUPPORTED_ARCH,
        ),
        (
            "[2026-11-30 03:00:00 TP0] Scheduler hit an exception: Traceback (most recent call last):",
            CrashKind.SCHEDULER_EXCEPTION,
        ),
        (
            "[2026-11-30 03:00:00] DetokenizerManager hit an exception: Traceback (most recent call last):",
            CrashKind.DETOKENIZER_EXCEPTION,
        ),
        (
            "[2026-11-30 03:00:00] Received sigquit from a child process. It usually means the child failed.",
            CrashKind.CHILD_FAILED,
        ),
        (
            "[2026-11-30 03:00:00] SIGQUIT received. signum=3, frame=None. "
            "It usually means one child failed.",
            CrashKind.CHILD_FAILED,
        ),
        (
            "[2026-11-30 03:00:00] Rank 3 scheduler is dead. Please check if there are relevant logs.",
            CrashKind.RANK_DEAD,
        ),
        ("[2026-11-30 03:00:00] Initialization failed. warmup error: Traceback", CrashKind.WARMUP_FAILED),
        ("RuntimeError: Initialization failed. Please see the error messages above.", CrashKind.INIT_FAILED),
    ],
)
def test_crash_signatures(line: str, kind: CrashKind) -> None:
    event = parse_line(line)
    assert isinstance(event, CrashSignature)
    assert event.kind is kind
    assert event.line == line


def test_soft_watchdog_is_not_a_crash() -> None:
    line = "[2026-11-30 03:00:00 TP0] Scheduler watchdog timeout (self.watchdog_timeout=60, self.soft=True)"
    assert parse_line(line) is None


def test_request_log_text_never_looks_like_a_crash() -> None:
    line = "[2026-11-30 03:00:00] Receive: obj=GenerateReqInput(text='why CUDA out of memory?')"
    assert parse_line(line) is None


def test_classify_crash_prefers_the_cause_over_markers() -> None:
    tail = [
        "[2026-11-30 03:00:00 TP0] Decode batch, #running-req: 6, #token: 1920, token usage: 0.94, "
        "cuda graph: True, gen throughput (token/s): 446.45, #queue-req: 5",
        "[2026-11-30 03:00:01 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/sglang/srt/layers/sampler.py", line 120, in forward',
        "torch.AcceleratorError: CUDA error: device-side assert triggered",
        "RuntimeError: probability tensor contains either `inf`, `nan` or element < 0",
        "[2026-11-30 03:00:01] Received sigquit from a child process. It usually means the child failed.",
    ]
    assert classify_crash(tail) is CrashKind.NAN_IN_SAMPLER
    assert classify_crash(tail[:2]) is CrashKind.SCHEDULER_EXCEPTION
    assert classify_crash(tail[:1]) is None
    assert classify_crash([]) is None


@pytest.mark.parametrize(
    "line",
    [
        "",
        "\n",
        "[",
        "[2026-11-30 03:00:00] Decode batch, #running-req: x, #token: 1, token usage: 0.1, "
        "gen throughput (token/s): 1, #queue-req: 0",
        "[2026-11-30 03:00:00] Decode batch, #running-req: 1",
        "[2026-11-30 03:00:00] Prefill batch, #new-seq: 1",
        "[2026-13-45 99:99:99] Decode batch, #running-req: 1, #token: 1, token usage: 0.1, "
        "gen throughput (token/s): 1, #queue-req: 0",
        "[2026-11-30 03:00:00] Decode batch, cuda graph: maybe, #running-req: 1, #token: 1, "
        "token usage: 0.1, gen throughput (token/s): 1, #queue-req: 0",
        "Decode batchy",
        "[2026-11-30 03:00:00] Health check failed. garbled",
        "[2026-11-30 03:00:00] Gracefully exiting... Remaining number of requests many.",
        "just a line of model output",
    ],
)
def test_malformed_lines_are_none(line: str) -> None:
    assert parse_line(line) is None


def test_never_raises_on_noise() -> None:
    rng = random.Random(7)
    real = [line for path in sorted(SAMPLES.glob("*log*.txt")) for line in path.read_text().splitlines()]
    alphabet = "[]:,. #-=0123456789abcdeTPDcudagrphbtchn\x00é"
    for _ in range(3000):
        if real and rng.random() < 0.5:
            base = rng.choice(real)
            cut = rng.randrange(len(base) + 1)
            line = base[:cut] + "".join(rng.choice(alphabet) for _ in range(rng.randrange(5))) + base[cut:]
        else:
            line = "".join(rng.choice(alphabet) for _ in range(rng.randrange(80)))
        parse_line(line)  # must not raise


def test_batch_line_behind_a_foreign_prefix() -> None:
    # SGLANG_LOGGING_CONFIG_PATH formats or a log forwarder put something else before the message.
    line = (
        "sglang[4242]: INFO Decode batch, #running-req: 5, #token: 20800, token usage: 0.29, "
        "cuda graph: True, gen throughput (token/s): 144.95, #queue-req: 0"
    )
    event = parse_line(line)
    assert isinstance(event, DecodeBatch)
    assert event.timestamp is None
    assert (event.running_req, event.gen_throughput) == (5, 144.95)
    assert parse_line("user prompt: please Decode batch, then stop") is None
