"""Parse one line of an SGLang server log into a typed event.

API
---
``parse_line(line: str) -> LogEvent | None``
    One server log line (stdout or stderr, with or without the trailing newline) → one of the
    frozen event dataclasses below, or ``None`` for a line that carries nothing we model. Never
    raises, whatever the input (a malformed batch line is ``None``, not an exception).

``classify_crash(lines: Iterable[str]) -> CrashKind | None``
    The most specific crash cause found in a log tail (e.g. the last 200 lines before the
    process died), or ``None`` when no known signature is present. A cause (CUDA OOM, NaN in the
    sampler, NCCL timeout, …) wins over the generic "scheduler hit an exception" markers that
    follow it; see ``CRASH_PRIORITY`` (the crash texts and kinds live in ``crashes.py``).

Events (all have ``timestamp: datetime | None`` and ``ranks: Ranks``):

- ``DecodeBatch``  — ``Decode batch`` lines (every ``--decode-log-interval`` = 40 decode steps):
  ``running_req, used_tokens, token_usage, gen_throughput, queue_req, cuda_graph, accept_len,
  accept_rate`` and the hybrid-pool / PD-disaggregation / version-specific extras.
- ``PrefillBatch`` — ``Prefill batch`` lines (one per prefill/extend batch): ``new_seq, new_token,
  cached_token, token_usage, running_req, queue_req, input_throughput, cuda_graph,
  pending_token`` and extras.
- ``Milestone``    — start-up progress (``kind: MilestoneKind``), READY is
  ``The server is fired up and ready to roll!``.
- ``ServerCapacity`` — TP0's ``max_total_num_tokens=…, chunked_prefill_size=…`` summary.
- ``HealthCheckFailed`` — ``Health check failed. Server couldn't get a response …``.
- ``KvRetraction`` — ``KV cache pool is full. Retract requests. …``.
- ``Draining``     — ``Gracefully exiting... Remaining number of requests N.`` (SIGTERM drain).
- ``HttpAccess``   — uvicorn access lines (``127.0.0.1:47108 - "POST /generate HTTP/1.1" 200 OK``).
- ``CrashSignature`` — a line that identifies why the server is dying (``kind: CrashKind``).

Timestamps are the server's wall clock exactly as printed (SGLang logs local time without a
zone, optionally with milliseconds under ``SGLANG_LOG_MS``), so they are naive ``datetime``s;
``None`` for lines without the ``[...]`` prefix (tracebacks, NCCL, uvicorn start-up). Batch
lines behind a foreign prefix (a custom ``SGLANG_LOGGING_CONFIG_PATH`` format, a log forwarder's
``sglang[42]:``) still parse, with ``timestamp=None``.

Layouts covered (field order is never relied on — fields are parsed by key): v0.5.9 and newer
(``#pending-token``, ``cuda graph`` before ``input throughput``), Feb-2025 builds (``Decode batch.``
with a period, no ``cuda graph``), builds with a trailing ``", "``, DP/PP/TP/EP prefixes, PD
disaggregation fields, speculative ``accept len``/``accept rate``, ``npu graph``/``cpu graph``,
hybrid SWA / mamba usage, ``SGLANG_LOG_FORWARD_ITERS`` ``[iter]`` tags. Unknown ``key: value``
fields are kept in ``extra`` so a newer server does not make lines unparseable.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from sglang_sentinel.sglang.crashes import CRASH_PRIORITY, CrashKind, match_crash
from sglang_sentinel.sglang.logprefix import NO_RANKS, PREFIX, Ranks, parse_ranks

__all__ = [
    "CRASH_PRIORITY",
    "UNPARSED_REASONS",
    "CrashKind",
    "CrashSignature",
    "DecodeBatch",
    "Draining",
    "HealthCheckFailed",
    "HttpAccess",
    "KvRetraction",
    "LogEvent",
    "Milestone",
    "MilestoneKind",
    "NanSanitized",
    "PrefillBatch",
    "Ranks",
    "ServerCapacity",
    "classify_crash",
    "parse_line",
    "unparsed_reason",
]


@dataclass(frozen=True, slots=True)
class DecodeBatch:
    timestamp: datetime | None
    ranks: Ranks
    running_req: int
    #: KV tokens in use (``#token``; ``max(#full token, #swa token)`` on hybrid-SWA pools).
    used_tokens: int | None
    #: KV usage ratio; on hybrid pools the max of the parts, as SGLang's ``token_usage`` gauge.
    token_usage: float
    #: Tokens generated since the previous Decode line ÷ seconds since it (tokens/second).
    gen_throughput: float
    queue_req: int
    #: Whether the step ran as a captured graph; ``None`` in builds that did not print it.
    cuda_graph: bool | None = None
    #: ``cuda``, ``npu`` or ``cpu`` — which ``… graph:`` key the line carried.
    graph_backend: str | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    full_token_usage: float | None = None
    swa_token_usage: float | None = None
    mamba_usage: float | None = None
    prealloc_usage: float | None = None
    prealloc_req: int | None = None
    transfer_req: int | None = None
    retracted_req: int | None = None
    #: ``--enable-hisparse`` (0.5.23): device/host token pools instead of ``token usage``.
    gpu_token_usage: float | None = None
    cpu_token_usage: float | None = None
    #: Forward-pass counter printed under ``SGLANG_LOG_FORWARD_ITERS``.
    iteration: int | None = None
    #: Fields this parser does not model, as printed: ``(("fwd occupancy", "81%"),)``.
    extra: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True, slots=True)
class PrefillBatch:
    timestamp: datetime | None
    ranks: Ranks
    new_seq: int
    #: Prompt tokens computed in this batch (not served from the prefix cache).
    new_token: int
    #: Prompt tokens served from the prefix cache.
    cached_token: int
    token_usage: float
    running_req: int
    queue_req: int
    #: v0.5.9 divides the PREVIOUS batch's ``#new-token`` by the gap since the previous line.
    input_throughput: float
    cuda_graph: bool | None = None
    graph_backend: str | None = None
    pending_token: int | None = None
    full_token_usage: float | None = None
    swa_token_usage: float | None = None
    mamba_usage: float | None = None
    #: PD prefill's bootstrap queue: ``#prealloc-req`` up to 0.5.9, ``#bootstrap-req`` later
    #: (both land here; ``prealloc_req`` keeps the 0.5.9 spelling's value too).
    prealloc_req: int | None = None
    bootstrap_req: int | None = None
    inflight_req: int | None = None
    #: Prefill-side requests still waiting for bootstrap (``#optimistic-req``, 0.5.23).
    optimistic_req: int | None = None
    iteration: int | None = None
    extra: tuple[tuple[str, str], ...] = ()


class MilestoneKind(StrEnum):
    SERVER_ARGS = "server_args"
    INIT_DISTRIBUTED_BEGIN = "init_distributed_begin"
    INIT_DISTRIBUTED_END = "init_distributed_end"
    LOAD_WEIGHT_BEGIN = "load_weight_begin"
    LOAD_WEIGHT_END = "load_weight_end"
    KV_CACHE_ALLOCATED = "kv_cache_allocated"
    MEMORY_POOL_END = "memory_pool_end"
    CUDA_GRAPH_CAPTURE_BEGIN = "cuda_graph_capture_begin"
    CUDA_GRAPH_CAPTURE_END = "cuda_graph_capture_end"
    HTTP_LISTENING = "http_listening"
    READY = "ready"


@dataclass(frozen=True, slots=True)
class Milestone:
    timestamp: datetime | None
    ranks: Ranks
    kind: MilestoneKind
    #: The log message after the prefix, for display.
    message: str


@dataclass(frozen=True, slots=True)
class ServerCapacity:
    timestamp: datetime | None
    ranks: Ranks
    max_total_num_tokens: int
    chunked_prefill_size: int | None
    max_prefill_tokens: int | None
    max_running_requests: int | None
    context_len: int | None
    #: ``available_gpu_mem=… GB`` converted to bytes (SGLang's GB are GiB: ``/ (1 << 30)``).
    available_gpu_mem_bytes: int | None


@dataclass(frozen=True, slots=True)
class HealthCheckFailed:
    timestamp: datetime | None
    ranks: Ranks
    #: ``SGLANG_HEALTH_CHECK_TIMEOUT`` as printed.
    timeout_seconds: float
    #: ``HH:MM:SS`` strings as printed (no date in the line).
    tic: str | None
    last_heartbeat: str | None


@dataclass(frozen=True, slots=True)
class KvRetraction:
    timestamp: datetime | None
    ranks: Ranks
    retracted_reqs: int
    new_tokens_gained: int
    new_token_ratio_before: float | None
    new_token_ratio_after: float | None
    #: ``#mamba_num_gained`` (0.5.23, hybrid-SSM models); ``None`` when not printed.
    mamba_num_gained: int | None = None


@dataclass(frozen=True, slots=True)
class NanSanitized:
    """0.5.23 ``SGLANG_SANITIZE_NAN_LOGITS``: ``NaN detected in <where>; values were sanitized …``.

    The server keeps serving (the NaNs were replaced), so this is no crash, but the model produced
    NaN logits: worth an alert. SGLang logs it once per process (utils/async_probe.py).
    """

    timestamp: datetime | None
    ranks: Ranks
    where: str


@dataclass(frozen=True, slots=True)
class Draining:
    timestamp: datetime | None
    ranks: Ranks
    remaining_requests: int


@dataclass(frozen=True, slots=True)
class HttpAccess:
    timestamp: datetime | None
    client: str
    method: str
    path: str
    status: int


@dataclass(frozen=True, slots=True)
class CrashSignature:
    timestamp: datetime | None
    ranks: Ranks
    kind: CrashKind
    #: The whole line (stripped), for the supervisor's "last error" display.
    line: str
    #: A child's exit status when the line states it (negative: killed by that signal).
    exit_code: int | None = None

    @property
    def is_cause(self) -> bool:
        return CRASH_PRIORITY.index(self.kind) < CRASH_PRIORITY.index(CrashKind.WARMUP_FAILED)


LogEvent = (
    DecodeBatch
    | PrefillBatch
    | Milestone
    | ServerCapacity
    | HealthCheckFailed
    | KvRetraction
    | Draining
    | HttpAccess
    | CrashSignature
    | NanSanitized
)

# ---------------------------------------------------------------------------------------------
# After the prefix (logprefix.py): "Decode batch, #running-req: ..." or "Decode batch [7], ...".
_BATCH_HEAD = re.compile(r"(Decode|Prefill) batch(?: \[(\d+)\])?[,.] ")
_BATCH_ANYWHERE = re.compile(r"(?<![\w])(Decode|Prefill) batch(?: \[(\d+)\])?[,.] (?=#)")


def _bool(text: str) -> bool:
    if text == "True":
        return True
    if text == "False":
        return False
    raise ValueError(text)


# key as printed → (attribute, converter). Shared by both batch kinds; each dataclass ignores
# what it does not have (checked in _build via __slots__).
_Conv = Callable[[str], object]
_FIELDS: dict[str, tuple[str, _Conv]] = {
    "#running-req": ("running_req", int),
    "#token": ("used_tokens", int),
    "token usage": ("token_usage", float),
    "gen throughput (token/s)": ("gen_throughput", float),
    "#queue-req": ("queue_req", int),
    "accept len": ("accept_len", float),
    "accept rate": ("accept_rate", float),
    "#full token": ("_full_tokens", int),
    "full token usage": ("full_token_usage", float),
    "#swa token": ("_swa_tokens", int),
    "swa token usage": ("swa_token_usage", float),
    "mamba num": ("_mamba_num", int),
    "mamba usage": ("mamba_usage", float),
    "pre-allocated usage": ("prealloc_usage", float),
    "#prealloc-req": ("prealloc_req", int),
    "#bootstrap-req": ("bootstrap_req", int),
    "#optimistic-req": ("optimistic_req", int),
    "#gpu token": ("_gpu_tokens", int),
    "gpu token usage": ("gpu_token_usage", float),
    "#cpu token": ("_cpu_tokens", int),
    "cpu token usage": ("cpu_token_usage", float),
    "#transfer-req": ("transfer_req", int),
    "#retracted-req": ("retracted_req", int),
    "#inflight-req": ("inflight_req", int),
    "#new-seq": ("new_seq", int),
    "#new-token": ("new_token", int),
    "#cached-token": ("cached_token", int),
    "#pending-token": ("pending_token", int),
    "input throughput (token/s)": ("input_throughput", float),
    "cuda graph": ("cuda_graph", _bool),
    "npu graph": ("cuda_graph", _bool),
    "cpu graph": ("cuda_graph", _bool),
    "musa graph": ("cuda_graph", _bool),
}
_GRAPH_BACKEND = {"cuda graph": "cuda", "npu graph": "npu", "cpu graph": "cpu", "musa graph": "musa"}
_REQUIRED = {
    "Decode": ("running_req", "token_usage", "gen_throughput", "queue_req"),
    "Prefill": ("new_seq", "new_token", "cached_token", "token_usage", "running_req", "queue_req",
                "input_throughput"),
}  # fmt: skip
#: Label values of ``reason`` for a batch line that did not parse (see :func:`unparsed_reason`).
UNPARSED_REASONS: tuple[str, ...] = ("bad_head", "bad_value", "missing_field", "error")
_DECODE_SLOTS = frozenset(DecodeBatch.__slots__)
_PREFILL_SLOTS = frozenset(PrefillBatch.__slots__)


def _parse_batch(
    kind: str, iteration: str | None, body: str, ts: datetime | None, ranks: Ranks
) -> DecodeBatch | PrefillBatch | str:
    """The event, or why not (one of ``UNPARSED_REASONS``)."""
    values: dict[str, object] = {}
    extra: list[tuple[str, str]] = []
    for piece in body.split(", "):
        piece = piece.strip().rstrip(",")
        if not piece:
            continue  # the trailing ", " of some builds
        key, sep, raw = piece.partition(": ")
        if not sep:
            extra.append((piece, ""))
            continue
        spec = _FIELDS.get(key)
        if spec is None:
            extra.append((key, raw))
            continue
        attr, conv = spec
        try:
            values[attr] = conv(raw)
        except ValueError:
            return "bad_value"
        if attr == "cuda_graph":
            values["graph_backend"] = _GRAPH_BACKEND[key]
    # Hybrid pools print usage per pool; fold them the way SGLang's own gauges do.
    # HiSparse (0.5.23) prints only the device/host pools; the device pool is the GPU's KV.
    full_tokens = values.pop("_full_tokens", None)
    swa_tokens = values.pop("_swa_tokens", None)
    gpu_tokens = values.pop("_gpu_tokens", None)
    values.pop("_cpu_tokens", None)
    values.pop("_mamba_num", None)
    if "token_usage" not in values:
        parts = [
            v
            for v in (
                values.get("full_token_usage"),
                values.get("swa_token_usage"),
                values.get("gpu_token_usage"),
            )
            if isinstance(v, float)
        ]
        if parts:
            values["token_usage"] = max(parts)
    if "used_tokens" not in values:
        counts = [v for v in (full_tokens, swa_tokens, gpu_tokens) if isinstance(v, int)]
        if counts:
            values["used_tokens"] = max(counts)
    if kind == "Prefill" and "bootstrap_req" not in values and "prealloc_req" in values:
        values["bootstrap_req"] = values["prealloc_req"]  # 0.5.9's name for the bootstrap queue
    if iteration is not None:
        values["iteration"] = int(iteration)
    if extra:
        values["extra"] = tuple(extra)
    if kind == "Decode":
        values.setdefault("used_tokens", None)
        cls: type[DecodeBatch] | type[PrefillBatch] = DecodeBatch
        slots = _DECODE_SLOTS
    else:
        cls, slots = PrefillBatch, _PREFILL_SLOTS
    if any(name not in values for name in _REQUIRED[kind]):
        return "missing_field"  # not a layout we understand
    kwargs = {k: v for k, v in values.items() if k in slots}
    return cls(timestamp=ts, ranks=ranks, **kwargs)  # type: ignore[arg-type]


# ---------------------------------------------------------------------------------------------
_MILESTONES: tuple[tuple[str, MilestoneKind], ...] = (
    ("The server is fired up and ready to roll!", MilestoneKind.READY),
    ("server_args=ServerArgs(", MilestoneKind.SERVER_ARGS),
    ("Init torch distributed begin", MilestoneKind.INIT_DISTRIBUTED_BEGIN),
    ("Init torch distributed ends", MilestoneKind.INIT_DISTRIBUTED_END),
    ("Load weight begin", MilestoneKind.LOAD_WEIGHT_BEGIN),
    ("Load weight end", MilestoneKind.LOAD_WEIGHT_END),
    ("KV Cache is allocated", MilestoneKind.KV_CACHE_ALLOCATED),
    ("Memory pool end", MilestoneKind.MEMORY_POOL_END),
    ("Uvicorn running on", MilestoneKind.HTTP_LISTENING),
)
# "Capture cuda graph begin", "Capture cuda graph bs [...]", "Capture target decode CUDA graph end."
_GRAPH_CAPTURE = re.compile(r"Capture (?:[\w ]+ )?cuda graph (begin|end|bs)", re.IGNORECASE)
_CAPACITY_KEYS = re.compile(
    r"max_total_num_tokens=(\d+)(?:, chunked_prefill_size=(-?\d+))?(?:, max_prefill_tokens=(\d+))?"
    r"(?:, max_running_requests=(\d+))?(?:, context_len=(\d+))?(?:, available_gpu_mem=([\d.]+) GB)?"
)
_HEALTH = re.compile(
    r"Health check failed\. Server couldn't get a response from detokenizer for last ([\d.]+) seconds\."
    r"(?: tic start time: ([\d:]+)\.)?(?: last_heartbeat time: ([\d:]+))?"
)
# "KV cache pool is full. Retract requests. #retracted_reqs: 3, #new_tokens_gained: 1024
#  [, #mamba_num_gained: 2 (0.5.23)], #new_token_ratio: 0.7000 -> 0.9000": read as key: value
# pairs, so a field added between two known ones does not lose the others.
_RETRACT_HEAD = "KV cache pool is full. Retract requests. "
_NAN_SANITIZED = re.compile(r"NaN detected in (.*?); values were sanitized")
_DRAIN = re.compile(r"Gracefully exiting\.\.\. Remaining number of requests (\d+)")
_ACCESS = re.compile(r'(?:INFO: +)?(\S+:\d+) - "([A-Z]+) (\S+) HTTP/[\d.]+" (\d{3})')

# With --log-requests SGLang logs prompts and outputs; user text must never look like a crash.
_REQUEST_LOG_PREFIXES = ("Receive: ", "Finish: ")


def parse_line(line: str) -> LogEvent | None:
    """Parse one SGLang log line; ``None`` if it carries nothing modelled. Never raises."""
    try:
        return _parse(line)
    except Exception:  # a parser must not take the log pump down with it
        return None


def _parse(line: str) -> LogEvent | None:
    line = line.rstrip("\r\n")
    ts: datetime | None = None
    ranks = NO_RANKS
    msg = line
    if line.startswith("["):
        m = PREFIX.match(line)
        if m is not None:
            y, mo, d, h, mi, s, frac, rank_text = m.groups()
            micro = int(frac.ljust(6, "0")) if frac else 0
            ts = datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), micro)
            ranks = parse_ranks(rank_text)
            msg = line[m.end() :]

    # Hot path first: batch lines and access lines are nearly everything a busy server prints.
    batch = _batch(msg, ts, ranks)
    if batch is not None:
        return batch if not isinstance(batch, str) else None
    if " HTTP/" in msg:
        acc = _ACCESS.search(msg)
        if acc is not None:
            client, method, path, status = acc.groups()
            return HttpAccess(ts, client, method, path, int(status))
    if msg.startswith(_REQUEST_LOG_PREFIXES):
        return None

    for needle, kind in _MILESTONES:
        if needle in msg:
            return Milestone(ts, ranks, kind, msg)
    if "max_total_num_tokens=" in msg:
        cap = _CAPACITY_KEYS.search(msg)
        if cap is not None:
            total, chunk, prefill, running, ctx, mem = cap.groups()
            return ServerCapacity(
                ts,
                ranks,
                int(total),
                int(chunk) if chunk else None,
                int(prefill) if prefill else None,
                int(running) if running else None,
                int(ctx) if ctx else None,
                round(float(mem) * (1 << 30)) if mem else None,
            )
    graph = _GRAPH_CAPTURE.search(msg) if "apture" in msg else None
    if graph is not None:
        end = graph.group(1).lower() == "end"
        kind = MilestoneKind.CUDA_GRAPH_CAPTURE_END if end else MilestoneKind.CUDA_GRAPH_CAPTURE_BEGIN
        return Milestone(ts, ranks, kind, msg)
    if msg.startswith("Health check failed"):
        hc = _HEALTH.match(msg)
        if hc is not None:
            return HealthCheckFailed(ts, ranks, float(hc.group(1)), hc.group(2), hc.group(3))
    if msg.startswith(_RETRACT_HEAD):
        return _retraction(msg[len(_RETRACT_HEAD) :], ts, ranks)
    if msg.startswith("NaN detected in "):
        nan = _NAN_SANITIZED.match(msg)
        if nan is not None:
            return NanSanitized(ts, ranks, nan.group(1))
    if msg.startswith("Gracefully exiting"):
        dr = _DRAIN.match(msg)
        if dr is not None:
            return Draining(ts, ranks, int(dr.group(1)))

    crash = match_crash(msg)
    if crash is not None:
        return CrashSignature(ts, ranks, crash[0], line.strip(), crash[1])
    return None


def _batch(msg: str, ts: datetime | None, ranks: Ranks) -> DecodeBatch | PrefillBatch | str | None:
    """A batch line's event, the reason it did not parse, or ``None`` for no batch line at all."""
    if msg.startswith(("Decode batch", "Prefill batch")):
        head = _BATCH_HEAD.match(msg)
        if head is None:
            return "bad_head"
        return _parse_batch(head.group(1), head.group(2), msg[head.end() :], ts, ranks)
    if ts is None and " batch" in msg:
        # A custom SGLANG_LOGGING_CONFIG_PATH format or a forwarder's prefix ("sglang[42]: ..."):
        # the fields are still SGLang's, only the timestamp is unknown.
        head = _BATCH_ANYWHERE.search(msg)
        if head is not None:
            return _parse_batch(head.group(1), head.group(2), msg[head.end() :], None, NO_RANKS)
    return None


def _retraction(body: str, ts: datetime | None, ranks: Ranks) -> KvRetraction | None:
    fields: dict[str, str] = {}
    for piece in body.split(", "):
        key, sep, raw = piece.partition(": ")
        if sep:
            fields[key.strip()] = raw.strip()
    try:
        retracted = int(fields["#retracted_reqs"])
        gained = int(fields["#new_tokens_gained"])
    except (KeyError, ValueError):
        return None
    before = after = None
    ratio = fields.get("#new_token_ratio")
    if ratio is not None:
        left, arrow, right = ratio.partition(" -> ")
        if arrow:
            try:
                before, after = float(left), float(right)
            except ValueError:
                before = after = None
    mamba = fields.get("#mamba_num_gained")
    mamba_gained = int(mamba) if mamba is not None and mamba.lstrip("-").isdigit() else None
    return KvRetraction(ts, ranks, retracted, gained, before, after, mamba_gained)


def unparsed_reason(line: str) -> tuple[str, str] | None:
    """``(kind, reason)`` for a line that looks like a batch line but does not parse, else ``None``.

    ``kind`` is ``decode``, ``prefill`` or ``unknown``; ``reason`` one of ``UNPARSED_REASONS``.
    Meant for lines :func:`parse_line` returned ``None`` for (rare), so it may cost a re-parse.
    """
    if "Decode batch" not in line and "Prefill batch" not in line:
        return None
    kind = "decode" if "Decode batch" in line else "prefill"
    try:
        text = line.rstrip("\r\n")
        ts: datetime | None = None
        msg = text
        m = PREFIX.match(text) if text.startswith("[") else None
        if m is not None:
            ts, msg = datetime(2000, 1, 1), text[m.end() :]  # any non-None: the prefix was there
        result = _batch(msg, ts, NO_RANKS)
    except Exception:
        return kind, "error"
    if result is None:
        # "Decode batch" somewhere in a line with a timestamp but not at the message start.
        return kind, "bad_head"
    return (kind, result) if isinstance(result, str) else None


def classify_crash(lines: Iterable[str]) -> CrashKind | None:
    """The most specific crash cause in a log tail (see ``CRASH_PRIORITY``), or ``None``."""
    best: int | None = None
    for line in lines:
        event = parse_line(line)
        if isinstance(event, CrashSignature):
            rank = CRASH_PRIORITY.index(event.kind)
            if best is None or rank < best:
                best = rank
    return None if best is None else CRASH_PRIORITY[best]
