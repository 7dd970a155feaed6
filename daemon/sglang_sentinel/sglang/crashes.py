"""Which SGLang log lines say why a server is dying, and which cause wins.

The crash knowledge behind ``logparse.parse_line``'s ``CrashSignature`` events and
``classify_crash``: the kinds (stable label values), their priority (a cause before the generic
markers that follow it) and the texts of SGLang 0.5.9 .. 0.5.23 that name them.
"""

from __future__ import annotations

import re
from enum import StrEnum

__all__ = ["CRASH_PRIORITY", "CrashKind", "match_crash"]


class CrashKind(StrEnum):
    """Why an SGLang server died; values are stable label values (``reason="cuda_oom"``)."""

    # Causes: what actually went wrong.
    PORT_IN_USE = "port_in_use"
    NAN_IN_SAMPLER = "nan_in_sampler"
    #: 0.5.23 ``SGLANG_ENABLE_NAN_LOGITS_CHECK`` device assert: ``NaN detected! <where>`` (the
    #: "device-side assert triggered" that follows is the consequence, not a CUDA fault).
    NAN_DETECTED = "nan_detected"
    CUDA_OOM = "cuda_oom"
    UNSUPPORTED_ARCH = "unsupported_arch"
    NCCL_TIMEOUT = "nccl_timeout"
    NCCL_ERROR = "nccl_error"
    #: Multi-node start-up: torch's rendezvous at ``--dist-init-addr`` failed (rank 0's store gave
    #: up waiting for the other nodes, or a rank >= 1 could not reach rank 0): ``DistStoreError`` /
    #: ``DistNetworkError``. The fix is on another node or the network, not this GPU.
    DIST_INIT_FAILED = "dist_init_failed"
    CUDA_ERROR = "cuda_error"
    WATCHDOG_TIMEOUT = "watchdog_timeout"
    # Markers: SGLang's generic "something failed" lines that follow a cause.
    WARMUP_FAILED = "warmup_failed"
    SCHEDULER_EXCEPTION = "scheduler_exception"
    DETOKENIZER_EXCEPTION = "detokenizer_exception"
    #: ``TokenizerManager hit an exception`` — SGLang then SIGKILLs its whole tree itself, with no
    #: SIGQUIT line (tokenizer_manager.py ``print_exception_wrapper``).
    TOKENIZER_EXCEPTION = "tokenizer_exception"
    RANK_DEAD = "rank_dead"
    #: 0.5.23: ``Rank N scheduler died during initialization (exit code: -9)`` (entrypoints/engine.py).
    SCHEDULER_DIED_INIT = "scheduler_died_init"
    #: 0.5.23 watchdog: ``Subprocess scheduler_N (pid=P) crashed with exit code -11`` (utils/watchdog.py).
    SUBPROCESS_CRASHED = "subprocess_crashed"
    INIT_FAILED = "init_failed"
    CHILD_FAILED = "child_failed"


#: Most specific first: ``classify_crash`` returns the first of these seen anywhere in the tail.
#: NaN beats CUDA error (the sampler assert surfaces as "device-side assert triggered"); OOM beats
#: CUDA error ("CUDA error: out of memory"); an NCCL timeout explains the watchdog that follows.
CRASH_PRIORITY: tuple[CrashKind, ...] = tuple(CrashKind)


# One alternation, one scan per line; group names map to kinds. Order inside the alternation only
# matters within one line, where the earlier (more specific) alternative wins.
_CRASH_PATTERNS: tuple[tuple[CrashKind, str], ...] = (
    (CrashKind.NAN_IN_SAMPLER, r"probability tensor contains either `?inf`?, `?nan`? or element < 0"),
    (CrashKind.NAN_IN_SAMPLER, r"Detected errors during sampling! NaN in the logits"),
    (CrashKind.NAN_DETECTED, r"NaN detected! "),
    (CrashKind.CUDA_OOM, r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory"),
    (CrashKind.CUDA_OOM, r"(?:Prefill|Decode) out of memory\. Try to lower your batch size"),
    (CrashKind.CUDA_OOM, r"Not enough memory\. Please try to increase --mem-fraction-static"),
    (CrashKind.PORT_IN_USE, r"[Aa]ddress already in use|Port is already in use"),
    (CrashKind.PORT_IN_USE, r"is not available in \d+ seconds"),
    (CrashKind.UNSUPPORTED_ARCH, r"Unsupported architecture|no kernel image is available for execution"),
    (CrashKind.NCCL_TIMEOUT, r"Watchdog caught collective operation timeout"),
    (CrashKind.NCCL_TIMEOUT, r"ProcessGroupNCCL's watchdog got stuck"),
    (CrashKind.NCCL_ERROR, r"NCCL error|nccl(?:InternalError|UnhandledCudaError|SystemError)"),
    (CrashKind.NCCL_ERROR, r"nccl(?:InvalidUsage|RemoteError)"),
    (CrashKind.DIST_INIT_FAILED, r"torch\.distributed\.Dist(?:Store|Network)Error"),
    (CrashKind.CUDA_ERROR, r"CUDA error|illegal memory access|device-side assert"),
    (CrashKind.CUDA_ERROR, r"CUDA_ERROR_|cudaError\w+|CUBLAS_STATUS_"),
    (CrashKind.WATCHDOG_TIMEOUT, r"watchdog timeout \(self\.watchdog_timeout=[\d.]+, self\.soft=False\)"),
    (CrashKind.WARMUP_FAILED, r"Initialization failed\. warmup error"),
    (CrashKind.SCHEDULER_EXCEPTION, r"Scheduler hit an exception|DataParallelController hit an exception"),
    (CrashKind.DETOKENIZER_EXCEPTION, r"DetokenizerManager hit an exception"),
    (
        CrashKind.TOKENIZER_EXCEPTION,
        r"TokenizerManager hit an exception|MultiTokenizerRouter hit an exception",
    ),
    (CrashKind.RANK_DEAD, r"Rank \d+ scheduler is dead"),
    (
        CrashKind.SCHEDULER_DIED_INIT,
        r"Rank \d+ scheduler died during initialization \(exit code: (?P<x1>-?\d+)\)",
    ),
    (CrashKind.SUBPROCESS_CRASHED, r"Subprocess \S+ \(pid=\d+\) crashed with exit code (?P<x2>-?\d+)"),
    (CrashKind.INIT_FAILED, r"Initialization failed\."),
    (CrashKind.CHILD_FAILED, r"Received sigquit from a child process|SIGQUIT received\..*one child failed"),
)
_CRASH = re.compile("|".join(f"(?P<k{i}>{p})" for i, (_, p) in enumerate(_CRASH_PATTERNS)))
_CRASH_KINDS = {f"k{i}": kind for i, (kind, _) in enumerate(_CRASH_PATTERNS)}
_EXIT_CODE_KINDS = frozenset({CrashKind.SCHEDULER_DIED_INIT, CrashKind.SUBPROCESS_CRASHED})
# Cheap pre-filter: every crash pattern contains one of these (checked before the big regex).
_CRASH_HINTS = (
    "nan", "NaN", "memory", "Memory", "in use", "not available", "rchitecture", "kernel image",
    "atchdog", "NCCL", "nccl", "CUDA", "cuda", "CUBLAS", "device-side", "failed", "exception", "dead",
    "sigquit", "SIGQUIT", "died", "crashed", "distributed.Dist",
)  # fmt: skip


def match_crash(msg: str) -> tuple[CrashKind, int | None] | None:
    """``(kind, exit code the line states)`` for a log message naming a crash, else ``None``."""
    if not any(h in msg for h in _CRASH_HINTS):
        return None
    crash = _CRASH.search(msg)
    if crash is None or crash.lastgroup is None:
        return None
    # The outer (k…) group closes last, so it is lastgroup even when an x… group matched.
    crash_kind = _CRASH_KINDS[crash.lastgroup]
    code = crash.group("x1") or crash.group("x2") if crash_kind in _EXIT_CODE_KINDS else None
    return crash_kind, int(code) if code is not None else None
