"""The engine's observer: engine events as SGLang's TP0 scheduler logs and measures them.

Kept apart from the server's lifecycle (``server.py``): this is where the simulator's scheduler
log lines ("Prefill batch", "Decode batch", retractions) and scheduler metrics are written.
"""

from __future__ import annotations

import time
from collections import Counter
from collections.abc import Iterable
from typing import TYPE_CHECKING

from sglang_sentinel_sim.engine import Engine, EngineHooks, Request, RequestState
from sglang_sentinel_sim.profiler import SimProfiler
from sglang_sentinel_sim.versions import decode_line, has, prefill_line, retract_line

if TYPE_CHECKING:
    from sglang_sentinel_sim.context import SimContext

__all__ = ["EngineObserver"]


class EngineObserver(EngineHooks):
    """Turns engine events into SGLang log lines and scheduler metrics, as the TP0 scheduler does."""

    def __init__(self, srv: SimContext) -> None:
        self.srv = srv
        now = time.monotonic()
        self.last_decode_log = now
        self.last_prefill_log = now
        self.last_prefill_tokens = 0
        self.tokens_since_log = 0
        self.last_gen_throughput = 0.0
        self.profiler = SimProfiler(srv)

    def _stats_common(self, engine: Engine) -> None:
        m = self.srv.metrics
        if m is None:
            return
        s = m.stats
        s["num_used_tokens"] = engine.kv_used
        s["token_usage"] = engine.token_usage
        if has("metrics.module_moved", self.srv.version):
            # 0.5.23 pool_stats_observer.py update_scheduler_stats: the gauge is rounded, the pool
            # parts not (the 0.5.23 family set, served from the metrics.module_moved row on).
            s["token_usage"] = round(engine.token_usage, 2)
            s["full_token_usage"] = engine.token_usage
            s["kv_used_tokens"] = engine.kv_used
            s["kv_available_tokens"] = engine.capacity - engine.kv_used
        s["num_queue_reqs"] = len(engine.waiting)
        s["max_total_num_tokens"] = engine.capacity
        s["new_token_ratio"] = engine.new_token_ratio
        s["engine_startup_time"] = self.srv.startup_seconds
        s["engine_load_weights_time"] = self.srv.load_weights_seconds

    def on_prefill_batch(
        self,
        engine: Engine,
        new_seqs: list[Request],
        new_tokens: int,
        cached_tokens: int,
        finished_prefill: list[Request],
    ) -> None:
        self.profiler.on_batch(engine.stats.forward_ct, prefill=True)
        now = time.monotonic()
        gap = now - self.last_prefill_log
        self.last_prefill_log = now
        version = self.srv.version
        # Through 0.5.10.post1: the previous batch's tokens over the time since the previous line
        # (from 0.5.11, as 0.5.23's metrics_reporter.py: this batch's tokens).
        tokens = new_tokens if has("log.prefill_throughput_this_batch", version) else self.last_prefill_tokens
        throughput = tokens / gap if gap > 0 else 0.0
        self.last_prefill_tokens = new_tokens
        joined = {id(r) for r in finished_prefill if r.state == RequestState.RUNNING}
        before = [r for r in engine.running if id(r) not in joined]
        running_bs = len(before)
        self.srv.log.scheduler(
            prefill_line(
                version,
                new_seqs=len(new_seqs),
                new_tokens=new_tokens,
                cached_tokens=cached_tokens,
                usage=engine.token_usage,
                running=running_bs,
                queued=len(engine.waiting),
                throughput=throughput,
                cuda_graph=False,
            )
        )
        m = self.srv.metrics
        if m is None:
            return
        m.prefill_cuda_graph_pass()
        m.rt_prefill_compute.inc(new_tokens)
        if cached_tokens:
            m.rt_prefill_cache.inc(cached_tokens)
        for req in new_seqs:
            if req.retractions == 0 and req.log_metrics:
                m.observe_queue_time(max(0.0, req.scheduled_at - req.arrival))
        self._stats_common(engine)
        total = new_tokens + cached_tokens
        m.stats["num_running_reqs"] = running_bs
        m.stats["cache_hit_rate"] = cached_tokens / total if total else 0.0
        m.log_stats(_by_priority(before, engine.waiting))

    def on_decode_step(self, engine: Engine, batch_size: int, tokens: int, drafts: int) -> None:
        self.profiler.on_batch(engine.stats.forward_ct, prefill=False)
        self.tokens_since_log += tokens
        m = self.srv.metrics
        # Above the largest captured batch size SGLang runs the step eagerly.
        cuda_graph = self.srv.profile.cuda_graph and batch_size <= self.srv.profile.cuda_graph_max_bs
        if m is not None:
            m.rt_decode.inc(tokens)
            m.cuda_graph_pass(cuda_graph)
        if engine.stats.decode_steps % self.srv.config.decode_log_interval:
            return
        now = time.monotonic()
        gap = now - self.last_decode_log
        self.last_decode_log = now
        self.last_gen_throughput = self.tokens_since_log / gap if gap > 0 else 0.0
        self.tokens_since_log = 0
        p = self.srv.profile
        spec = ""
        accept_len = accept_rate = 0.0
        if p.mtp_accept_length > 1.0:
            forwards = engine.spec_forwards
            accept_len = engine.spec_accepted / forwards if forwards else 0.0
            if not has("log.spec_accept_rate_drafts", self.srv.version):
                accept_rate = (
                    engine.spec_accepted / (forwards * (p.mtp_draft_tokens + 1)) if forwards else 0.0
                )
            else:
                # From 0.5.11 (0.5.23 metrics_reporter.py): accepted drafts (without the bonus token
                # of each verify) over proposed drafts (speculative_num_draft_tokens - 1 per verify).
                proposed = forwards * p.mtp_draft_tokens
                accept_rate = (engine.spec_accepted - forwards) / proposed if proposed else 0.0
            engine.spec_accepted = engine.spec_forwards = 0
            spec = f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
            self.srv.last_accept_length = accept_len
        self.srv.log.scheduler(
            decode_line(
                self.srv.version,
                running=batch_size,
                kv_used=engine.kv_used,
                usage=engine.token_usage,
                spec=spec,
                cuda_graph=cuda_graph,
                gen_throughput=self.last_gen_throughput,
                queued=len(engine.waiting),
                hisparse=self.srv.hisparse_pools() if self.srv.config.enable_hisparse else None,
            )
        )
        if m is not None:
            self._stats_common(engine)
            s = m.stats
            s["num_running_reqs"] = batch_size
            s["gen_throughput"] = self.last_gen_throughput
            s["decode_sum_seq_lens"] = engine.decode_sum_seq_lens()
            if not has("metrics.decode_keeps_cache_hit_rate", self.srv.version):
                s["cache_hit_rate"] = 0.0  # through 0.5.19: 0 on every decode log (then prefill's kept)
            s["spec_accept_length"] = accept_len
            s["spec_accept_rate"] = accept_rate
            m.log_stats(_by_priority(engine.running, engine.waiting))

    def on_retract(
        self, engine: Engine, retracted: list[Request], old_ratio: float, new_ratio: float
    ) -> None:
        gained = sum(r.prompt_tokens + r.generated for r in retracted)
        self.srv.log.scheduler(
            retract_line(
                self.srv.version, reqs=len(retracted), gained=gained, old_ratio=old_ratio, new_ratio=new_ratio
            )
        )
        m = self.srv.metrics
        if m is not None:
            m.retracted(
                len(retracted), sum(r.prompt_tokens for r in retracted), sum(r.generated for r in retracted)
            )

    def on_finish(self, engine: Engine, req: Request) -> None:
        m = self.srv.metrics
        if m is None or not req.log_metrics:
            return
        if req.state == RequestState.ABORTED:
            m.aborted(req.priority)
        else:
            m.finished(
                req.prompt_tokens,
                req.generated,
                req.cached_tokens,
                req.finished_at - req.arrival,
                req.retractions,
                stream=req.stream,
                decode_s=req.finished_at - req.first_token_at if req.first_token_at else None,
                priority=req.priority,
            )

    def on_idle(self, engine: Engine) -> None:
        m = self.srv.metrics
        if m is None:
            return
        self._stats_common(engine)
        m.stats["num_running_reqs"] = len(engine.running)
        m.stats["token_usage"] = round(engine.token_usage, 2)
        m.stats["gen_throughput"] = 0.0
        m.log_stats(_by_priority(engine.running, engine.waiting))

    def before_step(self, engine: Engine) -> None:
        fault = self.srv.faults.active("oom", time.monotonic())
        if fault is not None and engine.token_usage >= fault.num("usage"):
            self.srv.crash("oom")


def _by_priority(running: Iterable[Request], waiting: Iterable[Request]) -> dict[str, dict[str, int]]:
    """Per-priority counts as SGLang's ``QueueCount.from_reqs`` (``str(None)`` for no priority)."""
    return {
        "num_running_reqs": dict(Counter(str(r.priority) for r in running)),
        "num_queue_reqs": dict(Counter(str(r.priority) for r in waiting)),
    }
