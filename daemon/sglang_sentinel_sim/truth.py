"""Ground truth: what the simulator really did for every client request, and a summary of it.

Tests and benchmarks compare a client's measurements (TTFT, E2E, throughput, concurrency) with
these records. Times are Unix timestamps (seconds, float) of the moments the *engine* produced
the tokens -- the server-side truth -- and latencies are real seconds, so at ``--speed S`` they
are S times shorter than the profile's server time. Health probes and the start-up warm-up
request are not client traffic and are not recorded.
"""

from __future__ import annotations

import statistics
from collections import deque
from dataclasses import asdict, dataclass
from typing import Any

from sglang_sentinel_sim.engine import Request, RequestState

__all__ = ["GroundTruth", "TruthRecord"]


@dataclass(frozen=True, slots=True)
class TruthRecord:
    rid: str
    route: str
    stream: bool
    # ok | aborted (server or client abort) | error (in-band error injected) | rejected (HTTP error)
    status: str
    # When the request's bytes reached the simulator's socket: the kernel's receive time of the
    # last packet read before its handler ran (arrival_source "kernel"), or where the platform
    # cannot tell, when the handler was entered ("handler"). The start of ttft_s and e2e_s, so
    # they hold the simulator's own HTTP queueing, as a server's socket sees its TTFT.
    arrival_time: float
    # "kernel" | "handler": where arrival_time came from.
    arrival_source: str
    # When the simulator's HTTP handler chain was entered (SGLang's created_time: the start of the
    # sim's own TTFT histogram and of meta_info's request_received_ts/e2e_latency). Minus
    # arrival_time = how long the request waited inside the simulator before its handler ran.
    handler_time: float
    # When the request entered the scheduler's waiting queue, its body read and parsed (SGLang's
    # request_sent_to_scheduler_ts). The scheduler admits in this order, which a busy loop can make
    # differ from the handlers' order: what replays the scheduler's decisions starts here.
    submitted_time: float
    first_token_time: float | None
    last_token_time: float | None
    finish_time: float | None
    prompt_tokens: int
    completion_tokens: int
    cached_tokens: int
    finish_reason: str | None
    retractions: int
    fault: str | None
    # Streams only: when the simulator handed the first token's chunk to the transport. Minus
    # first_token_time = the simulator's own write delay (its loop lag), not the client's.
    first_token_written_time: float | None = None
    # Streams only: how many events carried new tokens (completion_tokens / token_events = tokens
    # per event; 1.0 when the simulator kept up with one token per event).
    token_events: int | None = None

    @property
    def ttft_s(self) -> float | None:
        return None if self.first_token_time is None else self.first_token_time - self.arrival_time

    @property
    def e2e_s(self) -> float | None:
        return None if self.finish_time is None else self.finish_time - self.arrival_time

    @property
    def handler_wait_s(self) -> float:
        """Seconds the request waited inside the simulator before its handler ran."""
        return self.handler_time - self.arrival_time

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["ttft_s"] = self.ttft_s
        data["e2e_s"] = self.e2e_s
        data["handler_wait_s"] = self.handler_wait_s
        return data


def _pct(values: list[float], q: float) -> float:
    """Percentile with linear interpolation (numpy's default, as bench_serving uses)."""
    s = sorted(values)
    if not s:
        return 0.0
    pos = (len(s) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(s) - 1)
    return s[lo] + (s[hi] - s[lo]) * (pos - lo)


class GroundTruth:
    def __init__(self, mono_to_unix: float, limit: int = 200_000) -> None:
        # unix = monotonic + offset, fixed at start so records are mutually consistent.
        self._offset = mono_to_unix
        self._records: deque[TruthRecord] = deque(maxlen=limit)
        self.dropped = 0

    def unix(self, mono: float) -> float:
        return mono + self._offset

    def record(
        self, req: Request, *, route: str, stream: bool, status: str | None = None, fault: str | None = None
    ) -> None:
        if len(self._records) == self._records.maxlen:
            self.dropped += 1
        started = req.first_token_at > 0.0 and req.generated > 0
        finished = req.finished_at > 0.0
        if status is None:
            status = "ok" if req.state == RequestState.FINISHED else "aborted"
        reason = req.finish_reason()
        self._records.append(
            TruthRecord(
                rid=req.rid,
                route=route,
                stream=stream,
                status=status,
                arrival_time=self.unix(req.received_at),
                arrival_source=req.received_source,
                handler_time=self.unix(req.arrival),
                submitted_time=self.unix(req.submitted),
                first_token_time=self.unix(req.first_token_at) if started else None,
                last_token_time=self.unix(req.last_token_at) if started else None,
                finish_time=self.unix(req.finished_at) if finished else None,
                prompt_tokens=req.prompt_tokens,
                completion_tokens=req.generated,
                cached_tokens=req.cached_tokens,
                finish_reason=None if reason is None else str(reason["type"]),
                retractions=req.retractions,
                fault=fault,
                first_token_written_time=self.unix(req.first_written_at) if req.first_written_at else None,
                token_events=req.token_events if stream else None,
            )
        )

    def reset(self) -> int:
        n = len(self._records)
        self._records.clear()
        self.dropped = 0
        return n

    def records(self, since: float | None = None) -> list[TruthRecord]:
        if since is None:
            return list(self._records)
        return [r for r in self._records if r.arrival_time >= since]

    def summary(self, since: float | None = None) -> dict[str, Any]:
        recs = self.records(since)
        by_status: dict[str, int] = {}
        for r in recs:
            by_status[r.status] = by_status.get(r.status, 0) + 1
        ok = [r for r in recs if r.status == "ok" and r.finish_time is not None]
        out: dict[str, Any] = {
            "requests": len(recs),
            "by_status": by_status,
            "completed": len(ok),
            "dropped_records": self.dropped,
        }
        if not ok:
            return out
        start = min(r.arrival_time for r in ok)
        end = max(r.finish_time for r in ok if r.finish_time is not None)
        duration = max(end - start, 1e-9)
        in_tok = sum(r.prompt_tokens for r in ok)
        out_tok = sum(r.completion_tokens for r in ok)
        e2e = [r.e2e_s for r in ok if r.e2e_s is not None]
        ttft = [r.ttft_s for r in ok if r.ttft_s is not None]
        waits = [r.handler_wait_s for r in ok]
        tpot = [
            (r.last_token_time - r.first_token_time) / (r.completion_tokens - 1)
            for r in ok
            if r.completion_tokens > 1 and r.first_token_time is not None and r.last_token_time is not None
        ]
        # Exact peak of simultaneously open requests (sweep over arrival/finish events).
        events = sorted(
            [(r.arrival_time, 1) for r in ok] + [(r.finish_time or r.arrival_time, -1) for r in ok]
        )
        level = peak = 0
        for _, delta in events:
            level += delta
            peak = max(peak, level)
        # bench_serving's definition: count each request in every 1-second bucket it touches.
        buckets: dict[int, int] = {}
        for r in ok:
            for b in range(int(r.arrival_time - start), int((r.finish_time or r.arrival_time) - start) + 1):
                buckets[b] = buckets.get(b, 0) + 1
        out.update(
            {
                "start_time": start,
                "end_time": end,
                "duration_s": duration,
                "total_input_tokens": in_tok,
                "total_output_tokens": out_tok,
                "total_cached_tokens": sum(r.cached_tokens for r in ok),
                "retractions": sum(r.retractions for r in ok),
                "request_throughput": len(ok) / duration,
                "input_throughput": in_tok / duration,
                "output_throughput": out_tok / duration,
                "total_throughput": (in_tok + out_tok) / duration,
                "mean_concurrency": sum(e2e) / duration,
                "peak_concurrency": peak,
                "peak_concurrency_1s_buckets": max(buckets.values()) if buckets else 0,
                "mean_ttft_s": statistics.fmean(ttft) if ttft else None,
                "median_ttft_s": _pct(ttft, 50) if ttft else None,
                "p99_ttft_s": _pct(ttft, 99) if ttft else None,
                "mean_tpot_s": statistics.fmean(tpot) if tpot else None,
                "mean_handler_wait_s": statistics.fmean(waits),
                "p99_handler_wait_s": _pct(waits, 99),
                "kernel_arrivals": sum(1 for r in ok if r.arrival_source == "kernel"),
                "mean_e2e_s": statistics.fmean(e2e),
                "median_e2e_s": _pct(e2e, 50),
                "p99_e2e_s": _pct(e2e, 99),
            }
        )
        return out
