"""What the simulator's parts share: the server's state they read and the few things they may ask of it.

The collaborators (API routes, control API, engine observer, profiler, crasher, multi-node
rank 0) are built by :class:`~sglang_sentinel_sim.server.SimServer` and handed this view of it,
not the class itself: each depends on this module and the leaf modules it names (config,
engine, metrics, faults, log), never on server.py, so server.py can import them all without an
import circle. ``SimServer`` satisfies the protocol structurally (mypy checks it where the
server hands itself over).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from sglang_sentinel_sim.config import SimConfig
    from sglang_sentinel_sim.crash import CrashKind
    from sglang_sentinel_sim.engine import Engine
    from sglang_sentinel_sim.faults import Fault, FaultSet
    from sglang_sentinel_sim.looplag import LoopLag
    from sglang_sentinel_sim.metrics import SimMetrics
    from sglang_sentinel_sim.profiles import Profile
    from sglang_sentinel_sim.sglang_log import SGLangLog
    from sglang_sentinel_sim.truth import GroundTruth

__all__ = ["SimContext"]


class SimContext(Protocol):
    # What the server was started with (fixed for its life).
    config: SimConfig
    profile: Profile
    version: str  # the SGLang release it behaves as
    speed: float  # server seconds per real second
    # The parts every collaborator writes to or reads.
    log: SGLangLog
    metrics: SimMetrics | None  # None: --enable-metrics off
    truth: GroundTruth
    faults: FaultSet
    engine: Engine
    loop_lag: LoopLag
    # The server's life, as /server_info, /health and the control API show it.
    status: str  # "starting" | "warming" | "up" | "dead"
    draining: bool
    launched_at: float  # epoch seconds
    ready_at: float | None
    startup_seconds: float
    load_weights_seconds: float
    last_accept_length: float
    exit_reason: str | None
    exit_code: int
    on_fatal: Callable[[], None] | None

    @property
    def stopped(self) -> bool: ...

    def server_seconds(self, seconds: float) -> float: ...

    def spawn(self, coro: Any, name: str) -> asyncio.Task[Any]: ...

    async def stop(self, reason: str = "stopped") -> None: ...

    def crash(self, kind: CrashKind, detail: str = "") -> None: ...

    def info(self) -> dict[str, Any]: ...

    def server_args(self) -> dict[str, Any]: ...

    def hisparse_pools(self) -> tuple[int, float, int, float]: ...

    def arm_fault(self, fault: Fault) -> Fault: ...

    def clear_fault(self, name: str | None = None) -> list[str]: ...
