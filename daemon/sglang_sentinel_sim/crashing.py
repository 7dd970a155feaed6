"""How a running simulated server acts out its armed faults and dies (the texts it leaves: ``crash.py``).

Kept apart from the server's lifecycle (``server.py``): the fault timers (crash, nan_sanitized,
stall, hang with its scheduler watchdog) and the crash sequence they, the engine's OOM and a
failed start-up end in. It writes to the server's log and sets its exit status; the lifecycle
(``stop``, ``on_fatal``) stays the server's.
"""

from __future__ import annotations

import asyncio
import os
import time
from typing import TYPE_CHECKING, Final

from sglang_sentinel_sim.crash import (
    NAN_SANITIZED,
    CrashKind,
    crash_lines,
    died_init_lines,
    nan_assert_lines,
    subprocess_crash_line,
    tokenizer_lines,
)
from sglang_sentinel_sim.faults import Fault

if TYPE_CHECKING:
    from sglang_sentinel_sim.context import SimContext

__all__ = ["Crasher"]

# crash:text=... while serving -> the crash kind.
_SERVING_CRASH: Final[dict[str, CrashKind]] = {
    "sampler": "exception",
    "tokenizer": "tokenizer",
    "nan": "nan",
    "subprocess": "subprocess",
    "died_init": "died_init",
}


class Crasher:
    """One server's fault timers and its (single) death as SGLang dies."""

    def __init__(self, srv: SimContext) -> None:
        self.srv = srv
        self._dead = False
        self._nan_warned = False

    async def fault_timer(self, fault: Fault, delay: float) -> None:
        srv = self.srv
        if delay > 0:
            await asyncio.sleep(delay)
        if srv.faults.get(fault.name) is not fault:
            return  # cleared meanwhile
        if fault.name == "crash":
            self.crash(_SERVING_CRASH[fault.text("text")])
        elif fault.name == "nan_sanitized":
            if not self._nan_warned:  # "Logged once; further occurrences are silent."
                self._nan_warned = True
                srv.log.scheduler(NAN_SANITIZED)
        elif fault.name == "stall":
            srv.engine.freeze(fault.num("duration"))
            await asyncio.sleep(srv.server_seconds(fault.num("duration")))
            if srv.faults.get("stall") is fault:
                srv.faults.clear("stall")
        elif fault.name == "hang":
            srv.engine.freeze(None)
            watchdog = fault.num("watchdog")
            if watchdog <= 0:
                return
            # SGLang's watchdog only counts while a batch is in flight (a health probe is one),
            # and samples every timeout/2.
            stuck_since: float | None = None
            while srv.faults.get("hang") is fault and srv.engine.frozen_since is not None:
                now = time.monotonic()
                if not srv.engine.busy:
                    stuck_since = None
                elif stuck_since is None:
                    stuck_since = now
                elif now - stuck_since >= srv.server_seconds(watchdog):
                    self._watchdog_crash(watchdog)
                    return
                await asyncio.sleep(srv.server_seconds(watchdog) / 2)

    def _watchdog_crash(self, timeout: float) -> None:
        srv = self.srv
        reqs = [*srv.engine.running, *srv.engine.waiting]
        srv.log.scheduler(
            f"self.cur_batch.batch_size()={len(reqs)}, self.cur_batch.reqs={[r.rid for r in reqs][:8]}"
        )
        srv.log.scheduler(f"Scheduler watchdog timeout (self.watchdog_timeout={timeout:g}, self.soft=False)")
        self.crash("watchdog")

    def crash(self, kind: CrashKind, detail: str = "") -> None:
        """Die as SGLang dies: scheduler exception record + traceback, SIGQUIT line, SIGKILL."""
        srv = self.srv
        if self._dead:
            return
        self._dead = True
        srv.engine.freeze(None)
        if kind in ("tokenizer", "nan", "died_init", "subprocess"):
            self._crash_texts(kind)
            return
        if kind != "watchdog":
            used = srv.profile.gpu_mem_gb - 1.2
            head, body = crash_lines(
                kind, used_gb=used, total_gb=srv.profile.gpu_mem_gb, detail=detail, version=srv.version
            )
            srv.log.scheduler(head)
            if body:
                srv.log.raw(body)
        if srv.ready_at is None:
            srv.log.main("Received sigquit from a child process. It usually means the child failed.")
        else:
            srv.log.main("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        srv.exit_reason = f"crash:{kind}"
        if srv.on_fatal is not None:
            srv.on_fatal()
        else:
            srv.spawn(srv.stop(f"crash:{kind}"), "die")

    def _crash_texts(self, kind: CrashKind) -> None:
        """The crash texts of ``crash:text=...`` (crash.py says where each comes from)."""
        srv = self.srv
        log = srv.log
        if kind == "tokenizer":
            head, body = tokenizer_lines()
            log.main(head)
            log.raw(body)
            # kill_process_tree(include_parent=True): SIGKILL, no SIGQUIT line.
        elif kind == "nan":
            asserts, head, body = nan_assert_lines(srv.version)
            if asserts:
                log.raw(asserts)
            log.scheduler(head)
            log.raw(body)
            log.main("SIGQUIT received. signum=None, frame=None. It usually means one child failed.")
        elif kind == "subprocess":
            rank = max(0, srv.profile.tp_size - 1)
            log.main(subprocess_crash_line(rank, os.getpid() + 1 + rank))
            log.main(
                "SIGQUIT received. signum=3, frame=<frame at 0x7f3a2c1b9a40, file '/usr/lib/python3.12/"
                "selectors.py', line 468, code select>. It usually means one child failed."
            )
        else:  # died_init: the main process's exception ends it with status 1, no SIGKILL.
            log.raw(died_init_lines(srv.version, rank=max(0, srv.profile.tp_size - 1)))
            srv.exit_reason = "crash:died_init"
            srv.exit_code = 1
            srv.spawn(srv.stop("crash:died_init"), "die")
            return
        srv.exit_reason = f"crash:{kind}"
        if srv.on_fatal is not None:
            srv.on_fatal()
        else:
            srv.spawn(srv.stop(f"crash:{kind}"), "die")
