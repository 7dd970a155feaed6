# ruff: noqa: E501  (data table: a row's source citation stays on one line to be greppable)
"""The one place that knows which SGLang version does what.

Every reader that depends on SGLang's behaviour (log layout, metric names and labels, crash texts,
``/v1/loads`` shape, CLI flags, entrypoint) either copes with every known version at once (the
log parser, ``series.server_total``) or asks here. Each :class:`Change` says what changed, between
which versions, and where in the wheel (path inside the unpacked wheel, ``sglang/…``) or which PR
shows it. ``docs/sglang-versions.md`` lists the same rows for humans; a test keeps them in step.

Evidence ranges: only some wheels were read (:data:`SOURCES_READ`). A change is recorded with
``old_until`` (newest version read that still behaves the old way) and ``new_from`` (oldest read
that behaves the new way); a version in between is *assumed* to behave the new way (the newest
known behaviour), and :func:`resolve` says so.

Unknown versions: a version newer than :data:`NEWEST_KNOWN` (or one that cannot be parsed or
detected) behaves as the newest known one. :func:`note_version` logs that once per version string
(``sglang_version_unknown``); the ``sglang`` collector exports ``sentinel_sglang_version_known``.

API
---
``parse_version("0.5.10.post1") -> Version`` (raises ``ValueError``), ``Version`` compares as a tuple.
``resolve(text | None) -> Resolution`` — the version to behave as, and whether it is known.
``behaves_new(key, version) -> bool`` — whether ``version`` has change ``key``.
``change(key) -> Change``; ``CHANGES``: every row.
"""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from typing import Literal, NamedTuple

import structlog

__all__ = [
    "CHANGES",
    "NEWEST_KNOWN",
    "OLDEST_KNOWN",
    "SOURCES_READ",
    "Change",
    "Resolution",
    "Version",
    "behaves_new",
    "change",
    "note_version",
    "parse_version",
    "resolve",
]

log = structlog.get_logger(__name__)


class Version(NamedTuple):
    major: int
    minor: int
    patch: int
    #: ``.postN``; pre-releases (``rc``/``dev``) sort below the release: -1.
    post: int = 0

    def __str__(self) -> str:
        base = f"{self.major}.{self.minor}.{self.patch}"
        return base + (f".post{self.post}" if self.post > 0 else "")


_VERSION = re.compile(
    r"v?(?P<major>\d+)\.(?P<minor>\d+)(?:\.(?P<patch>\d+))?"
    r"(?:\.?post(?P<post>\d+)|(?P<pre>\.?(?:rc|dev|a|b)\d*))?(?:\+[\w.]*)?"
)


def parse_version(text: str) -> Version:
    """``0.5.9``, ``v0.5.23``, ``0.5.10.post1``, ``0.5.24rc0``, ``0.5.24.dev3+g1234``. Raises ValueError."""
    m = _VERSION.fullmatch(text.strip())
    if m is None:
        raise ValueError(f"not an SGLang version: {text!r}")
    post = int(m["post"]) if m["post"] else (-1 if m["pre"] else 0)
    return Version(int(m["major"]), int(m["minor"]), int(m["patch"] or 0), post)


#: Wheels whose source was read for this table, and how much of each.
SOURCES_READ: dict[str, str] = {
    "0.5.9": "whole wheel (log formatters, metrics collector, /v1/loads, crash texts, server_args)",
    "0.5.19": "server_args.py, arg_groups/, launch_server.py, environ.py only",
    "0.5.20": "server_args.py, arg_groups/, launch_server.py only",
    "0.5.21": "server_args.py, arg_groups/, launch_server.py only",
    "0.5.23": "whole wheel (log formatters, metrics collector, /v1/loads, crash texts, arg_groups)",
}
OLDEST_KNOWN = Version(0, 5, 9)
NEWEST_KNOWN = Version(0, 5, 23)

Area = Literal["log", "metrics", "loads", "crash", "cli", "entrypoint", "env"]


@dataclass(frozen=True, slots=True)
class Change:
    key: str
    area: Area
    what: str
    #: Newest version read that still behaves the old way (``None``: not seen).
    old_until: str | None
    #: Oldest version read that behaves the new way.
    new_from: str
    #: Where it shows: a path inside the wheel (``sglang/srt/…``, of ``new_from`` unless stated) or a PR.
    source: str
    #: How sentinel copes.
    handling: str


CHANGES: tuple[Change, ...] = (
    # --- log lines ---------------------------------------------------------------------------
    Change("log.hisparse_usage", "log",
           "--enable-hisparse: Decode lines print '#gpu token/gpu token usage/#cpu token/cpu token usage' "
           "and no 'token usage'",
           "0.5.9", "0.5.23", "sglang/srt/managers/scheduler_components/pool_stats_observer.py "
           "PoolStats.get_decode_usage_msg_parts",
           "logparse: token_usage = the largest pool usage printed (gpu for hisparse)"),
    Change("log.bootstrap_req", "log",
           "PD prefill: '#prealloc-req' (bootstrap queue) renamed '#bootstrap-req', '#optimistic-req' added",
           "0.5.9", "0.5.23", "sglang/srt/managers/scheduler_components/metrics_reporter.py "
           "report_prefill_stats (0.5.9: sglang/srt/managers/scheduler_metrics_mixin.py L224)",
           "logparse: both names land in PrefillBatch.bootstrap_req"),
    Change("log.prefill_extra_fields", "log",
           "Prefill lines may carry '#replay-token', 'est. prefill TFLOPS/s (per GPU)', forward occupancy; "
           "Decode lines 'cap len', 'block accept len', '#host-receive-req', est. TFLOPS/BW; 'musa graph'",
           "0.5.9", "0.5.23", "sglang/srt/managers/scheduler_components/metrics_reporter.py",
           "logparse: fields parsed by key; unknown ones kept in .extra"),
    Change("log.retract_mamba", "log",
           "Retraction line gains '#mamba_num_gained: N' between #new_tokens_gained and #new_token_ratio",
           "0.5.9", "0.5.23", "sglang/srt/managers/scheduler.py ('KV cache pool is full. Retract requests.')",
           "logparse: retraction parsed as key: value pairs"),
    Change("log.nan_sanitized", "log",
           "SGLANG_SANITIZE_NAN_LOGITS: 'NaN detected in <where>; values were sanitized before sampling.' "
           "(once per process)",
           "0.5.9", "0.5.23", "sglang/srt/utils/async_probe.py _AsyncNanWarner.check",
           "NanSanitized event, counted as sentinel_sglang_log_nan_sanitized_total"),
    # --- crash texts --------------------------------------------------------------------------
    Change("crash.nan_detected", "crash",
           "SGLANG_ENABLE_NAN_LOGITS_CHECK: device assert 'NaN detected! <where>' then 'device-side assert "
           "triggered' (0.5.9 raised 'Detected errors during sampling! NaN in the logits.')",
           "0.5.9", "0.5.23", "sglang/srt/utils/async_probe.py maybe_detect_nan; 0.5.9: "
           "sglang/srt/layers/sampler.py L67-72",
           "CrashKind.NAN_DETECTED, restart reason nan_in_sampler (not cuda_error)"),
    Change("crash.scheduler_died_init", "crash",
           "'Rank N scheduler died during initialization (exit code: C). If exit code is -9 (SIGKILL), a "
           "common cause is the OS OOM killer.' (0.5.9: 'Rank N scheduler is dead.')",
           "0.5.9", "0.5.23", "sglang/srt/entrypoints/engine.py _scheduler_died_error",
           "CrashKind.SCHEDULER_DIED_INIT with exit_code; -9 → reason killed"),
    Change("crash.subprocess_watchdog", "crash",
           "Subprocess watchdog: 'Subprocess scheduler_N (pid=P) crashed with exit code C. Triggering "
           "SIGQUIT for cleanup...'",
           "0.5.9", "0.5.23", "sglang/srt/utils/watchdog.py SubprocessWatchdog._check_processes",
           "CrashKind.SUBPROCESS_CRASHED with exit_code"),
    Change("crash.tokenizer_exception", "crash",
           "'TokenizerManager hit an exception' then kill_process_tree(include_parent=True): SIGKILL, no "
           "SIGQUIT line (both versions)",
           None, "0.5.9", "sglang/srt/managers/tokenizer_manager.py print_exception_wrapper (both)",
           "CrashKind.TOKENIZER_EXCEPTION: SGLang's own crash (unknown), never 'killed'"),
    # --- metrics ------------------------------------------------------------------------------
    Change("metrics.priority_label", "metrics",
           "--enable-priority-scheduling: scheduler labels gain priority=''; queue gauges written as the "
           "total (priority='') and per priority (priority='<n>')",
           "0.5.9", "0.5.23", "sglang/srt/observability/metrics_collector.py _log_gauge_queue_count",
           "series.server_total keeps priority='' only"),
    Change("metrics.all_schedulers", "metrics",
           "--enable-metrics-for-all-schedulers: every TP rank writes the scheduler series (else only "
           "attention-TP rank 0)",
           None, "0.5.9", "sglang/srt/managers/scheduler_metrics_mixin.py L100; 0.5.23: "
           "sglang/srt/observability/metrics_collector.py init_new",
           "series.server_total: one series per replica (lowest tp_rank), summed over dp_rank"),
    Change("metrics.module_moved", "metrics",
           "Collectors moved: srt/metrics/collector.py -> srt/observability/metrics_collector.py; "
           "85 literal name=\"sglang:…\" families added, 8 gone (grep of both wheels); tokenizer histograms gain is_streaming",
           "0.5.9", "0.5.23", "sglang/srt/observability/metrics_collector.py",
           "sglang collector passes every sglang:* family through with its labels"),
    # --- /v1/loads ----------------------------------------------------------------------------
    Change("loads.no_aggregate", "loads",
           "/v1/loads drops 'aggregate' and 'dp_rank_count'; adds 'accelerator', 'num_accelerators'; "
           "per-rank 'loads' entries keep num_running_reqs/num_waiting_reqs/token_usage",
           "0.5.9", "0.5.23", "sglang/srt/entrypoints/v1_loads.py get_loads; "
           "sglang/srt/managers/load_snapshot.py LoadSnapshot",
           "series.loads_totals sums the per-rank entries and says which source it used"),
    # --- CLI ------------------------------------------------------------------------------------
    Change("cli.nsa_rejected", "cli",
           "--nsa-prefill-backend/--nsa-decode-backend unknown (argparse exits 2); use --dsa-*-backend",
           "0.5.19", "0.5.20", "0.5.19 sglang/srt/server_args.py L3872 registers --nsa-prefill-backend as a "
           "DeprecatedAliasStoreAction; 0.5.20/0.5.21/0.5.23 server_args.py + arg_groups/ have no --nsa-* option",
           "launch_facts: dsa_flag_prefix"),
    Change("cli.disable_cuda_graph_deprecated", "cli",
           "--disable-cuda-graph is a DeprecatedStoreTrueAction (use --cuda-graph-backend-{decode,prefill}="
           "disabled)",
           "0.5.9", "0.5.19", "sglang/srt/server_args.py DeprecatedStoreTrueAction (0.5.19 L3946, 0.5.20 L406, "
           "0.5.21 L343, 0.5.23 L411); 0.5.9 L4490 plain store_true",
           "launch_facts: disable_cuda_graph_flags"),
    Change("entrypoint.sglang_serve", "entrypoint",
           "'python -m sglang.launch_server' warns ('sglang serve' is the recommended entrypoint); both work",
           "0.5.9", "0.5.19", "sglang/launch_server.py __main__ (0.5.19, 0.5.20, 0.5.21, 0.5.23); console script "
           "sglang = sglang.cli.main:main in both 0.5.9 and 0.5.23 entry_points.txt",
           "launch_facts: entrypoint"),
    Change("env.jit_deepgemm", "env",
           "SGLANG_ENABLE_JIT_DEEPGEMM is read (default True); SGLANG_ENABLE_DEEP_GEMM is read by neither "
           "0.5.9 nor 0.5.23 (grep of the whole wheel)",
           None, "0.5.9", "sglang/srt/environ.py (0.5.9 L352, 0.5.23 L1348)",
           "launch_facts: deep_gemm_env"),
)  # fmt: skip

_BY_KEY = {c.key: c for c in CHANGES}


def change(key: str) -> Change:
    """The row for ``key``; ``KeyError`` for a key not in the table (a typo in a caller)."""
    return _BY_KEY[key]


def behaves_new(key: str, version: Version) -> bool:
    """Whether ``version`` has change ``key``. Inside an evidence gap the newer behaviour is assumed."""
    row = _BY_KEY[key]
    return row.old_until is None or version > parse_version(row.old_until)


@dataclass(frozen=True, slots=True)
class Resolution:
    #: What the server said (``None``: not detected).
    reported: str | None
    #: The version whose behaviour is used.
    behaves_as: Version
    #: False: unknown, unparsable, newer than NEWEST_KNOWN or older than OLDEST_KNOWN.
    known: bool
    note: str


def resolve(text: str | None) -> Resolution:
    """Which known behaviour to use for a reported version string."""
    if text is None or not text.strip():
        return Resolution(None, NEWEST_KNOWN, False, f"version not detected: behaving as {NEWEST_KNOWN}")
    try:
        version = parse_version(text)
    except ValueError:
        return Resolution(
            text, NEWEST_KNOWN, False, f"unparsable version {text!r}: behaving as {NEWEST_KNOWN}"
        )
    if version > NEWEST_KNOWN:
        return Resolution(
            text,
            NEWEST_KNOWN,
            False,
            f"{version} is newer than the newest known ({NEWEST_KNOWN}): behaving as it",
        )
    if version < OLDEST_KNOWN:
        return Resolution(
            text, version, False, f"{version} is older than the oldest known ({OLDEST_KNOWN}): best effort"
        )
    if str(version) not in SOURCES_READ:
        return Resolution(text, version, True, "between read wheels: a change in a gap is assumed made")
    return Resolution(text, version, True, "known")


_noted: set[str | None] = set()
_noted_lock = threading.Lock()


def note_version(text: str | None) -> Resolution:
    """:func:`resolve`, logging an unknown version once per process per version string."""
    resolution = resolve(text)
    if not resolution.known:
        with _noted_lock:
            first = text not in _noted
            _noted.add(text)
        if first:
            log.warning(
                "sglang_version_unknown",
                reported=text,
                behaves_as=str(resolution.behaves_as),
                note=resolution.note,
            )
    return resolution
