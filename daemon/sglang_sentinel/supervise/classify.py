"""Why did the server stop? From its exit status plus the tail of its log.

SGLang ends every fatal error by SIGKILLing its own process tree, so the exit status alone says
almost nothing ("killed by signal 9"); the cause is in the log tail, read by
:func:`sglang_sentinel.sglang.logparse.classify_crash`. A signal with no crash signature in the tail means
something outside killed it (the OOM killer, an operator).

SGLang's generic markers say SGLang itself brought the tree down even when no cause precedes them:
``TokenizerManager hit an exception`` is followed by a SIGKILL of the whole tree and *no* SIGQUIT
line, so it is ``unknown`` (SGLang's own crash), never ``killed``. A child's exit status printed by
SGLang (0.5.23: ``Rank N scheduler died during initialization (exit code: -9)``, the watchdog's
``Subprocess scheduler_N (pid=…) crashed with exit code -11``) is kept in :attr:`Crash.child_exit_code`:
a SIGKILLed child with no cause in the log was killed from outside (the kernel OOM killer, usually)
and counts as ``killed``; a SIGSEGV stays ``unknown`` with "segfault" in the detail.
"""

from __future__ import annotations

import signal
from collections.abc import Sequence
from dataclasses import dataclass

from sglang_sentinel.sglang.logparse import CrashKind, CrashSignature, classify_crash, parse_line
from sglang_sentinel.supervise.runners import ExitInfo

__all__ = ["CRASH_REASONS", "RESTART_REASONS", "Crash", "classify_exit", "decisive_lines"]

# Restart reasons for a server that died (label values of sentinel_server_restarts_total).
CRASH_REASONS: tuple[str, ...] = (
    "cuda_oom",
    "nccl_error",
    "nccl_timeout",
    "dist_init_failed",
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
# "group": a multi-node group's rank-0 agent stopped every rank (sentinel/group/).
# "start_limit_hit": systemd refused the unit's start (its StartLimitBurst=); nothing ran.
# "fallback": the configured launch failed correctness; relaunched with a known-good one (fallback.py).
CHECK_REASONS: tuple[str, ...] = (
    "health",
    "health_generate",
    "stall",
    "canary",
    "manual",
    "external",
    "group",
    "start_limit_hit",
    "fallback",
)
RESTART_REASONS: tuple[str, ...] = CRASH_REASONS + CHECK_REASONS

# Causes keep their own label; SGLang's generic "something failed" markers without a recognised
# cause before them are "unknown" (the marker itself is kept in the crash detail).
_CAUSES: dict[CrashKind, str] = {
    CrashKind.CUDA_OOM: "cuda_oom",
    CrashKind.NCCL_ERROR: "nccl_error",
    CrashKind.NCCL_TIMEOUT: "nccl_timeout",
    CrashKind.DIST_INIT_FAILED: "dist_init_failed",
    CrashKind.WATCHDOG_TIMEOUT: "watchdog_timeout",
    CrashKind.NAN_IN_SAMPLER: "nan_in_sampler",
    # 0.5.23's device-side NaN assert on logits/probs (sampler, spec verify): same alert as the
    # sampler's own NaN check, not a CUDA fault; the kind stays in the detail.
    CrashKind.NAN_DETECTED: "nan_in_sampler",
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
    #: A child's exit status as SGLang logged it (negative = killed by that signal), if it did.
    child_exit_code: int | None = None
    #: The log lines the verdict rests on (crash signatures, else the last lines), for the screens.
    lines: tuple[str, ...] = ()


def _child_exit_code(tail: Sequence[str]) -> int | None:
    """The last child exit status SGLang printed in the tail (scheduler init death, watchdog)."""
    code: int | None = None
    for line in tail:
        if "exit code" in line:
            event = parse_line(line)
            if isinstance(event, CrashSignature) and event.exit_code is not None:
                code = event.exit_code
    return code


_SIGNAL_HINTS = {
    signal.SIGKILL: " (from outside SGLang: usually the kernel OOM killer, see dmesg -T | grep -i oom)",
    signal.SIGSEGV: " (segfault in native code)",
}


def _describe_child(code: int) -> str:
    if code >= 0:
        return f"child exited with status {code}"
    try:
        sig = signal.Signals(-code)
    except ValueError:
        return f"child killed by signal {-code}"
    return f"child killed by {sig.name}{_SIGNAL_HINTS.get(sig, '')}"


def classify_exit(exit_info: ExitInfo, tail: Sequence[str], timestamp: float) -> Crash:
    kind = classify_crash(tail)
    if kind is not None:
        reason = _CAUSES.get(kind, "unknown")
        detail = f"{exit_info.description}; log: {kind.value}"
        child = _child_exit_code(tail)
        if child is not None:
            detail += f"; {_describe_child(child)}"
            if reason == "unknown" and child == -signal.SIGKILL:
                reason = "killed"  # SGLang only reports it; the SIGKILL came from outside
        return Crash(reason, exit_info, detail, timestamp, child)
    if exit_info.signal is not None:
        # No SGLang crash line before the signal: it did not kill itself.
        return Crash(
            "killed", exit_info, f"{exit_info.description}; no crash signature in the log", timestamp
        )
    if exit_info.returncode == 0:
        return Crash("exited", exit_info, f"{exit_info.description} (clean exit, not requested)", timestamp)
    return Crash("unknown", exit_info, f"{exit_info.description}; no crash signature in the log", timestamp)


_MAX_LINE = 300


def decisive_lines(tail: Sequence[str], keep: int = 3) -> tuple[str, ...]:
    """The lines an operator needs to see: the crash signatures in the tail (the last ``keep``),
    else the last ``keep`` non-empty lines; each cut to a screen's width."""
    signatures = [line for line in tail if isinstance(parse_line(line), CrashSignature)]
    chosen = signatures or [line for line in tail if line.strip()]
    return tuple(line.strip()[:_MAX_LINE] for line in chosen[-keep:])
