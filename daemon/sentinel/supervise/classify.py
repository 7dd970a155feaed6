"""Why did the server stop? From its exit status plus the tail of its log.

SGLang ends every fatal error by SIGKILLing its own process tree, so the exit status alone says
almost nothing ("killed by signal 9"); the cause is in the log tail, read by
:func:`sentinel.sglang.logparse.classify_crash`. A signal with no crash signature in the tail means
something outside killed it (the OOM killer, an operator).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from sentinel.sglang.logparse import CrashKind, classify_crash
from sentinel.supervise.runners import ExitInfo

__all__ = ["CRASH_REASONS", "RESTART_REASONS", "Crash", "classify_exit"]

# Restart reasons for a server that died (label values of sentinel_server_restarts_total).
CRASH_REASONS: tuple[str, ...] = (
    "cuda_oom",
    "nccl_error",
    "nccl_timeout",
    "watchdog_timeout",
    "nan_in_sampler",
    "unsupported_arch",
    "cuda_error",
    "port_in_use",
    "killed",
    "startup_timeout",
    "preflight",
    "exited",
    "unknown",
)
# Restart reasons for a server that was alive but failed a check, or was restarted on request.
# "external": someone else stopped or restarted the unit (systemd mode); sentinel re-attaches.
CHECK_REASONS: tuple[str, ...] = ("health", "health_generate", "stall", "canary", "manual", "external")
RESTART_REASONS: tuple[str, ...] = CRASH_REASONS + CHECK_REASONS

# Causes keep their own label; SGLang's generic "something failed" markers without a recognised
# cause before them are "unknown" (the marker itself is kept in the crash detail).
_CAUSES: dict[CrashKind, str] = {
    CrashKind.CUDA_OOM: "cuda_oom",
    CrashKind.NCCL_ERROR: "nccl_error",
    CrashKind.NCCL_TIMEOUT: "nccl_timeout",
    CrashKind.WATCHDOG_TIMEOUT: "watchdog_timeout",
    CrashKind.NAN_IN_SAMPLER: "nan_in_sampler",
    CrashKind.UNSUPPORTED_ARCH: "unsupported_arch",
    CrashKind.CUDA_ERROR: "cuda_error",
    CrashKind.PORT_IN_USE: "port_in_use",
}


@dataclass(frozen=True, slots=True)
class Crash:
    reason: str  # one of CRASH_REASONS
    exit: ExitInfo | None
    detail: str  # for humans: the exit description and the signature found
    timestamp: float


def classify_exit(exit_info: ExitInfo, tail: Sequence[str], timestamp: float) -> Crash:
    kind = classify_crash(tail)
    if kind is not None:
        reason = _CAUSES.get(kind, "unknown")
        return Crash(reason, exit_info, f"{exit_info.description}; log: {kind.value}", timestamp)
    if exit_info.signal is not None:
        # No SGLang crash line before the signal: it did not kill itself.
        return Crash(
            "killed", exit_info, f"{exit_info.description}; no crash signature in the log", timestamp
        )
    if exit_info.returncode == 0:
        return Crash("exited", exit_info, f"{exit_info.description} (clean exit, not requested)", timestamp)
    return Crash("unknown", exit_info, f"{exit_info.description}; no crash signature in the log", timestamp)
