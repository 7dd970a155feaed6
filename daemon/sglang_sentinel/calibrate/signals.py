"""The server's own view of a step: SGLang's scheduler gauges sampled from /metrics while it runs.

SGLang's scheduler gauges are snapshots written at log time (every prefill batch and every
``decode-log-interval`` decode steps), so one scrape at the end of a step says little: the step
is sampled every ``interval`` seconds and summarised (mean, max, fraction of samples with a
non-empty queue). Each figure is taken once per server with
:func:`sglang_sentinel.sglang.series.server_total`: other TP ranks' series (``--enable-metrics-for-all-
schedulers``) are duplicates, ``--enable-priority-scheduling`` adds per-priority series next to
the ``priority=""`` total, and DP replicas (``dp_rank``) are summed (KV usage: the fullest).

Every failure (connection refused, non-200, an unparsable body) is counted in
``scrape_failures`` rather than raised: the client-side figures of a step stand on their own.
A 404 means the server runs without ``--enable-metrics``; sampling stops for good and the step
is judged from client signals alone.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from dataclasses import dataclass, field
from types import TracebackType

import httpx
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.calibrate.model import ServerSignals
from sglang_sentinel.httpread import HttpReadError, read
from sglang_sentinel.sglang.series import server_total

# The collector's cap ([collectors.sglang] max_bytes' default): a TP=8 /metrics is well under it.
_METRICS_MAX_BYTES = 32 * 2**20

__all__ = ["ServerSampler", "parse_sample"]

QUEUE = "sglang:num_queue_reqs"
RUNNING = "sglang:num_running_reqs"
TOKEN_USAGE = "sglang:token_usage"
RETRACTED = "sglang:num_retracted_requests_total"
_WANTED = (QUEUE, RUNNING, TOKEN_USAGE, RETRACTED)


# Only these series' sample lines are handed to the parser: a full SGLang exposition is hundreds
# of histogram lines, and parsing all of it costs ~90 ms of the load generator's event loop per
# scrape (measured against `sentinel sim`), enough to make every step look client-bound.
_LINE_PREFIXES = tuple(f"{name}{sep}" for name in _WANTED for sep in ("{", " "))


def parse_sample(text: str) -> dict[str, float]:
    """The wanted series' values from one exposition. Raises ValueError on a malformed line."""
    lines = [line for line in text.splitlines() if line.startswith(_LINE_PREFIXES)]
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    try:
        for family in text_string_to_metric_families("\n".join(lines) + "\n"):
            for sample in family.samples:
                if sample.name in _WANTED:
                    found.setdefault(sample.name, []).append((sample.labels, float(sample.value)))
    except (ValueError, TypeError, IndexError) as exc:
        # prometheus_client's parser reports bad lines with assorted exception types.
        raise ValueError(f"malformed metrics exposition: {exc}") from None
    out: dict[str, float] = {}
    for name, series in found.items():
        value = server_total(series, across_replicas="max" if name == TOKEN_USAGE else "sum")
        if value is not None:
            out[name] = value
    return out


@dataclass
class _Samples:
    # (Unix time of the scrape, the wanted gauges' values)
    gauges: list[tuple[float, dict[str, float]]] = field(default_factory=list)
    retracted_first: float | None = None
    retracted_last: float | None = None
    failures: int = 0


class ServerSampler:
    """``async with ServerSampler(client, url, interval) as s: ...`` then ``s.summary()``."""

    def __init__(self, client: httpx.AsyncClient, url: str, interval: float, deadline_s: float = 5.0) -> None:
        self._client = client
        self._deadline = deadline_s
        self._url = url
        self._interval = interval
        self._samples = _Samples()
        self._task: asyncio.Task[None] | None = None
        self.disabled_reason: str | None = None

    async def __aenter__(self) -> ServerSampler:
        # The counter baseline, before the first request goes out. Gauges from before and after
        # the step would only dilute the step's own picture (an idle server), so they are skipped.
        await self._scrape(gauges=False)
        self._task = asyncio.create_task(self._loop())
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        if exc_type is None:
            await self._scrape(gauges=False)

    async def _loop(self) -> None:
        while self.disabled_reason is None:
            await asyncio.sleep(self._interval)
            await self._scrape()

    async def _scrape(self, *, gauges: bool = True) -> None:
        if self.disabled_reason is not None:
            return
        s = self._samples
        try:
            # Bounded as a whole (httpread): a server that drips its reply must not hold a step.
            resp = await read(
                self._client, "GET", self._url, deadline_s=self._deadline, max_bytes=_METRICS_MAX_BYTES
            )
        except HttpReadError:
            s.failures += 1
            return
        if resp.status_code == 404:
            self.disabled_reason = "the server has no /metrics (start SGLang with --enable-metrics)"
            return
        if resp.status_code != 200:
            s.failures += 1
            return
        try:
            values = parse_sample(resp.text)
        except ValueError:
            s.failures += 1
            return
        if RETRACTED in values:
            if s.retracted_first is None:
                s.retracted_first = values[RETRACTED]
            s.retracted_last = values[RETRACTED]
        if gauges:
            s.gauges.append((time.time(), values))

    def summary(self, window: tuple[float, float] | None = None) -> ServerSignals | None:
        """None when the server exposes no metrics at all (nothing to judge from).

        ``window`` (Unix times): judge only the samples taken inside it — the step's steady-state
        window, so that the server's view and the throughput describe the same seconds (a closed
        loop's queue drains during its closing tail). Without a sample inside it, all are used.
        """
        s = self._samples
        if not s.gauges and (self.disabled_reason is not None or s.failures > 0):
            return None
        chosen = s.gauges
        if window is not None:
            inside = [g for g in s.gauges if window[0] <= g[0] <= window[1]]
            chosen = inside or s.gauges
        queue = [v[QUEUE] for _, v in chosen if QUEUE in v]
        running = [v[RUNNING] for _, v in chosen if RUNNING in v]
        usage = [v[TOKEN_USAGE] for _, v in chosen if TOKEN_USAGE in v]

        def mean(xs: list[float]) -> float | None:
            return sum(xs) / len(xs) if xs else None

        retractions = None
        if s.retracted_first is not None and s.retracted_last is not None:
            # A counter that went down means the server restarted mid-step: count from zero.
            delta = s.retracted_last - s.retracted_first
            retractions = delta if delta >= 0 else s.retracted_last
        return ServerSignals(
            samples=len(chosen),
            scrape_failures=s.failures,
            queue_mean=mean(queue),
            queue_max=max(queue) if queue else None,
            queue_nonzero_ratio=(sum(1 for q in queue if q > 0) / len(queue)) if queue else None,
            running_mean=mean(running),
            running_max=max(running) if running else None,
            token_usage_mean=mean(usage),
            token_usage_max=max(usage) if usage else None,
            retractions=retractions,
        )
