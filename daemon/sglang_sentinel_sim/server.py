"""One simulated SGLang server: lifecycle, start-up phases, faults, and the engine's observers.

How an armed fault plays out and how the server dies: ``crashing.py``.

Lifecycle as a real server (0.5.9 and 0.5.23 alike; each version's texts: ``versions.py``),
compressed by ``--speed``:

1. ``starting``: the API port is bound but not listening (connections are refused) while the
   start-up milestones are logged and "weights load";
2. ``warming``: the port listens, ``/model_info`` answers, ``/health`` is 503 while the warm-up
   request ("The capital city of France is", 8 tokens) runs through the engine;
3. ``up``: ``The server is fired up and ready to roll!``; start-up faults are armed now;
4. ``unhealthy`` after a failed health check (back to ``up`` on the next success);
5. ``draining`` after SIGTERM, ``dead`` after a crash or stop.

The control API listens on 127.0.0.1 from the first moment, so tests can watch a slow start.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import io
import json
import os
import socket
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any, Final, TextIO

from aiohttp import web

from sglang_sentinel_sim.api import build_api_app
from sglang_sentinel_sim.bootstrap import BootstrapServer
from sglang_sentinel_sim.config import SimConfig
from sglang_sentinel_sim.control import build_control_app
from sglang_sentinel_sim.crash import CrashKind
from sglang_sentinel_sim.crashing import Crasher
from sglang_sentinel_sim.engine import Engine, Request
from sglang_sentinel_sim.faults import Fault, FaultSet, check_fault_version, parse_fault_spec
from sglang_sentinel_sim.launchflags import deprecation_warnings, has_option
from sglang_sentinel_sim.launchmodel import server_args_fields
from sglang_sentinel_sim.listen import bind_api, bound_port, http_url
from sglang_sentinel_sim.looplag import LoopLag
from sglang_sentinel_sim.metrics import SimMetrics
from sglang_sentinel_sim.multinode import Rank0
from sglang_sentinel_sim.observer import EngineObserver
from sglang_sentinel_sim.profiles import Profile
from sglang_sentinel_sim.sglang_log import SGLangLog
from sglang_sentinel_sim.text import make_script
from sglang_sentinel_sim.truth import GroundTruth
from sglang_sentinel_sim.versions import DEFAULT_VERSION

__all__ = ["SGLANG_VERSION", "SimServer", "serve"]

# The version of the in-process default (the CLI's --sglang-version picks per server: SimServer.version).
SGLANG_VERSION: Final = DEFAULT_VERSION
WARMUP_PROMPT: Final = "The capital city of France is"


def _constants(p: Profile) -> dict[str, float]:
    """0.5.23 ``emit_constants`` values (srt/observability/metrics_collector.py)."""
    return {
        "max_total_num_tokens": p.max_total_num_tokens,
        "weight_memory_usage_gb": p.weight_mem_gb,
        "kv_cache_memory_usage_gb": p.kv_mem_gb,
        "page_size": p.page_size,
        "num_pages": p.max_total_num_tokens // max(p.page_size, 1),
        "context_len": p.context_length,
        "startup_available_gpu_memory_gb": p.gpu_mem_gb,
    }


class SimServer:
    def __init__(
        self,
        config: SimConfig,
        *,
        err: TextIO | None = None,
        out: TextIO | None = None,
        on_fatal: Callable[[], None] | None = None,
    ) -> None:
        config.validate()
        self.config = config
        self.profile = config.resolved_profile()
        self.version = config.sglang_version
        self.speed = config.speed
        self.log = SGLangLog(
            err, out, tp_size=self.profile.tp_size, log_ms=config.log_ms, access_log=config.access_log
        )
        self.metrics: SimMetrics | None = (
            SimMetrics(
                model_name=self.profile.served_model_name,
                tp_size=self.profile.tp_size,
                page_size=self.profile.page_size,
                max_total_num_tokens=self.profile.max_total_num_tokens,
                version=config.sglang_version,
                priority_scheduling=config.enable_priority_scheduling,
                all_schedulers=config.enable_metrics_for_all_schedulers,
                constants=_constants(self.profile),
            )
            if config.enable_metrics
            else None
        )
        self.truth = GroundTruth(time.time() - time.monotonic())
        self.faults = FaultSet()
        self._startup_faults: list[Fault] = [parse_fault_spec(spec) for spec in config.faults]
        self.observer = EngineObserver(self)  # the scheduler's side: logs, metrics, profiler
        self.engine = Engine(self.profile, speed=config.speed, hooks=self.observer, seed=config.seed)
        self.loop_lag = LoopLag()
        self.status = "starting"
        self.draining = False
        self.on_fatal = on_fatal
        self.exit_reason: str | None = None
        # Process exit status for `sentinel sim` when it stops by itself (not by a signal).
        self.exit_code = 0
        self.launched_at = time.time()
        self.ready_at: float | None = None
        self.startup_seconds = 0.0
        self.load_weights_seconds = 0.0
        self.last_accept_length = 0.0
        self.port = 0
        self.control_port = 0
        self.host = config.host
        self._api_sock: socket.socket | None = None
        self._api_runner: web.AppRunner | None = None
        self._control_runner: web.AppRunner | None = None
        self._bootstrap: BootstrapServer | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self._stopped: asyncio.Event | None = None
        self._ready: asyncio.Event | None = None
        self._crasher = Crasher(self)
        self._rank0: Rank0 | None = Rank0(self) if config.nnodes > 1 else None

    # ---- public ------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return http_url(self.host, self.port)

    @property
    def control_url(self) -> str:
        return http_url("127.0.0.1", self.control_port)

    def server_seconds(self, seconds: float) -> float:
        """Real seconds that ``seconds`` of server time take at this speed."""
        return seconds / self.speed

    async def start(self) -> None:
        """Bind both ports, start the control API and the engine; start-up continues in the
        background (``wait_ready``)."""
        self._stopped = asyncio.Event()
        self._ready = asyncio.Event()
        try:
            self._api_sock = bind_api(self.host, self.config.port)
            self.port = self._api_sock.getsockname()[1]
        except OSError as exc:
            if self.config.port == 0 or exc.errno != errno.EADDRINUSE:
                # Named (as the control API's below): "cannot bind" alone sent a reader to the wrong port.
                raise OSError(exc.errno, f"API {self.host}:{self.config.port}: {exc.strerror}") from None
            # A real server binds its HTTP port only after loading weights, so a port still held
            # by a dying predecessor is retried then (and fails then, as uvicorn does).
            self._api_sock = None
            self.port = self.config.port
        control = web.AppRunner(
            build_control_app(self), handle_signals=False, access_log=None, shutdown_timeout=0.1
        )
        await control.setup()
        site = web.TCPSite(control, "127.0.0.1", self.config.control_port)
        try:
            await site.start()
        except OSError as exc:
            where = f"127.0.0.1:{self.config.control_port}"
            raise OSError(exc.errno, f"control API {where}: {exc.strerror}") from None
        self._control_runner = control
        self.control_port = bound_port(site)
        self._api_runner = web.AppRunner(
            build_api_app(self, self.observer.profiler),
            handle_signals=False,
            access_log=None,
            keepalive_timeout=5.0,
            shutdown_timeout=0.1,
        )
        await self._api_runner.setup()
        if self._rank0 is not None:
            await self._rank0.start()  # peers may connect while weights load
        await self._start_bootstrap()
        self.engine.start()
        self._write_ready_file()
        # Not an SGLang line (log parsers ignore it): where the simulator's own API is.
        self.log.main(
            f"sentinel sim: control API on {self.control_url} (loopback only); profile {self.profile.name}, "
            f"speed {self.speed:g}, API port {self.port}"
        )
        self.spawn(self._startup(), "startup")
        self.spawn(self.loop_lag.run(), "loop-lag")
        if self.config.lifetime is not None:
            self.spawn(self._lifetime(self.config.lifetime), "lifetime")

    async def _start_bootstrap(self) -> None:
        # A prefill server's bootstrap server (sglang_sentinel_sim.disagg) listens from launch on.
        c = self.config
        if c.disaggregation_mode != "prefill":
            return
        p = self.profile
        self._bootstrap = BootstrapServer(
            self.host,
            c.disaggregation_bootstrap_port,
            http_port=self.port,
            page_size=p.page_size,
            kv_cache_dtype=p.kv_cache_dtype,
        )
        await self._bootstrap.start()

    async def wait_ready(self) -> None:
        if self._ready is None:
            raise RuntimeError("start() first")
        await self._ready.wait()

    async def wait_stopped(self) -> None:
        if self._stopped is None:
            raise RuntimeError("start() first")
        await self._stopped.wait()

    @property
    def stopped(self) -> bool:
        return self._stopped is not None and self._stopped.is_set()

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]:
        task = asyncio.create_task(coro, name=f"sim-{name}")
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
        return task

    def info(self) -> dict[str, Any]:
        return {
            "pid": os.getpid(),
            "host": self.host,
            "port": self.port,
            "base_url": self.base_url,
            "control_port": self.control_port,
            "control_url": self.control_url,
            "profile": self.profile.name,
            "speed": self.speed,
            "capacity_scale": self.config.capacity_scale,
            "model": self.profile.served_model_name,
            "sglang_version": self.version,
        }

    async def stop(self, reason: str = "stopped") -> None:
        """Stop now: abort in-flight requests, close both ports."""
        if self.exit_reason is None:
            self.exit_reason = reason
        self.status = "dead"
        current = asyncio.current_task()
        for task in list(self._tasks):
            if task is not current:
                task.cancel()
        await self.engine.stop()
        if self._rank0 is not None:
            await self._rank0.close()
        if self._bootstrap is not None:
            with contextlib.suppress(Exception):
                await self._bootstrap.stop()
            self._bootstrap = None
        for runner in (self._api_runner, self._control_runner):
            if runner is not None:
                with contextlib.suppress(Exception):
                    await runner.cleanup()
        self._api_runner = self._control_runner = None
        if self._api_sock is not None:
            self._api_sock.close()
            self._api_sock = None
        if self._stopped is not None:
            self._stopped.set()

    async def drain(self) -> None:
        """SIGTERM as v0.5.9 handles it: /health 503, wait with no time limit for in-flight
        requests (new ones are still accepted), logging the remainder every 5 server seconds."""
        if self.draining:
            return
        self.draining = True
        if self.status == "unhealthy":
            self.log.main("Signal SIGTERM received while health check failed. Force exiting.")
            return
        while self.engine.busy:
            reqs = [*self.engine.running, *self.engine.waiting]
            self.log.main(
                f"Gracefully exiting... Remaining number of requests {len(reqs)}. "
                f"Remaining requests remaining_rids={[r.rid for r in reqs]}."
            )
            await asyncio.sleep(self.server_seconds(5.0))

    # ---- faults ------------------------------------------------------------------------------
    def arm_fault(self, fault: Fault) -> Fault:
        delay = self.server_seconds(fault.num("after")) if "after" in fault.params else 0.0
        self.faults.arm(fault, now=time.monotonic(), delay_s=delay)
        check_fault_version(fault, self.version)
        if fault.name in ("crash", "hang", "stall", "nan_sanitized"):
            self.spawn(self._crasher.fault_timer(fault, delay), f"fault-{fault.name}")
        return fault

    def clear_fault(self, name: str | None = None) -> list[str]:
        cleared = self.faults.clear(name)
        if {"hang", "stall"} & set(cleared):
            self.engine.thaw()
        return cleared

    def hisparse_pools(self) -> tuple[int, float, int, float]:
        """``--enable-hisparse``: (gpu tokens, gpu usage, cpu tokens, cpu usage) of the Decode line.

        Model: the request KV lives in the host pool (the simulated pool: ``#cpu token`` = used KV
        tokens); the device holds a quarter-size hot subset (hisparse_coordinator.py
        ``get_token_stats`` reports both pools the same way).
        """
        e = self.engine
        device_capacity = max(1, e.capacity // 4)
        device = min(device_capacity, e.kv_used)
        return device, device / device_capacity, e.kv_used, e.token_usage

    def crash(self, kind: CrashKind, detail: str = "") -> None:
        """Die as SGLang dies: scheduler exception record + traceback, SIGQUIT line, SIGKILL
        (``crashing.py``; once: a second crash is ignored)."""
        self._crasher.crash(kind, detail)

    # ---- start-up ----------------------------------------------------------------------------
    def _write_ready_file(self) -> None:
        path = self.config.ready_file
        if not path:
            return
        target = Path(path)
        tmp = target.with_name(target.name + ".tmp")
        tmp.write_text(json.dumps(self.info()) + "\n", encoding="utf-8")
        tmp.replace(target)

    def server_args(self) -> dict[str, Any]:
        p = self.profile
        c = self.config
        hisparse_flag = has_option(self.version, "--enable-hisparse")
        return {
            "model_path": p.model_path,
            "tokenizer_path": p.model_path,
            "tokenizer_mode": "auto",
            "skip_tokenizer_init": False,
            "load_format": "auto",
            "trust_remote_code": True,
            "context_length": p.context_length,
            "is_embedding": False,
            "served_model_name": p.served_model_name,
            "weight_version": "default",
            "host": self.host,
            "port": self.port,
            "quantization": "modelopt_fp4" if "NVFP4" in p.model_path else None,
            "kv_cache_dtype": p.kv_cache_dtype,
            "mem_fraction_static": p.mem_fraction_static,
            "max_running_requests": p.max_running_requests,
            "max_queued_requests": None,
            "max_total_tokens": c.max_total_tokens,
            "chunked_prefill_size": p.chunked_prefill_size,
            "max_prefill_tokens": p.max_prefill_tokens,
            "schedule_policy": "fcfs",
            "page_size": p.page_size,
            "tp_size": p.tp_size,
            "dp_size": 1,
            "pp_size": 1,
            "stream_interval": c.stream_interval,
            "stream_output": False,
            "random_seed": c.seed,
            "watchdog_timeout": 300,
            "log_level": "info",
            "log_requests": False,
            "api_key": c.api_key,
            "admin_api_key": None,
            "enable_metrics": c.enable_metrics,
            "decode_log_interval": c.decode_log_interval,
            "reasoning_parser": p.reasoning_parser,
            "tool_call_parser": "glm47" if p.reasoning_parser == "glm45" else None,
            "attention_backend": p.attention_backend,
            "disable_cuda_graph": not p.cuda_graph,
            **server_args_fields(p, self.version),
            "speculative_algorithm": "EAGLE" if p.mtp_accept_length > 1.0 else None,
            "speculative_num_draft_tokens": p.mtp_draft_tokens + 1 if p.mtp_accept_length > 1.0 else None,
            "enable_cache_report": c.enable_cache_report,
            "skip_server_warmup": c.skip_server_warmup,
            "enable_priority_scheduling": c.enable_priority_scheduling,
            "enable_metrics_for_all_schedulers": c.enable_metrics_for_all_schedulers,
            # A field of the releases that have the flag (options.json: from 0.5.10).
            **({"enable_hisparse": c.enable_hisparse} if hisparse_flag else {}),
            "disaggregation_mode": c.disaggregation_mode,
            "disaggregation_transfer_backend": c.disaggregation_transfer_backend,
            "disaggregation_bootstrap_port": c.disaggregation_bootstrap_port,
        }

    async def _sleep_server(self, seconds: float) -> None:
        if seconds > 0:
            await asyncio.sleep(self.server_seconds(seconds))

    async def _startup(self) -> None:
        p = self.profile
        log = self.log
        slow = next((f for f in self._startup_faults if f.name == "slow_start"), None)
        crash_at_start = next(
            (f for f in self._startup_faults if f.name == "crash" and f.text("phase") == "startup"), None
        )
        t0 = time.monotonic()
        for warning in deprecation_warnings(self.config.launch, self.version):
            log.main(warning)
        args = ", ".join(f"{k}={v!r}" for k, v in self.server_args().items())
        log.main(f"server_args=ServerArgs({args})")
        log.all_ranks("Init torch distributed begin.")
        if self._rank0 is not None and not await self._rank0.wait_peers():
            return
        await self._sleep_server(min(0.2, p.load_weights_s * 0.05))
        avail = p.gpu_mem_gb - 0.6
        log.all_ranks(f"Init torch distributed ends. elapsed={0.2:.2f} s, mem usage=0.55 GB")
        log.all_ranks(f"Load weight begin. avail mem={avail:.2f} GB")
        load = p.load_weights_s + (slow.num("refuse") if slow else 0.0)
        if crash_at_start is not None:
            await self._sleep_server(load / 2)
            self.crash("died_init" if crash_at_start.text("text") == "died_init" else "startup")
            return
        await self._sleep_server(load)
        self.load_weights_seconds = load
        after_weights = avail - p.weight_mem_gb
        log.all_ranks(
            f"Load weight end. elapsed={load:.2f} s, type={p.architecture}, dtype=torch.bfloat16, "
            f"avail mem={after_weights:.2f} GB, mem usage={p.weight_mem_gb:.2f} GB."
        )
        await self._sleep_server(p.kv_alloc_s)
        failure, _, detail = p.startup_failure.partition(":")
        if failure == "kv_pool":
            self.crash("kv_pool", f"{p.mem_fraction_static:g}")
            return
        log.all_ranks(
            f"KV Cache is allocated. #tokens: {p.max_total_num_tokens}, KV size: {p.kv_mem_gb:.2f} GB"
        )
        log.all_ranks(f"Memory pool end. avail mem={after_weights - p.kv_mem_gb:.2f} GB")
        if failure == "unsupported":
            self.crash("unsupported", detail)
            return
        if failure == "refused":
            self.crash("refused", detail)
            return
        capture = p.graph_capture_s > 0 or failure == "graph_oom"
        if capture and not await self._capture_graphs(after_weights - p.kv_mem_gb, failure == "graph_oom"):
            return
        log.scheduler(
            f"max_total_num_tokens={p.max_total_num_tokens}, chunked_prefill_size={p.chunked_prefill_size}, "
            f"max_prefill_tokens={p.max_prefill_tokens}, max_running_requests={p.max_running_requests}, "
            f"context_len={p.context_length}, available_gpu_mem={after_weights - p.kv_mem_gb:.2f} GB"
        )
        if self._api_sock is None and not await self._late_bind():
            return
        if self._api_runner is None or self._api_sock is None:
            return  # stopped during start-up
        site = web.SockSite(self._api_runner, self._api_sock)
        await site.start()
        pid = os.getpid()
        log.main(f"INFO:     Started server process [{pid}]")
        log.main("INFO:     Waiting for application startup.")
        log.main("INFO:     Application startup complete.")
        log.main(f"INFO:     Uvicorn running on {self.base_url} (Press CTRL+C to quit)")
        self.status = "warming"
        await self._sleep_server(p.warmup_s + (slow.num("warmup") if slow else 0.0))
        if failure == "oom":
            # No room for the activations of a forward: the warm-up's (SGLang's) OOM kills it.
            self.crash("oom")
            return
        if not self.config.skip_server_warmup:
            await self._warmup()
        self.startup_seconds = (time.monotonic() - t0) * self.speed
        self.status = "up"
        self.ready_at = time.time()
        log.main("The server is fired up and ready to roll!")
        if self.metrics is not None:
            self.metrics.stats["engine_startup_time"] = self.startup_seconds
            self.metrics.stats["engine_load_weights_time"] = self.load_weights_seconds
        for fault in self._startup_faults:
            if fault.name == "slow_start" or (fault.name == "crash" and fault.text("phase") == "startup"):
                continue
            self.arm_fault(fault)
        if self._ready is not None:
            self._ready.set()

    async def _capture_graphs(self, avail_gb: float, fails: bool) -> bool:
        """SGLang's capture phase (model_runner.py init_device_graphs); False: it failed."""
        p = self.profile
        self.log.all_ranks(
            f"Capture cuda graph begin. This can take up to several minutes. avail mem={avail_gb:.2f} GB"
        )
        await self._sleep_server(p.graph_capture_s / (2 if fails else 1))
        if fails:
            self.crash("graph_oom")
            return False
        used = 2 * p.cuda_graph_max_bs / 1024
        self.log.all_ranks(
            f"Capture cuda graph end. Time elapsed: {p.graph_capture_s:.2f} s. mem usage={used:.2f} GB. "
            f"avail mem={avail_gb - used:.2f} GB."
        )
        return True

    async def _late_bind(self) -> bool:
        """Bind the API port at "uvicorn start"; on failure log uvicorn's error and exit 1."""
        deadline = time.monotonic() + 1.0
        while True:
            try:
                self._api_sock = bind_api(self.host, self.port)
                return True
            except OSError as exc:
                if time.monotonic() >= deadline:
                    self.log.main(
                        f"ERROR:    [Errno {exc.errno}] error while attempting to bind on address "
                        f"('{self.host}', {self.port}): {(exc.strerror or str(exc)).lower()}"
                    )
                    self.exit_code = 1
                    self.spawn(self.stop("port_in_use"), "die")
                    return False
            await asyncio.sleep(0.05)

    async def _warmup(self) -> None:
        script = make_script(WARMUP_PROMPT, thinking=False, thinking_tokens=0)
        # The real warm-up asks for 8 tokens at temperature 0 and GLM-5 keeps talking past
        # " Paris." -- a fresh server's metrics show 1 request / 8 generated tokens.
        # Disaggregated: SGLang's warm-up carries a fake bootstrap room; a prefill server makes one token.
        n = 1 if self.config.disaggregation_mode == "prefill" else 8
        req = Request("warmup", 7, n, script, prompt_key=WARMUP_PROMPT, min_new_tokens=n, log_metrics=True)
        req.pd_role = self.config.disaggregation_mode
        self.engine.submit(req)
        while not req.done:
            await req.wait_progress(req.generated, n)
        if self.metrics is not None:
            # A non-streamed request's only output arrives at finish: its TTFT is its latency.
            self.metrics.observe_ttft(req.finished_at - req.arrival, False)
        self.log.access(f"127.0.0.1:{40000 + os.getpid() % 20000}", "POST", "/generate", 200)

    async def _lifetime(self, seconds: float) -> None:
        await asyncio.sleep(seconds)
        self.log.main(f"Simulator lifetime of {seconds:g} s reached; shutting down.")
        await self.stop("lifetime")


class _Discard(io.StringIO):
    """A text sink that keeps nothing (the log of a long in-process run must not grow)."""

    def write(self, s: str) -> int:
        return len(s)


@contextlib.asynccontextmanager
async def serve(
    config: SimConfig | None = None,
    *,
    wait_ready: bool = True,
    ready_timeout: float = 60.0,
    err: TextIO | None = None,
    out: TextIO | None = None,
    **options: Any,
) -> AsyncIterator[SimServer]:
    """Run a simulator inside the current event loop (fast tests)::

        async with serve(port=0, speed=100, enable_metrics=True) as sim:
            httpx.get(sim.base_url + "/health")

    Crash faults stop this server (ports closed) instead of killing the process.
    """
    if config is None:
        config = SimConfig(**{"port": 0, **options})
    elif options:
        raise TypeError("pass either a SimConfig or keyword options, not both")
    # Without a stream the log lines are discarded (an in-process server must not spam pytest).
    err_stream: TextIO = err if err is not None else _Discard()
    server = SimServer(config, err=err_stream, out=out if out is not None else err_stream)
    try:
        await server.start()
        if wait_ready:
            await asyncio.wait_for(server.wait_ready(), ready_timeout)
        yield server
    finally:
        await server.stop()
