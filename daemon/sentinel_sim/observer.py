"""The engine's observer: engine events as SGLang's TP0 scheduler logs and measures them.

Kept apart from the server's lifecycle (``server.py``): this is where the simulator's scheduler
log lines ("Prefill batch", "Decode batch", retractions) and scheduler metrics are written.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from sentinel_sim.engine import Engine, EngineHooks, Request, RequestState

if TYPE_CHECKING:
    from sentinel_sim.server import SimServer

__all__ = ["EngineObserver"]


class EngineObserver(EngineHooks):
    """Turns engine events into SGLang log lines and scheduler metrics, as the TP0 scheduler does."""

    def __init__(self, srv: SimServer) -> None:
        self.srv = srv
        now = time.monotonic()
        self.last_decode_log = now
        self.last_prefill_log = now
        self.last_prefill_tokens = 0
        self.tokens_since_log = 0
        self.last_gen_throughput = 0.0

    def _stats_common(self, engine: Engine) -> None:
        m = self.srv.metrics
        if m is None:
            return
        s = m.stats
        s["num_used_tokens"] = engine.kv_used
        s["token_usage"] = engine.token_usage
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
        now = time.monotonic()
        gap = now - self.last_prefill_log
        self.last_prefill_log = now
        # v0.5.9 quirk: the previous batch's tokens over the time since the previous line.
        throughput = self.last_prefill_tokens / gap if gap > 0 else 0.0
        self.last_prefill_tokens = new_tokens
        joined = sum(1 for r in finished_prefill if r.state == RequestState.RUNNING)
        running_bs = len(engine.running) - joined
        usage = engine.token_usage
        self.srv.log.scheduler(
            f"Prefill batch, #new-seq: {len(new_seqs)}, #new-token: {new_tokens}, "
            f"#cached-token: {cached_tokens}, token usage: {usage:.2f}, #running-req: {running_bs}, "
            f"#queue-req: {len(engine.waiting)}, input throughput (token/s): {throughput:.2f}, "
            "cuda graph: False"
        )
        m = self.srv.metrics
        if m is None:
            return
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
        m.log_stats()

    def on_decode_step(self, engine: Engine, batch_size: int, tokens: int, drafts: int) -> None:
        self.tokens_since_log += tokens
        m = self.srv.metrics
        cuda_graph = self.srv.profile.cuda_graph
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
            accept_rate = engine.spec_accepted / (forwards * (p.mtp_draft_tokens + 1)) if forwards else 0.0
            engine.spec_accepted = engine.spec_forwards = 0
            spec = f"accept len: {accept_len:.2f}, accept rate: {accept_rate:.2f}, "
            self.srv.last_accept_length = accept_len
        self.srv.log.scheduler(
            f"Decode batch, #running-req: {batch_size}, #token: {engine.kv_used}, "
            f"token usage: {engine.token_usage:.2f}, {spec}cuda graph: {cuda_graph}, "
            f"gen throughput (token/s): {self.last_gen_throughput:.2f}, #queue-req: {len(engine.waiting)}"
        )
        if m is not None:
            self._stats_common(engine)
            s = m.stats
            s["num_running_reqs"] = batch_size
            s["gen_throughput"] = self.last_gen_throughput
            s["decode_sum_seq_lens"] = engine.decode_sum_seq_lens()
            s["cache_hit_rate"] = 0.0  # v0.5.9 writes 0 on every decode log
            s["spec_accept_length"] = accept_len
            s["spec_accept_rate"] = accept_rate
            m.log_stats()

    def on_retract(
        self, engine: Engine, retracted: list[Request], old_ratio: float, new_ratio: float
    ) -> None:
        gained = sum(r.prompt_tokens + r.generated for r in retracted)
        self.srv.log.scheduler(
            f"KV cache pool is full. Retract requests. #retracted_reqs: {len(retracted)}, "
            f"#new_tokens_gained: {gained}, #new_token_ratio: {old_ratio:.4f} -> {new_ratio:.4f}"
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
            m.aborted()
        else:
            m.finished(
                req.prompt_tokens,
                req.generated,
                req.cached_tokens,
                req.finished_at - req.arrival,
                req.retractions,
            )

    def on_idle(self, engine: Engine) -> None:
        m = self.srv.metrics
        if m is None:
            return
        self._stats_common(engine)
        m.stats["num_running_reqs"] = len(engine.running)
        m.stats["token_usage"] = round(engine.token_usage, 2)
        m.stats["gen_throughput"] = 0.0
        m.log_stats()

    def before_step(self, engine: Engine) -> None:
        fault = self.srv.faults.active("oom", time.monotonic())
        if fault is not None and engine.token_usage >= fault.num("usage"):
            self.srv.crash("oom")
