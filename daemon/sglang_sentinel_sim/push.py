"""The streams' steady state, written from the engine's decode step: one event, no task wake-up.

At one token per event the cost of a streamed token used to be everything around the one
``send()``: the engine resolved the request's future, the handler's task woke, its coroutine
resumed, built the chunk and wrote it. While a stream is in its steady state -- headers out, the
response chunked, the connection's write buffer empty, no fault due, not finished or aborted --
none of that is needed: the engine calls the stream's :class:`StreamPusher` right where it
advances the request, and the pusher builds the event with the route's own format
(``StreamFormat.chunks``: the same bytes the handler would write) and hands the chunked frame to
the transport. The handler's task stays parked and wakes only for what the pusher declines: the
first token (it goes out with the headers), a non-empty write buffer (backpressure: aiohttp's
writer then waits for the client), a closing connection (the handler's write raises and the
request is aborted), the token a fault is planned at, the finish and aborts (the engine wakes the
task for those itself). A declined push detaches the pusher; the task attaches it again when it
parks in the steady state.

What the handler did per event the pusher does the same way: ``token_events`` counts the events
that carried text, and the clock/metrics observation (``_chunk_written``) reads the clock after
the write, so the tokenizer-side TTFT/ITL figures and the truth stay what they were. The engine
pushes only while it keeps its schedule; when it runs steps back to back to catch up it wakes
the tasks instead, so that the streams coalesce tokens (``tok/event`` > 1) as before.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, Final

from sglang_sentinel_sim.reqstate import Request
from sglang_sentinel_sim.sse import SseWriter, frame

__all__ = ["StreamPusher"]

# No fault planned: a token count no stream reaches.
NO_FAULT: Final = sys.maxsize


class StreamPusher:
    """One stream's event writer for the engine's decode step; ``seen`` is shared with its task."""

    __slots__ = ("chunks", "clock", "fault_at", "interval", "out", "req", "seen", "written")

    def __init__(
        self,
        req: Request,
        chunks: Callable[[int, int, bool], list[bytes]],
        written: Callable[[Any, Request, int], None] | None,
        clock: object,
        out: SseWriter,
        interval: int,
        fault_at: int,
    ) -> None:
        self.req = req
        self.chunks = chunks  # the route's StreamFormat.chunks
        # The handler's clock/metrics observation of one written chunk, and its clock (None:
        # nothing to observe once the first token is out, no metrics or log_metrics off).
        self.written = written
        self.clock = clock
        self.out = out
        self.interval = interval
        self.fault_at = fault_at  # the planned fault's token (NO_FAULT: none): the task writes it
        self.seen = 0  # tokens already written, by the task or the pusher

    def attach(self) -> None:
        """Called by the task before it parks: push from now on if the stream is steady."""
        if self.seen > 0 and self.out.primed and self.out.transport is not None:
            self.req.pusher = self.push

    def push(self) -> bool:
        """Write the event for the request's new tokens now (True), or leave it to the task (False,
        and the pusher is detached)."""
        req = self.req
        n = req.generated
        t = self.out.direct()
        if n >= self.fault_at or t is None:
            req.pusher = None
            return False
        try:
            writes = self.chunks(self.seen, n, False)
            if writes:
                req.token_events += 1  # (a token without text, </think>, writes nothing)
                t.write(frame(writes[0]) if len(writes) == 1 else b"".join(map(frame, writes)))
            if self.written is not None:
                self.written(self.clock, req, n)
        except Exception:
            # Never into the engine's loop: the task finds the stream as it is and carries on.
            req.pusher = None
            return False
        self.seen = n
        req.wake_at = n + self.interval
        return True
