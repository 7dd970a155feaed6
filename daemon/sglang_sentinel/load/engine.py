"""The load engine: one event loop, one connection pool, an absolute-time schedule.

Streams go through `sglang_sentinel.load.transport` (asyncio protocol callbacks + httptools): the
bytes of one socket read reach the response parser inside the read callback
(`sglang_sentinel.load.sink`), stamped with the read's arrival time. aiohttp's client wakes a
coroutine per read and stamps it only when that coroutine gets its turn (late under load); an
aiohttp-based engine, measured in one session against this one, cost more client CPU per token
(1.89x vs 2.57x bench_serving's efficiency at 256/256, 2.66x vs 4.29x at 1024/1024) and had a
higher Poisson p99 schedule lag (3.4-6 ms vs ~2 ms); httpx parses HTTP in pure Python and cost
2-3x aiohttp's CPU per event
(`benchmarks/load_http_clients.py`, `benchmarks/load_efficiency.py`, `benchmarks/load_accuracy.py`).
aiohttp is still used for the few auxiliary calls (`/v1/models`): `sglang_sentinel.load.session`.

Timing-path discipline: bodies are serialised before their planned time; a request's send
time is taken just before its first byte is handed to the kernel (after any connect), so no
response can look earlier than the server produced it; a response read's time
is the kernel's receive stamp where the transport has one (`RunResult.timestamps`), so the
loop's own queueing stays out of TTFT, ITL and E2E; nothing heavier than a JSON decode (or, for
native events, three byte searches) and a few list appends runs per event; metrics are computed
after the run.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import json
import random
import secrets
import time
from collections.abc import Awaitable, Callable, Coroutine
from typing import Any

import aiohttp

from sglang_sentinel.load.arrivals import planned_offsets
from sglang_sentinel.load.backends import ResponseParser, StreamFailure, build_body, make_parser, parse_whole
from sglang_sentinel.load.datasets import Prompt, PromptSource
from sglang_sentinel.load.figures import compute_metrics
from sglang_sentinel.load.lag import LoopLagMonitor
from sglang_sentinel.load.print_requests import RequestPrinter
from sglang_sentinel.load.records import FailureReason, LoadCounters, RequestRecord
from sglang_sentinel.load.result import RunResult
from sglang_sentinel.load.session import make_session, request_headers, resolve_model, wait_ready
from sglang_sentinel.load.sink import ResponseSink, http_error
from sglang_sentinel.load.spec import ArrivalProcess, Backend, LoadSpec, SharedPrefixDataset
from sglang_sentinel.load.transport import ConnectError, ConnectionLost, HttpClient, ProtocolError
from sglang_sentinel.load.turns import converse

__all__ = ["RecordCallback", "run_load"]

RecordCallback = Callable[[RequestRecord], None]

_PRECISE_WINDOW_S = 0.0015


class _LoraPicker:
    """The adapter of each request (`LoadSpec.lora_names`), seeded, in request order."""

    def __init__(self, spec: LoadSpec) -> None:
        self.names = spec.lora_names
        self.mode = spec.lora_distribution
        self.rng = random.Random(spec.seed ^ 0x10AA)
        self.i = 0
        self.weights = [spec.lora_zipf_alpha**-k for k in range(len(self.names))]

    def next(self, warmup: bool) -> str | None:
        if not self.names:
            return None
        if warmup:
            return self.names[0]
        if self.mode == "distinct":
            name = self.names[self.i % len(self.names)]
            self.i += 1
            return name
        if self.mode == "skewed":
            return self.rng.choices(self.names, weights=self.weights)[0]
        return self.rng.choice(self.names)


def _routing_header(key: str | None) -> bytes:
    # bench_serving's _ROUTING_KEY_HEADER: the smg router's cache-aware routing reads it.
    return b"" if key is None else b"X-SMG-Routing-Key: " + key.encode("latin-1") + b"\r\n"


class _Run:
    def __init__(
        self,
        spec: LoadSpec,
        client: HttpClient,
        counters: LoadCounters,
        on_record: RecordCallback | None,
        model: str,
    ) -> None:
        self.spec = spec
        self.client = client
        self.counters = counters
        self.on_record = on_record
        self.model = model
        self.path = spec.backend.path
        self.t0 = time.perf_counter()
        # Unique per run even for runs started in the same millisecond: SGLang refuses a rid
        # that is already in flight.
        self.run_id = f"{int(time.time() * 1e3):x}{secrets.token_hex(3)}"
        self.slots: asyncio.Queue[float] | None = None
        self.lora = _LoraPicker(spec)
        # A client tokenizer re-counts the generated text after the run, and a conversation's
        # next turn carries the reply: the text is kept for both.
        self.keep_text = spec.keep_text or spec.tokenizer is not None or spec.multi_turn
        # Multi-turn: the measured requests' records (later turns join as they are sent) and
        # the conversations still to continue, by their first turn's index.
        self.records: list[RequestRecord] = []
        self.conversations: dict[int, Prompt] = {}
        self.next_index = 0  # prepare() is called in arrival order
        self.printer = RequestPrinter(spec, model) if spec.print_requests else None

    def now(self) -> float:
        return time.perf_counter() - self.t0

    def prepare(self, index: int, offset: float, prompt: Prompt) -> tuple[RequestRecord, bytes]:
        """A measured request's record and serialised body."""
        # A conversation's turns take the indexes after its first (unique rids); conversations
        # may differ in length (agentic traces), so the next free index is kept.
        rec = RequestRecord(index=self.next_index, warmup=False, planned=offset, prompt_len=prompt.prompt_len)
        self.next_index += 1 + len(prompt.turns)
        rec.planned_output_len = prompt.output_len
        if prompt.turns:
            self.conversations[rec.index] = prompt
        return rec, self.body(rec, prompt, prompt.output_len)

    def body(self, rec: RequestRecord, prompt: Prompt, output_len: int) -> bytes:
        rec.rid = f"sentinel-{self.run_id}-{'w' if rec.warmup else ''}{rec.index}"
        rec.routing_key = prompt.routing_key
        lora = self.lora.next(rec.warmup)
        return build_body(self.spec, prompt, model=self.model, rid=rec.rid, output_len=output_len, lora=lora)

    def start(self, rec: RequestRecord, body: bytes) -> Coroutine[Any, Any, None]:
        """What a dispatched arrival runs: one request, or a whole conversation."""
        prompt = self.conversations.pop(rec.index, None)
        if prompt is None:
            return self.execute(rec, body)
        return converse(self, rec, body, prompt, self.records)

    async def execute(self, rec: RequestRecord, body: bytes, *, release: bool = True) -> None:
        """Send one request and fill its record; never raises except on cancellation.

        `release`: give back the concurrency slot when done (a conversation keeps it until its
        last turn)."""
        counters = self.counters
        counters.sent += 1
        counters.in_flight += 1
        if self.printer is not None:
            self.printer.start(rec, body)
        try:
            await self._execute(rec, body)
        except asyncio.CancelledError:
            rec.success = False
            rec.failure = FailureReason.CANCELLED
            rec.error = "run cancelled while the request was in flight"
            raise
        finally:
            counters.in_flight -= 1
            if rec.success:
                counters.completed += 1
                counters.output_tokens += rec.output_len
            elif rec.failure != FailureReason.CANCELLED:
                counters.failed += 1
            if self.slots is not None and release:
                self.slots.put_nowait(self.now())
            if self.printer is not None:
                self.printer.end(rec)
            if self.on_record is not None:
                try:
                    self.on_record(rec)
                except Exception:  # a consumer's bug must not lose the run
                    from sglang_sentinel.log import get_logger

                    get_logger(__name__).exception("load_on_record_failed", index=rec.index)

    async def _execute(self, rec: RequestRecord, body: bytes) -> None:
        parser = make_parser(self.spec.backend, rec, self.keep_text)
        sink = ResponseSink(rec, parser, self.spec.stream)
        sink.sent = time.perf_counter()  # until the bytes are written (a connect error keeps this)
        rec.sent = sink.sent - self.t0
        rec.dispatched = True
        streaming = self.counters.streaming
        if not rec.warmup:
            streaming[rec.index] = parser
        try:
            await self._exchange(rec, body, parser, sink)
        finally:
            rec.sent = sink.sent - self.t0
            # Before `execute` counts the finished request: no await in between, so a reader
            # sees its tokens either here or in the completed count, never both or neither.
            streaming.pop(rec.index, None)

    async def _exchange(
        self, rec: RequestRecord, body: bytes, parser: ResponseParser, sink: ResponseSink
    ) -> None:
        spec = self.spec
        perf = time.perf_counter
        try:
            async with asyncio.timeout(spec.request_timeout_s):
                status = await self.client.post(self.path, body, sink, _routing_header(rec.routing_key))
            if status != 200:
                raise StreamFailure(FailureReason.http(status), http_error(status, bytes(sink.error_body)))
            if rec.latency is None:
                rec.latency = perf() - sink.sent
            if spec.stream:
                parser.finish()
            else:
                try:
                    obj = json.loads(bytes(sink.whole))
                except ValueError:
                    raise StreamFailure(FailureReason.MALFORMED, "response is not JSON") from None
                parse_whole(spec.backend, rec, self.keep_text, obj, rec.latency)
                sink.done = True
        except StreamFailure as exc:
            rec.failure = exc.reason
            rec.error = str(exc)[:1000]
            if rec.latency is None:
                rec.latency = perf() - sink.sent
            return
        except TimeoutError:
            rec.failure = FailureReason.TIMEOUT
            rec.error = f"no complete response within {spec.request_timeout_s:g} s"
            rec.latency = perf() - sink.sent
            return
        except ConnectError as exc:
            rec.failure = FailureReason.CONNECT
            rec.error = f"cannot connect to {spec.base_url}: {exc}"[:1000]
            rec.latency = perf() - sink.sent
            return
        except ProtocolError as exc:
            # Bytes that are not HTTP (bad status line, headers, chunk framing).
            rec.failure = FailureReason.MALFORMED
            rec.error = str(exc)[:1000]
            rec.latency = perf() - sink.sent
            return
        except (ConnectionLost, OSError) as exc:
            rec.failure = FailureReason.DISCONNECTED
            rec.error = str(exc)[:1000] or type(exc).__name__
            rec.latency = perf() - sink.sent
            return
        except Exception as exc:
            # Our own bug must cost one request, not the run (and never its other results).
            from sglang_sentinel.log import get_logger

            get_logger(__name__).exception("load_request_client_error", index=rec.index)
            rec.failure = FailureReason.CLIENT_ERROR
            rec.error = f"{type(exc).__name__}: {exc}"[:1000]
            rec.latency = perf() - sink.sent
            return
        done = sink.done
        if spec.stream and not done and not parser.finished and not rec.chunk_times and sink.head:
            rec.failure = FailureReason.MALFORMED
            rec.error = f"expected an event stream, got: {sink.head!r}"
            return
        if spec.stream and not done and not parser.finished:
            rec.failure = FailureReason.DISCONNECTED
            rec.error = "the response ended before the request finished (no [DONE], no finish_reason)"
            return
        if rec.ttft is None:
            rec.failure = FailureReason.NO_OUTPUT
            rec.error = "the response carried no output token"
            return
        if spec.ignore_eos and rec.output_len < rec.planned_output_len and rec.finish_reason != "abort":
            rec.failure = FailureReason.SHORT_OUTPUT
            rec.error = f"{rec.output_len} output tokens < {rec.planned_output_len} requested with ignore_eos"
            return
        rec.success = True


async def _wait(
    aw: asyncio.Future[Any] | None, limit_s: float | None, cancel_task: asyncio.Task[Any]
) -> bool:
    """Wait for `aw` (or just `limit_s`) unless cancelled first. True if cancellation won."""
    waiters: set[asyncio.Future[Any]] = {cancel_task}
    if aw is not None:
        waiters.add(aw)
    await asyncio.wait(waiters, timeout=limit_s, return_when=asyncio.FIRST_COMPLETED)
    return cancel_task.done()


async def run_load(
    spec: LoadSpec,
    *,
    counters: LoadCounters | None = None,
    on_record: RecordCallback | None = None,
    cancel: asyncio.Event | None = None,
    session: aiohttp.ClientSession | None = None,
    before_measured: Callable[[], Awaitable[None]] | None = None,
    after_measured: Callable[[], Awaitable[None]] | None = None,
) -> RunResult:
    """Run `spec` to its bound and return every figure and record.

    - `counters`: live state (in flight, done, failed...) updated as the run goes; pass your
      own to read it while the run is going (the daemon's polite injection reads `in_flight`).
    - `on_record`: called once per finished request (warm-up included, flagged), in the loop.
    - `cancel`: set it to stop: no new sends, in-flight requests are aborted (recorded as
      `cancelled`), and the partial result is returned with `cancelled=True`.
    - `session`: an aiohttp session for the auxiliary calls (model lookup); the streams
      themselves use the engine's own connection pool (`sglang_sentinel.load.transport`).
    - `before_measured`: awaited after a warm-up that succeeded, the connections opened and the
      first bodies made, right before the measured phase's clock starts (`sentinel bench
      --profile` starts SGLang's profiler there, as bench_serving does; a GPU energy window
      opens there); a stop cuts it short; it must not raise (an exception of it is dropped).
    - `after_measured`: awaited once the measured phase's last request has ended (or was
      cancelled), before the figures are computed, when `before_measured` was (a GPU energy
      window closes there); it must not raise.

    Never raises for a server's behaviour (every failure is a counted reason in the result);
    `sglang_sentinel.load.SpecError` only for a dataset file that cannot be read.
    """
    counters = counters if counters is not None else LoadCounters()
    cancel = cancel if cancel is not None else asyncio.Event()
    source = PromptSource(spec)  # may raise SpecError before anything is sent
    # The pool has no cap of its own: the engine bounds its streams (max_concurrency), so a
    # request never waits in the pool for a connection (that wait would count in TTFT).
    client = HttpClient(
        spec.base_url, request_headers(spec), connect_timeout=min(30.0, spec.request_timeout_s)
    )
    cancel_task = asyncio.create_task(cancel.wait())
    try:
        notes: list[str] = []
        model = ""
        if spec.backend is not Backend.SGLANG or spec.ready_timeout_s > 0:
            async with contextlib.AsyncExitStack() as stack:
                aux = session if session is not None else await stack.enter_async_context(make_session(spec))
                if spec.ready_timeout_s > 0:
                    waited = await _wait_ready_or_cancel(aux, spec, cancel_task)
                    if waited:
                        notes.append(waited)
                if spec.backend is not Backend.SGLANG:
                    model, note = await resolve_model(aux, spec)
                    if note:
                        notes.append(note)
        result = await _run(
            spec,
            client,
            counters,
            on_record,
            cancel_task,
            source,
            model,
            notes,
            before_measured,
            after_measured,
        )
        if spec.tokenizer is not None:
            from sglang_sentinel.load.tokenizer import load_tokenizer

            # bench_serving's retokenized count: successful requests' text, special tokens out.
            texts = [r.text or "" for r in result.measured if r.success]
            counts = await asyncio.to_thread(load_tokenizer(spec.tokenizer).count_many, texts)
            result.retokenized_output_tokens = sum(counts)
        return result
    finally:
        cancel_task.cancel()
        await client.close()


async def _wait_ready_or_cancel(
    session: aiohttp.ClientSession, spec: LoadSpec, cancel_task: asyncio.Task[Any]
) -> str | None:
    waiter = asyncio.ensure_future(wait_ready(session, spec))
    if await _wait(waiter, None, cancel_task):
        waiter.cancel()
        await asyncio.gather(waiter, return_exceptions=True)
        return None
    return waiter.result()


async def _run(
    spec: LoadSpec,
    client: HttpClient,
    counters: LoadCounters,
    on_record: RecordCallback | None,
    cancel_task: asyncio.Task[Any],
    source: PromptSource,
    model: str,
    notes: list[str],
    before_measured: Callable[[], Awaitable[None]] | None = None,
    after_measured: Callable[[], Awaitable[None]] | None = None,
) -> RunResult:
    records: list[RequestRecord] = []
    warmup_failed = False

    # ---- warm-up: concurrent, excluded from every figure ----
    n_warm = spec.warmup_requests
    if n_warm and isinstance(spec.dataset, SharedPrefixDataset):
        n_warm = max(n_warm, spec.dataset.num_groups)
    if n_warm:
        counters.warmup = True
        run = _Run(spec, client, counters, on_record, model)
        warm: list[tuple[RequestRecord, bytes]] = []
        for k, p in enumerate(source.warmup(n_warm)):
            rec = RequestRecord(index=k, warmup=True, planned=0.0, prompt_len=p.prompt_len)
            rec.planned_output_len = p.output_len
            warm.append((rec, run.body(rec, p, p.output_len)))
        tasks = {asyncio.create_task(run.execute(r, b)) for r, b in warm}
        # return_exceptions: a warm-up cut short by a stop cancels its requests, and a plain
        # gather would hold that CancelledError unread ("exception was never retrieved").
        warm_all = asyncio.gather(*tasks, return_exceptions=True)
        try:
            await _wait(warm_all, None, cancel_task)
        finally:
            for t in tasks:
                t.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
        records.extend(r for r, _ in warm)
        counters.warmup = False
        warmup_failed = not any(r.success for r, _ in warm)
        if warmup_failed:
            notes.append("every warm-up request failed; the measured phase was not run")

    # ---- measured phase ----
    run = _Run(spec, client, counters, on_record, model)
    run.records = records
    counters.planned = None if spec.num_requests is None else source.planned_requests(spec.num_requests)
    lag = LoopLagMonitor()
    inflight: set[asyncio.Task[None]] = set()
    cancelled = cancel_task.done()
    prepared: list[tuple[RequestRecord, bytes]] = []
    if not warmup_failed and not cancelled:
        # Connections are opened before the clock starts, so no request's TTFT carries a TCP
        # (or TLS) handshake that a long-lived client would not pay.
        prewarm = asyncio.ensure_future(client.prewarm(_prewarm_count(spec)))
        if await _wait(prewarm, 60.0, cancel_task) or not prewarm.done():
            prewarm.cancel()
            await asyncio.gather(prewarm, return_exceptions=True)
        if spec.arrival is ArrivalProcess.BURST and spec.num_requests is not None:
            # Everything is due at t=0: serialise all bodies first, or the last would wait.
            prepared = [run.prepare(i, 0.0, next(source)) for i in range(spec.num_requests)]
        elif spec.arrival is ArrivalProcess.CLOSED and spec.max_concurrency is not None:
            # The first max_concurrency are due at t=0 too (then _dispatch keeps bodies ahead).
            n0 = (
                spec.max_concurrency
                if spec.num_requests is None
                else min(spec.num_requests, spec.max_concurrency)
            )
            prepared = [run.prepare(i, 0.0, next(source)) for i in range(n0)]
    hooked = False
    if not warmup_failed and not cancel_task.done() and before_measured is not None:
        # Last before the clock starts: nothing of the client's own preparation (connections,
        # bodies) falls between the hook and the first send, inside a profile or an energy window.
        hooked = True
        hook = asyncio.ensure_future(before_measured())
        if await _wait(hook, None, cancel_task):
            hook.cancel()
        await asyncio.gather(hook, return_exceptions=True)
    started_at = time.time()
    run.t0 = time.perf_counter()
    cancelled = cancelled or cancel_task.done()
    if not warmup_failed and not cancelled:
        if spec.max_concurrency is not None:
            run.slots = asyncio.Queue()
            for _ in range(spec.max_concurrency):
                run.slots.put_nowait(0.0)
        lag.start()
        cancelled = await _dispatch(spec, run, source, prepared, records, inflight, cancel_task)
        if not cancelled and inflight:
            drain = asyncio.gather(*inflight, return_exceptions=True)
            cancelled = await _wait(drain, spec.drain_timeout_s, cancel_task)
            if not cancelled and inflight and spec.drain_timeout_s is not None:
                notes.append(f"{len(inflight)} requests still running after the drain timeout were cancelled")
        for t in list(inflight):
            t.cancel()
        if inflight:
            await asyncio.gather(*inflight, return_exceptions=True)
        lag.stop()
    if hooked and after_measured is not None:
        await asyncio.gather(after_measured(), return_exceptions=True)
    duration = _duration(records, run.now(), cancelled)
    metrics = compute_metrics(
        records,
        duration=duration,
        loop_lags=lag.lags,
        kernel_timestamps=client.kernel_timestamps,
        goodput_slos_ms=dict(spec.goodput_slos_ms),
        target_concurrency=spec.target_concurrency,
        steady_state_fraction=spec.steady_state_fraction,
        max_schedule_lag=spec.max_schedule_lag_s,
        max_loop_lag=spec.max_loop_lag_s,
    )
    ds = spec.dataset
    # Not for conversations: their history, not the target ratio, is what a prefix cache reuses.
    if isinstance(ds, SharedPrefixDataset) and ds.num_turns == 1 and metrics.completed:
        achieved = metrics.cache_hit_ratio
        if achieved is None:
            notes.append("the server reported no cached_tokens; the prefix-cache hit ratio was not checked")
        elif abs(achieved - ds.cache_hit_ratio) > 0.1:
            notes.append(
                f"prefix-cache hit ratio {achieved:.3f} is off the target {ds.cache_hit_ratio:.3f} "
                "(cache disabled, evicted, or too few requests per group)"
            )
    return RunResult(
        spec=spec,
        metrics=metrics,
        records=records,
        started_at=started_at,
        model=model or None,
        cancelled=cancelled,
        warmup_failed=warmup_failed,
        notes=notes,
        timestamps="kernel" if client.kernel_timestamps else "user",
    )


def _duration(records: list[RequestRecord], now: float, cancelled: bool) -> float:
    """First planned send -> the last response's end, as its bytes arrived (kernel stamp).

    Not the moment the client got round to finishing (bench_serving reads the clock after its
    gather): at saturation a client that falls behind its reads (the chat backend decodes
    every event) would stretch the run by its own backlog and under-read every throughput
    (bench_serving's way: up to 25.7 % against an overloaded server, as measured here; 512 chat
    streams at once on the simulator at speed 100: -3.8 % before, -1.2 % after, the rest the simulator's own
    write delay). A run with requests still unfinished
    (cancelled, drain timeout) lasted until now."""
    ends: list[float] = []
    for r in records:
        if r.warmup or not r.dispatched:
            continue
        end = r.end
        if end is None or r.failure == FailureReason.CANCELLED:
            return now
        ends.append(end)
    if cancelled or not ends:
        return now
    return min(max(ends), now)


def _prewarm_count(spec: LoadSpec) -> int:
    target = spec.target_concurrency
    if target is None:  # open loop without a cap: enough for the first moments
        target = min(spec.num_requests or 64, 64)
    return min(target, 1024)


async def _dispatch(
    spec: LoadSpec,
    run: _Run,
    source: PromptSource,
    prepared: list[tuple[RequestRecord, bytes]],
    records: list[RequestRecord],
    inflight: set[asyncio.Task[None]],
    cancel_task: asyncio.Task[Any],
) -> bool:
    """Send requests on schedule until the bound; True if cancelled."""
    perf = time.perf_counter
    t0 = run.t0
    limit = spec.num_requests
    deadline = spec.duration_s
    closed = spec.arrival is ArrivalProcess.CLOSED
    precise = spec.arrival in (ArrivalProcess.POISSON, ArrivalProcess.CONSTANT, ArrivalProcess.TRACE)
    slots = run.slots
    # Closed loop: bodies built ahead, while the dispatcher waits for a slot. Streams often end
    # together (one engine step finishes a batch); built on demand, the first request of such
    # a batch would wait for the serialisation of all the others (k x ~0.3 ms here, 35 ms at
    # 128 streams) before any went out: a delay of the client's own making.
    ahead: collections.deque[tuple[RequestRecord, bytes]] = collections.deque()
    n_ahead = min(spec.max_concurrency or 0, 256) if closed else 0
    for i, offset in enumerate(planned_offsets(spec, source.trace_offsets)):
        if limit is not None and i >= limit:
            break
        if deadline is not None and (offset >= deadline or (closed and run.now() >= deadline)):
            break
        if i < len(prepared):
            rec, body = prepared[i]
        elif ahead:
            rec, body = ahead.popleft()
        else:
            rec, body = run.prepare(i, offset, next(source))
        due = t0 + offset
        delay = due - perf()
        if delay > 0:
            if precise:
                # Event-loop timers wake up to ~1 ms late (epoll's millisecond timeout, rounded
                # up); sleep to just before the planned time, then yield to the loop until it
                # arrives. Other streams are still served while we yield; the cost is at most
                # _PRECISE_WINDOW_S of polling per request (about 1.5% of a core at 10 req/s).
                if delay > _PRECISE_WINDOW_S and await _wait(None, delay - _PRECISE_WINDOW_S, cancel_task):
                    return True
                while perf() < due and not cancel_task.done():  # noqa: ASYNC110 - polling is the point
                    await asyncio.sleep(0)
            elif await _wait(None, delay, cancel_task):
                return True
        if cancel_task.done():
            return True
        ready = offset
        if slots is not None:
            if slots.empty():
                j = max(i + 1 + len(ahead), len(prepared))
                while len(ahead) < n_ahead and (limit is None or j < limit) and slots.empty():
                    ahead.append(run.prepare(j, 0.0, next(source)))
                    j += 1
                getter = asyncio.ensure_future(slots.get())
                if await _wait(getter, None, cancel_task):
                    getter.cancel()
                    return True
                freed = getter.result()
            else:
                freed = slots.get_nowait()
            ready = max(offset, freed)
            if closed and deadline is not None and run.now() >= deadline:
                slots.put_nowait(freed)
                break
        rec.ready = ready
        records.append(rec)
        task = asyncio.create_task(run.start(rec, body))
        inflight.add(task)
        task.add_done_callback(inflight.discard)
    return False
