"""A response's body, turned into records inside the connection's read callback.

The sink the engine hands to `HttpClient.post` for each request: it splits SSE events out of
the reads (the common read, one whole `data:` event, by a few byte tests before anything else)
and feeds their payloads to the backend's parser with the read's arrival time, keeps the head
of an error body, and gathers a non-streamed body whole. It runs once per token, so its
per-read work is the engine's timing-path budget (see `sglang_sentinel.load.engine`).
"""

from __future__ import annotations

import json

from sglang_sentinel.load.backends import ResponseParser, StreamFailure
from sglang_sentinel.load.records import FailureReason, RequestRecord

__all__ = ["BODY_LIMIT", "EVENT_LIMIT", "ResponseSink", "http_error", "split_events"]

_ERROR_BODY_LIMIT = 2048
# An unfinished SSE event (no blank line yet) or a whole non-streamed body larger than this is not
# what SGLang sends (its largest event, the native stream's cumulative text at 32k tokens, is
# ~150 KB): the request fails as malformed_stream instead of buffering a never-ending line.
# Checked only off the fast path, where a read does not end an event anyway.
EVENT_LIMIT = 4 << 20
BODY_LIMIT = 64 << 20
_DONE_EVENT = b"data: [DONE]\n\n"


def split_events(buf: bytes) -> tuple[list[bytes], bytes]:
    """Complete SSE events (their data payloads) and the unfinished rest of the buffer."""
    if b"\r" in buf:
        buf = buf.replace(b"\r\n", b"\n")
    parts = buf.split(b"\n\n")
    rest = parts.pop()
    out: list[bytes] = []
    for ev in parts:
        if ev.startswith(b"data: ") and b"\n" not in ev:
            out.append(ev[6:])  # the only shape SGLang sends
            continue
        data = [
            line[5:].lstrip(b" ") if line.startswith(b"data:") else b""
            for line in ev.split(b"\n")
            if line.startswith(b"data:")
        ]
        if data:  # events without data (comments, retry:, blank keep-alives) are skipped
            out.append(b"\n".join(data))
    return out, rest


class ResponseSink:
    """Receives a response's body bytes inside the connection's read callback, with the read's
    arrival time (`transport.BodySink`)."""

    __slots__ = (
        "buf", "done", "error_body", "fast", "feed", "feed_event", "head", "more", "more_bytes", "ok", "rec",
        "sent", "status", "stream", "take_event", "whole",
    )  # fmt: skip

    def __init__(self, rec: RequestRecord, parser: ResponseParser, stream: bool) -> None:
        self.rec = rec
        self.feed = parser.feed_bytes
        self.feed_event = parser.feed_event
        self.take_event = parser.take_event
        self.fast = False  # a 200 stream whose first read was seen: on_data's first branch
        self.stream = stream
        self.sent = 0.0  # perf_counter() just before the request's bytes were written (on_sent)
        self.status = 0
        self.ok = False
        self.done = False  # saw data: [DONE]
        self.buf = b""  # an unfinished event
        self.more: list[bytes] = []  # later reads of a long unfinished event (no newline yet)
        self.more_bytes = 0  # their size, against EVENT_LIMIT
        self.whole = bytearray()
        self.error_body = bytearray()
        self.head = b""  # the first bytes of a 200 body, to explain a stream that is not SSE

    def on_sent(self, now: float) -> None:
        self.sent = now

    def on_status(self, status: int) -> None:
        self.status = status
        self.rec.http_status = status
        self.ok = status == 200

    def on_data(self, data: bytes, now: float) -> None:
        # The common read of a stream, first: exactly one whole `data: ...` event, nothing
        # buffered, past the first read (which keeps `head`). The parser's `take_event` tries
        # the stream's common shape before the general checks (fewer calls per token).
        if self.fast and not self.buf:
            rel = now - self.sent
            self.rec.latency = rel
            if self.take_event(data, rel):
                return
            if data.startswith(b"data: ") and data.endswith(b"\n\n") and data.find(b"\n", 6) == len(data) - 2:
                if data == _DONE_EVENT:
                    self.done = True
                else:
                    self.feed_event(data, rel)
                return
        if not self.ok:
            # Only the head of an error body is kept, and a body that goes on past it (an
            # endless or huge error page) is not waited for: raising here ends the request
            # and drops the connection.
            self.error_body += data[: _ERROR_BODY_LIMIT - len(self.error_body)]
            if len(self.error_body) >= _ERROR_BODY_LIMIT:
                raise StreamFailure(
                    FailureReason.http(self.status), http_error(self.status, bytes(self.error_body))
                )
            return
        rel = now - self.sent
        self.rec.latency = rel
        if not self.head:
            self.head = data[:200]
            self.fast = self.stream
        if not self.stream:
            self.whole += data
            if len(self.whole) > BODY_LIMIT:
                raise StreamFailure(FailureReason.MALFORMED, f"response body over {BODY_LIMIT} bytes")
            return
        if self.buf:
            if b"\n" not in data:  # the middle of a long event: gather, join once it ends
                self.more.append(data)
                self.more_bytes += len(data)
                if self.more_bytes + len(self.buf) > EVENT_LIMIT:
                    raise StreamFailure(FailureReason.MALFORMED, f"an SSE event over {EVENT_LIMIT} bytes")
                return
            if self.more:
                data = b"".join(self.more) + data
                self.more.clear()
                self.more_bytes = 0
        events, self.buf = split_events(self.buf + data if self.buf else data)
        if len(self.buf) > EVENT_LIMIT:
            raise StreamFailure(FailureReason.MALFORMED, f"an SSE event over {EVENT_LIMIT} bytes")
        feed = self.feed
        fed = 0
        for payload in events:
            if payload == b"[DONE]":
                self.done = True
            else:
                feed(payload, rel)
                fed += 1
        if fed > 1:
            self.rec.shared_read_events += fed - 1


def http_error(status: int, raw: bytes) -> str:
    text = raw.decode("utf-8", "replace").strip()
    try:
        obj = json.loads(text)
    except ValueError:
        obj = None
    if isinstance(obj, dict):
        err = obj.get("error", obj.get("detail", obj.get("message")))
        if isinstance(err, dict):
            err = err.get("message", err)
        if err is not None:
            text = str(err)
    return f"HTTP {status}: {text[:500]}" if text else f"HTTP {status}"
