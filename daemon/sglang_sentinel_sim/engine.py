"""The continuous-batching scheduler of the simulator, run in simulated time.

One asyncio task plays SGLang's scheduler loop: every iteration it forms either a prefill batch
(waiting requests, chunked at ``chunked_prefill_size``, admitted only while the KV pool can hold
their prompt plus a ``new_token_ratio`` share of their outputs) or one decode step of the running
batch, and "runs" it by sleeping for the profile's duration divided by ``speed``. Prefill has
priority over decode, as in SGLang without mixed chunking. When the KV pool cannot hold the next
decode step, requests are retracted back to the queue (SGLang's order and ratio rule).

Per-token work is kept minimal: a decode step adds ``k`` to each running request's counter and
either calls its stream's pusher (push.py: the event is written right there) or wakes the one
future its HTTP handler may be parked on; text is produced only when a chunk is written. If the
process falls behind the schedule (a busy CPU), the engine runs steps back to back to catch up,
and slips the schedule when it is more than ``MAX_LAG_S`` behind -- the ``lag`` figures in the
control API's state say when the simulator itself was the bottleneck.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections import OrderedDict, deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from sglang_sentinel_sim.profiles import Profile
from sglang_sentinel_sim.reqstate import INJECTED_ABORT, Request, RequestState

__all__ = ["Engine", "EngineHooks", "EngineStats", "Request", "RequestState"]

# Real seconds the engine may run behind its schedule before it gives up catching up.
MAX_LAG_S: Final = 2.0
# Behind schedule by less than this, the engine still yields after every step so that each
# step's chunks go out separately; further behind, it lets several steps coalesce.
_YIELD_LAG_S: Final = 0.02
# SGLang defaults (SGLANG_INIT_NEW_TOKEN_RATIO 0.7, min ratio factor 0.14, decay over 600 steps,
# SGLANG_RETRACT_DECODE_STEPS 20).
INIT_NEW_TOKEN_RATIO: Final = 0.7
MIN_NEW_TOKEN_RATIO: Final = 0.7 * 0.14
NEW_TOKEN_RATIO_DECAY: Final = (INIT_NEW_TOKEN_RATIO - MIN_NEW_TOKEN_RATIO) / 600
RETRACT_DECODE_STEPS: Final = 20
# Scheduler gauges refresh at most this often (server seconds) while idle (check_memory).
IDLE_REFRESH_S: Final = 30.0


@dataclass(slots=True)
class EngineStats:
    """Live counters behind the control API's state (gauges are in the metrics module)."""

    forward_ct: int = 0
    decode_steps: int = 0
    prefill_batches: int = 0
    generated_tokens: int = 0
    prefill_tokens: int = 0
    retracted_reqs: int = 0
    pushed_events: int = 0  # stream events written from the decode step (push.py)
    max_lag_s: float = 0.0
    slipped_s: float = 0.0
    max_running: int = 0
    max_waiting: int = 0


class EngineHooks:
    """What the engine tells the outside world (logs, metrics, faults). Defaults do nothing."""

    def on_prefill_batch(
        self,
        engine: Engine,
        new_seqs: list[Request],
        new_tokens: int,
        cached_tokens: int,
        finished_prefill: list[Request],
    ) -> None:
        """``new_seqs``: requests scheduled for the first time (or again after a retraction)."""

    def on_decode_step(self, engine: Engine, batch_size: int, tokens: int, drafts: int) -> None:
        pass

    def on_retract(
        self, engine: Engine, retracted: list[Request], old_ratio: float, new_ratio: float
    ) -> None:
        pass

    def on_finish(self, engine: Engine, req: Request) -> None:
        pass

    def on_idle(self, engine: Engine) -> None:
        pass

    def before_step(self, engine: Engine) -> None:
        """Called before each forward; may raise to model a fatal fault."""


class Engine:
    def __init__(
        self,
        profile: Profile,
        *,
        speed: float = 1.0,
        hooks: EngineHooks | None = None,
        seed: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        if not speed > 0 or not math.isfinite(speed):
            raise ValueError(f"speed must be a positive finite number, got {speed!r}")
        self.profile = profile
        self.speed = speed
        self.hooks = hooks or EngineHooks()
        self.clock = clock
        self.capacity = profile.max_total_num_tokens
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.kv_used = 0
        self.new_token_ratio = INIT_NEW_TOKEN_RATIO
        self.stats = EngineStats()
        # Radix-cache stand-in: exact-prompt reuse, LRU, bounded by the free part of the pool.
        self._prefix_cache: OrderedDict[str, int] = OrderedDict()
        self._prefix_cache_tokens = 0
        self._wake = asyncio.Event()
        self._resume = asyncio.Event()
        self._resume.set()
        self._frozen_since: float | None = None
        self._pending_aborts: list[tuple[Request, str]] = []
        self._freeze_until: float | None = None
        self._task: asyncio.Task[None] | None = None
        self._rng = (seed * 2654435761 + 12345) & 0xFFFFFFFF or 1
        # MTP bookkeeping for the decode log (accepted tokens and forwards since the last line).
        self.spec_accepted = 0
        self.spec_forwards = 0
        # Real time at which the engine last produced output (the health check's heartbeat).
        self.last_output_at = clock()
        self.fatal: BaseException | None = None
        self.fwd_start = self.last_output_at
        # Streams' events written from the decode step (push.py); not while catching up, so that
        # the handlers coalesce tokens then. push_events=False: never (tests compare both paths).
        self.push_events = self.push_ok = True

    # ---- lifecycle ---------------------------------------------------------------------------
    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name="sim-engine")

    async def stop(self) -> None:
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            # Stopping: a failure inside the loop was already reported by the crash path.
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        for req in [*self.waiting, *self.running]:
            self._abort(req, "server shutting down")
        self.waiting.clear()
        self.running.clear()

    @property
    def task(self) -> asyncio.Task[None] | None:
        return self._task

    # ---- requests ----------------------------------------------------------------------------
    def submit(self, req: Request, arrival: float | None = None, received: float | None = None) -> None:
        """Queue ``req``; ``arrival`` = when the HTTP handler was entered (default: now);
        ``received`` = the kernel's receive time of the request (default: unknown, = arrival)."""
        now = self.clock()
        req.submitted = now
        req.arrival = now if arrival is None else min(arrival, now)
        if received is None:
            req.received_at = req.arrival
            req.received_source = "handler"
        else:
            req.received_at = min(received, req.arrival)
            req.received_source = "kernel"
        self.waiting.append(req)
        if len(self.waiting) > self.stats.max_waiting:
            self.stats.max_waiting = len(self.waiting)
        self._wake.set()

    def abort(self, req: Request, message: str = "Abort by client disconnect") -> None:
        if req.done:
            return
        if self._frozen_since is not None:
            # A hung scheduler cannot process the abort: the request stays in its batch (and
            # keeps the watchdog armed) until the engine runs again.
            self._pending_aborts.append((req, message))
            return
        if req.state == RequestState.WAITING:
            with contextlib.suppress(ValueError):
                self.waiting.remove(req)
        elif req.state == RequestState.RUNNING:
            with contextlib.suppress(ValueError):
                self.running.remove(req)
        self._release(req)
        self._abort(req, message)

    def _abort(self, req: Request, message: str) -> None:
        if req.done:
            return
        req.state = RequestState.ABORTED
        req.finish_message = message
        req.finished_at = self.clock()
        req._wake()
        self.hooks.on_finish(self, req)

    def abort_all(self, message: str = "Abort all requests") -> int:
        reqs = [*self.waiting, *self.running]
        for req in reqs:
            self.abort(req, message)
        return len(reqs)

    # ---- faults ------------------------------------------------------------------------------
    def freeze(self, duration_s: float | None = None) -> None:
        """Stop making progress (hang when ``duration_s`` is None, else a stall of that many
        server seconds)."""
        now = self.clock()
        if self._frozen_since is None:
            self._frozen_since = now
        self._freeze_until = None if duration_s is None else now + duration_s / self.speed
        self._resume.clear()

    def thaw(self) -> None:
        self._frozen_since = None
        self._freeze_until = None
        self._resume.set()
        self._wake.set()
        pending, self._pending_aborts = self._pending_aborts, []
        for req, message in pending:
            self.abort(req, message)

    @property
    def frozen_since(self) -> float | None:
        return self._frozen_since

    @property
    def busy(self) -> bool:
        return bool(self.running or self.waiting)

    def flush_cache(self) -> bool:
        if self.busy:
            return False
        self._prefix_cache.clear()
        self._prefix_cache_tokens = 0
        return True

    # ---- derived figures ---------------------------------------------------------------------
    @property
    def token_usage(self) -> float:
        return self.kv_used / self.capacity if self.capacity else 0.0

    def decode_sum_seq_lens(self) -> int:
        return sum(r.prompt_tokens + r.generated for r in self.running)

    # ---- the loop ----------------------------------------------------------------------------
    def _step_delay(self, server_seconds: float) -> float:
        return server_seconds / self.speed

    async def _run(self) -> None:
        clock = self.clock
        sched = clock()  # real time at which the next forward may start
        last_idle_refresh = sched
        behind = 0
        while True:
            if not self._resume.is_set():
                await self._wait_frozen()
                sched = clock()
                continue
            if not self.waiting and not self.running:
                self._wake.clear()
                timeout = IDLE_REFRESH_S / self.speed
                try:
                    await asyncio.wait_for(
                        self._wake.wait(), timeout=max(0.0, last_idle_refresh + timeout - clock())
                    )
                except TimeoutError:
                    self.hooks.on_idle(self)
                    last_idle_refresh = clock()
                    continue
                continue
            self.hooks.before_step(self)
            if not self.running:
                # Idle, an engine on time starts when the first request reaches the scheduler,
                # not when this loop got round to it (the loop's wake-up is lag, not server time).
                sched = max(sched, min(r.submitted for r in self.waiting))
            # The forward at `sched` sees only the requests that had reached the scheduler by then.
            # This loop plans when it wakes, which on a busy host is later: a request that came in
            # between would have joined a prefill that an engine on time started without it one
            # step later (served faster than the schedule, by up to a whole step for a lag of
            # milliseconds). It waits for the next forward, as it would have.
            duration = self._plan_and_cost(visible_at=sched)
            self.fwd_start = sched
            end = sched + self._step_delay(duration)
            now = clock()
            self.push_ok = self.push_events
            if end > now:
                await asyncio.sleep(end - now)
            else:
                lag = now - end
                if lag > self.stats.max_lag_s:
                    self.stats.max_lag_s = lag
                if lag > MAX_LAG_S:
                    self.stats.slipped_s += lag
                    end = now
                # Slightly behind: still let the handlers write this step's chunks before the next
                # step. Far behind: run several steps per yield so streams coalesce and catch up.
                behind += 1
                self.push_ok = self.push_events and lag < _YIELD_LAG_S
                if lag < _YIELD_LAG_S or behind >= 8:
                    behind = 0
                    await asyncio.sleep(0)
            if not self._resume.is_set():
                # Frozen mid-forward: the forward "completes" only after the freeze ends.
                await self._wait_frozen()
                end = clock()
            sched = end
            self._apply(end)
            last_idle_refresh = end

    async def _wait_frozen(self) -> None:
        while not self._resume.is_set():
            until = self._freeze_until
            if until is None:
                await self._resume.wait()
            else:
                remaining = until - self.clock()
                if remaining <= 0:
                    self.thaw()
                    break
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._resume.wait(), timeout=remaining)

    # The planned forward, kept between _plan_and_cost and _apply.
    _planned_prefill: list[tuple[Request, int]]
    _planned_cached: int
    _planned_decode: bool

    def _plan_and_cost(self, visible_at: float | None = None) -> float:
        """Choose the next forward and return its duration in server seconds.

        ``visible_at``: only requests submitted by then can join a prefill (None: every waiting one).
        """
        p = self.profile
        batch = self._plan_prefill(visible_at)
        self._planned_prefill = batch
        if batch:
            self._planned_decode = False
            new_tokens = sum(n for _, n in batch)
            return p.prefill_base_s + new_tokens / p.prefill_tokens_per_s
        self._planned_decode = True
        self._ensure_decode_room()
        b = len(self.running)
        if b == 0:
            return 0.0
        base = p.decode_graph_base_s if b <= p.cuda_graph_max_bs else p.decode_base_s
        cost = base + p.decode_per_req_s * b + p.decode_per_kv_token_s * self.kv_used
        if p.decode_per_gen_token_s:
            cost += p.decode_per_gen_token_s * sum(r.generated for r in self.running)
        return cost

    def _reserved_decode_tokens(self) -> int:
        ratio = self.new_token_ratio
        return int(sum((r.target - r.generated) * ratio for r in self.running))

    def _plan_prefill(self, visible_at: float | None = None) -> list[tuple[Request, int]]:
        p = self.profile
        if not self.waiting:
            return []
        budget = min(p.chunked_prefill_size, p.max_prefill_tokens)
        free = self.capacity - self.kv_used - self._reserved_decode_tokens()
        batch: list[tuple[Request, int]] = []
        self._planned_cached = 0
        slots = p.max_running_requests - len(self.running)
        for req in self.waiting:
            if budget <= 0 or slots <= 0:
                break
            if visible_at is not None and req.submitted > visible_at:
                continue  # not in the scheduler's queue yet at this forward's start
            if req.prefilled == 0:
                cached = self._lookup_prefix(req)
                req.cached_tokens = cached
                req.prefilled = cached
            # A retracted request re-prefills its prompt and the tokens it already generated.
            total = req.prompt_tokens + req.generated
            remaining = total - req.prefilled
            need = remaining + int((req.target - req.generated) * self.new_token_ratio)
            if need > free and (self.running or batch or req.kv_held):
                break
            if total >= self.capacity and not self.running and not batch:
                # Can never fit: SGLang rejects such prompts up front; abort it here.
                self.waiting.remove(req)
                self._abort(req, f"Input length ({total} tokens) exceeds the KV cache capacity.")
                return self._plan_prefill(visible_at)
            chunk = min(remaining, budget)
            batch.append((req, chunk))
            if req.kv_held == 0 and req.cached_tokens:
                self._planned_cached += req.cached_tokens
            budget -= chunk
            free -= need
            if chunk < remaining:
                break  # chunked request: only one per batch, and it ends the batch
            slots -= 1
        return batch

    def _lookup_prefix(self, req: Request) -> int:
        key = req.prompt_key
        if req.pd_role == "decode" and not req.generated:
            return req.prompt_tokens - 1  # the KV came from the prefill server (sglang_sentinel_sim.disagg)
        if not key or req.generated:
            return 0
        cached = self._prefix_cache.get(key)
        if cached is None:
            return 0
        self._prefix_cache.move_to_end(key)
        # SGLang always recomputes at least the last prompt token.
        return min(cached, req.prompt_tokens - 1)

    def _remember_prefix(self, req: Request) -> None:
        key = req.prompt_key
        if not key:
            return
        old = self._prefix_cache.pop(key, 0)
        self._prefix_cache_tokens -= old
        self._prefix_cache[key] = req.prompt_tokens
        self._prefix_cache_tokens += req.prompt_tokens
        limit = max(0, self.capacity - self.kv_used)
        while self._prefix_cache_tokens > limit and self._prefix_cache:
            _, n = self._prefix_cache.popitem(last=False)
            self._prefix_cache_tokens -= n

    def _ensure_decode_room(self) -> None:
        running = self.running
        if not running:
            return
        k = self._tokens_per_step()
        if self.capacity - self.kv_used >= len(running) * k:
            self.new_token_ratio = max(self.new_token_ratio - NEW_TOKEN_RATIO_DECAY, MIN_NEW_TOKEN_RATIO)
            return
        # SGLang: sort by (#output, -#input) descending, retract from the end while short of room.
        order = sorted(running, key=lambda r: (r.generated, -r.prompt_tokens), reverse=True)
        retracted: list[Request] = []
        while len(order) > 1 and self.capacity - self.kv_used < len(order) * (k + RETRACT_DECODE_STEPS):
            req = order.pop()
            retracted.append(req)
            self._release(req)
            req.prefilled = 0
            req.cached_tokens = 0
            req.retractions += 1
            req.state = RequestState.WAITING
        if len(order) == 1 and self.capacity - self.kv_used < k:
            # SGLang raises "Out of memory even after retracting all other requests in the
            # decode batch." here; the simulator ends just that request instead of the server.
            last = order.pop()
            self._release(last)
            self._abort(last, "Out of memory even after retracting all other requests in the decode batch.")
        if not retracted and order:
            return
        keep = set(map(id, order))
        self.running = [r for r in running if id(r) in keep]
        for req in reversed(retracted):
            self.waiting.appendleft(req)
        if not retracted:
            return
        decoded = sum(r.generated for r in self.running)
        max_new = sum(r.max_new_tokens for r in self.running)
        old = self.new_token_ratio
        self.new_token_ratio = min(1.0, (decoded + RETRACT_DECODE_STEPS * len(self.running)) / (max_new + 1))
        self.stats.retracted_reqs += len(retracted)
        self.hooks.on_retract(self, retracted, old, self.new_token_ratio)

    def _release(self, req: Request) -> None:
        self.kv_used -= req.kv_held
        req.kv_held = 0

    def _tokens_per_step(self) -> int:
        p = self.profile
        return 1 if p.mtp_accept_length <= 1.0 else p.mtp_draft_tokens + 1

    def _accepted(self) -> int:
        """Tokens accepted this step under MTP: 1 + draft tokens, mean ``mtp_accept_length``."""
        p = self.profile
        # LCG: deterministic for a given seed and request order.
        self._rng = (self._rng * 1103515245 + 12345) & 0x7FFFFFFF
        u = self._rng / 0x7FFFFFFF
        extra = p.mtp_accept_length - 1.0
        lo = math.floor(extra)
        frac = extra - lo
        n = 1 + lo + (1 if u < frac else 0)
        return min(n, p.mtp_draft_tokens + 1)

    def _apply(self, now: float) -> None:
        self.stats.forward_ct += 1
        if not self._planned_decode:
            self._apply_prefill(now)
        else:
            self._apply_decode(now)

    def _apply_prefill(self, now: float) -> None:
        batch = self._planned_prefill
        self._planned_prefill = []
        new_tokens = 0
        new_seqs: list[Request] = []
        done: list[Request] = []
        for req, chunk in batch:
            if req.state != RequestState.WAITING:
                continue  # aborted while the forward ran
            if req.kv_held == 0:
                new_seqs.append(req)
                if req.scheduled_at == 0.0:
                    req.scheduled_at = self.fwd_start
                # The cached prefix is pinned in the pool as soon as the request is scheduled.
                req.kv_held = req.cached_tokens
                self.kv_used += req.cached_tokens
            req.prefilled += chunk
            req.kv_held += chunk
            self.kv_used += chunk
            new_tokens += chunk
            if req.prefilled >= req.prompt_tokens + req.generated:
                done.append(req)
        self.stats.prefill_batches += 1
        self.stats.prefill_tokens += new_tokens
        first_output = False
        for req in done:
            self.waiting.remove(req)
            if req.generated == 0 and req.target > 0:
                req.generated = 1  # the prefill forward samples the first output token
                req.first_token_at = now
                req.last_token_at = now
                req.kv_held += 1
                self.kv_used += 1
                self.stats.generated_tokens += 1
                first_output = True
            if req.generated >= req.target:
                self._finish(req, now)
            else:
                req.state = RequestState.RUNNING
                self.running.append(req)
                req._wake()
        if first_output:
            self.last_output_at = now
        if len(self.running) > self.stats.max_running:
            self.stats.max_running = len(self.running)
        self.hooks.on_prefill_batch(self, new_seqs, new_tokens, self._planned_cached, done)

    def _apply_decode(self, now: float) -> None:
        running = self.running
        if not running:
            return
        mtp = self.profile.mtp_accept_length > 1.0
        push = self.push_ok
        total = pushed = 0
        finished = False
        for req in running:
            if req.state != RequestState.RUNNING:
                finished = True
                continue
            stop = req.target if req.fault_at is None else min(req.target, req.fault_at)
            left = stop - req.generated
            if left <= 0:  # at its fault's token since the prefill: ended below, no token
                finished = True
                continue
            if mtp:
                k = self._accepted()
                req.spec_steps += 1
            else:
                k = 1
            if k > left:
                k = left
            req.generated += k
            req.kv_held += k
            total += k
            req.last_token_at = now
            if req.generated >= stop:
                finished = True
            elif req.generated >= req.wake_at:
                p = req.pusher  # a stream in its steady state writes its own event (push.py)
                if push and p is not None and p():
                    pushed += 1
                else:
                    req._wake()
        self.kv_used += total
        self.stats.decode_steps += 1
        self.stats.pushed_events += pushed
        self.stats.generated_tokens += total
        if mtp:
            self.spec_accepted += total
            self.spec_forwards += len(running)
        self.last_output_at = now
        batch_size = len(running)
        if finished:
            keep: list[Request] = []
            for req in running:
                if req.state != RequestState.RUNNING:
                    continue
                if req.generated >= req.target:
                    self._finish(req, now)
                elif req.fault_at is not None and req.generated >= req.fault_at:
                    self._release(req)
                    self._abort(req, INJECTED_ABORT)
                else:
                    keep.append(req)
            self.running = keep
        self.hooks.on_decode_step(self, batch_size, total, self._tokens_per_step() * batch_size)

    def _finish(self, req: Request, now: float) -> None:
        req.state = RequestState.FINISHED
        req.finished_at = now
        if req.first_token_at == 0.0:
            req.first_token_at = now
            req.last_token_at = now
        self._release(req)
        self._remember_prefix(req)
        req._wake()
        self.hooks.on_finish(self, req)
