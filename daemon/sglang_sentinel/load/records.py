"""Per-request records and the live counters a run keeps up to date.

All times in a record are seconds on the run's monotonic clock (`time.perf_counter`), as
offsets from the run's start; `RunResult.started_at` (a Unix timestamp) anchors them to the
wall clock. Times inside one request (`ttft`, `chunk_times`...) are relative to `sent`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["FailureReason", "LoadCounters", "RequestRecord"]


class FailureReason:
    """Failure reasons, as counted in `RunMetrics.failures`. HTTP errors are ``http_<status>``."""

    CONNECT = "connect_error"  # refused / DNS / TLS before any response
    TIMEOUT = "timeout"  # request_timeout_s exceeded
    DISCONNECTED = "disconnected"  # connection closed mid-response, stream not finished
    ERROR_CHUNK = "error_chunk"  # an in-band {"error": ...} event in a 200 stream
    ABORTED = "aborted"  # the server finished the request with finish_reason abort
    MALFORMED = "malformed_stream"  # an event that is not the JSON the protocol promises
    SHORT_OUTPUT = "short_output"  # fewer tokens than max_new_tokens although ignore_eos was set
    NO_OUTPUT = "no_output"  # a 200 response that carried no token at all
    CANCELLED = "cancelled"  # the run was cancelled while the request was in flight
    CLIENT_ERROR = "client_error"  # a bug on our side while handling the request (logged)

    @staticmethod
    def http(status: int) -> str:
        return f"http_{status}"


# Failures after which the server may still have been generating: the client stopped listening.
_CUT = frozenset(
    {
        FailureReason.TIMEOUT,
        FailureReason.DISCONNECTED,
        FailureReason.CANCELLED,
        FailureReason.MALFORMED,
        FailureReason.CLIENT_ERROR,
    }
)


@dataclass(slots=True)
class RequestRecord:
    """What happened to one request. Filled in by the engine; read by the metrics."""

    index: int
    warmup: bool
    planned: float  # planned send time (arrival), run clock
    ready: float = 0.0  # when it could be sent: max(planned, admission slot freed)
    sent: float = 0.0  # just before the request's bytes were written to the connection
    dispatched: bool = False  # True once `sent` is set (the request left the client)
    prompt_len: int = 0  # planned input tokens (dataset), bench_serving's prompt_len
    planned_output_len: int = 0
    rid: str = ""
    success: bool = False
    failure: str | None = None
    error: str | None = None
    http_status: int | None = None
    # Timings relative to `sent`; None when the event never happened.
    ttft: float | None = None  # first token of any kind (reasoning or content)
    ttfc: float | None = None  # first content (non-reasoning) token
    latency: float | None = None  # E2E: until the last byte of the response
    # Token-bearing chunks: arrival time (relative to sent) and tokens each carried.
    # repr=False: asyncio reprs a finished task's result when asyncio.run exits, and a full
    # repr of every per-token list of a large run costs a noticeable fraction of a second.
    chunk_times: list[float] = field(default_factory=list, repr=False)
    chunk_tokens: list[int] = field(default_factory=list, repr=False)
    itl: list[float] = field(default_factory=list, repr=False)  # bench_serving-style ITL entries
    output_len: int = 0  # server-reported completion tokens (else counted chunks)
    prompt_tokens: int | None = None  # server-reported prompt tokens
    cached_tokens: int | None = None  # server-reported prefix-cache hits
    reasoning_tokens: int = 0
    content_tokens: int = 0
    finish_reason: str | None = None
    text: str | None = field(default=None, repr=False)  # only kept when the spec asks (keep_text)
    # Events that arrived in one read with an earlier one, so share its time: a read holds
    # several events when the client read late (or a server wrote them together). Their ITL
    # entries are the read's, not their own.
    shared_read_events: int = 0
    turn: int = 0  # multi-turn: 1.. within its conversation; 0 for a single request
    routing_key: str | None = None  # sent as X-SMG-Routing-Key (--gsp-send-routing-key)

    def spent_tokens(self) -> int:
        """Prompt + generated tokens the server spent, or may have spent, on this request.

        What the token budget charges, for failed, partial and cancelled requests too. The
        server's own counts where it reported them (usage in the final chunk, meta_info's
        running ``completion_tokens``), else the client's (the planned prompt, the counted chunks):

        - never sent, or refused before a connection (``connect_error``): nothing reached it;
        - the response ended (success, an HTTP error, an in-band error, an abort, no output):
          the prompt and every token that came back;
        - the connection was cut (timeout, disconnect, cancel, a stream we stopped reading): the
          server may have run on after our last read and never said how far, so its bound, the
          requested output (``max_new_tokens``), unless more came back than that.
        """
        if not self.dispatched or self.failure == FailureReason.CONNECT:
            return 0
        prompt = self.prompt_tokens if self.prompt_tokens is not None else self.prompt_len
        counted = max(self.output_len, sum(self.chunk_tokens))
        if self.success or self.failure not in _CUT:
            return prompt + counted
        return prompt + max(counted, self.planned_output_len)

    @property
    def queue_wait(self) -> float:
        """Client-side admission wait (max_concurrency gate): ready - planned."""
        return max(self.ready - self.planned, 0.0)

    @property
    def schedule_lag(self) -> float:
        """Client lag: actual send - the time it could have been sent."""
        return max(self.sent - self.ready, 0.0)

    @property
    def end(self) -> float | None:
        return None if self.latency is None else self.sent + self.latency


class StreamedTokens(Protocol):
    """What the live count reads of a request's response parser."""

    tokens_seen: int


@dataclass(slots=True)
class LoadCounters:
    """Live state of a run, safe to read at any time from the event loop that runs it.

    The daemon reads `in_flight` to subtract its own requests from the server's live load
    (polite injection); the progress bar reads the rest.
    """

    planned: int | None = None  # requests the run will send, when known
    sent: int = 0
    in_flight: int = 0
    # Measured requests in flight: index -> their response parser, whose ``tokens_seen`` is the
    # output tokens streamed so far (the progress line's live count; no per-token bookkeeping).
    streaming: dict[int, StreamedTokens] = field(default_factory=dict)
    completed: int = 0
    failed: int = 0
    output_tokens: int = 0
    warmup: bool = False  # True while warm-up requests are running
