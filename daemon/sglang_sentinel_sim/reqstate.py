"""One generation request as the scheduler sees it: its state, token counters and timestamps.

The HTTP handlers create a ``Request``, the engine (``engine.py``) advances it, and a handler
parked on ``wait_progress`` is woken by the engine only when the tokens it waits for exist.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any, Final

from sglang_sentinel_sim.text import EOS_TOKEN_ID, Script

__all__ = ["INJECTED_ABORT", "Request", "RequestState"]

# The abort message of a request the error_chunk fault ended (``Request.fault_at``).
INJECTED_ABORT: Final = "injected error"


class RequestState:
    WAITING: Final = 0
    RUNNING: Final = 1
    FINISHED: Final = 2
    ABORTED: Final = 3


class Request:
    """One generation request as the scheduler sees it. Times are ``time.monotonic()`` values."""

    __slots__ = (
        "arrival",
        "cached_tokens",
        "fault_at",
        "finish_matched",
        "finish_message",
        "finish_type",
        "finished_at",
        "first_token_at",
        "first_written_at",
        "generated",
        "kv_held",
        "last_token_at",
        "log_metrics",
        "max_new_tokens",
        "pd_role",
        "prefilled",
        "priority",
        "prompt_key",
        "prompt_tokens",
        "pusher",
        "received_at",
        "received_source",
        "retractions",
        "rid",
        "scheduled_at",
        "script",
        "spec_steps",
        "state",
        "stop_at",
        "stop_text",
        "stream",
        "submitted",
        "target",
        "token_events",
        "waiter",
        "wake_at",
    )

    def __init__(
        self,
        rid: str,
        prompt_tokens: int,
        max_new_tokens: int,
        script: Script,
        *,
        prompt_key: str = "",
        ignore_eos: bool = False,
        min_new_tokens: int = 0,
        stop_at: int | None = None,
        stop_text: str | None = None,
        log_metrics: bool = True,
        stream: bool = False,
        priority: int | None = None,
    ) -> None:
        self.rid = rid
        # For the metrics only: 0.5.23's is_streaming label and per-priority queue gauges.
        self.stream = stream
        self.priority = priority
        self.prompt_tokens = max(1, prompt_tokens)
        self.prompt_key = prompt_key
        self.max_new_tokens = max(0, max_new_tokens)
        self.script = script
        self.log_metrics = log_metrics
        natural = max(script.natural_len + 1, min_new_tokens)  # +1: the EOS token itself
        target = self.max_new_tokens if ignore_eos else min(self.max_new_tokens, natural)
        # A stop string ends generation at the token that completes it.
        self.stop_at = stop_at if stop_at is not None and stop_at <= target else None
        self.stop_text = stop_text if self.stop_at is not None else None
        self.target = self.stop_at if self.stop_at is not None else target
        if self.target == self.max_new_tokens:
            self.finish_type = "length"
            self.finish_matched: int | str | None = None
        else:
            self.finish_type = "stop"
            self.finish_matched = self.stop_text if self.stop_at is not None else EOS_TOKEN_ID
        self.finish_message = ""
        # PD disaggregation role of the server (sglang_sentinel_sim.disagg): "prefill" finishes as
        # FINISH_LENGTH(length=0) after its one token; "decode" receives the prompt's KV.
        self.pd_role = "null"
        self.state = RequestState.WAITING
        self.generated = 0
        self.prefilled = 0
        self.kv_held = 0
        self.cached_tokens = 0
        self.retractions = 0
        # arrival: when the HTTP handler was entered (SGLang's created_time, the start of its own
        # TTFT/E2E figures); received_at: when the request's bytes reached the server's socket
        # (the kernel's receive time, or arrival where unknown: received_source says which) --
        # the ground truth's start, which also holds the server's own HTTP queueing;
        # submitted: when it entered the scheduler's queue (after body parsing).
        self.arrival = 0.0
        self.received_at = 0.0
        self.received_source = "handler"
        self.submitted = 0.0
        self.first_token_at = 0.0
        # When an HTTP stream handler wrote the first token to its client (0 = not streamed/yet).
        self.first_written_at = 0.0
        # Streams: SSE events that carried new tokens (tokens / events = how many the driver
        # merged into one event, 1 when it kept up with the engine).
        self.token_events = 0
        self.last_token_at = 0.0
        self.finished_at = 0.0
        self.scheduled_at = 0.0
        self.spec_steps = 0
        self.waiter: asyncio.Future[None] | None = None
        self.wake_at = 1
        # A streaming handler in its steady state (sglang_sentinel_sim.push): the engine calls it instead
        # of waking the handler when wake_at is reached; False = declined, wake the handler.
        self.pusher: Callable[[], bool] | None = None
        # The error_chunk fault planned for this stream: the engine ends the request at this token
        # (aborted with INJECTED_ABORT), so the error comes after exactly that many tokens however
        # late the handler wakes; never skipped because the request ran to its end meanwhile.
        self.fault_at: int | None = None

    @property
    def done(self) -> bool:
        return self.state >= RequestState.FINISHED

    def finish_reason(self) -> dict[str, Any] | None:
        """``meta_info.finish_reason`` as SGLang serializes it (None while running)."""
        if self.state == RequestState.ABORTED:
            return {"type": "abort", "message": self.finish_message, "status_code": 500, "err_type": None}
        if self.state != RequestState.FINISHED:
            return None
        if self.finish_type == "length":
            return {"type": "length", "length": 0 if self.pd_role == "prefill" else self.generated}
        return {"type": "stop", "matched": self.finish_matched}

    async def wait_progress(self, seen: int, step: int = 1) -> None:
        """Return once ``seen + step`` tokens exist or the request is done (or on a prefill
        milestone; callers re-check)."""
        if self.generated >= seen + step or self.state >= RequestState.FINISHED:
            return
        self.wake_at = seen + step
        fut = self.waiter
        if fut is None or fut.done():
            fut = asyncio.get_running_loop().create_future()
            self.waiter = fut
        await fut

    def _wake(self) -> None:
        fut = self.waiter
        if fut is not None:
            self.waiter = None
            if not fut.done():
                fut.set_result(None)
