"""Keep the SGLang server up, and correct: launch, checks, crash classification, restarts.

Public API (what the daemon uses)::

    sup = Supervisor(settings.server, state_dir=settings.state_dir)
    registry.register(sup.collector())           # sentinel_server_* / sentinel_probe_* series
    sup.add_before_stop_hook(load.stop)          # runs before every deliberate stop/restart
    sup.subscribe_state(on_change)               # StateChange(old, new, reason, timestamp)
    sup.add_line_listener(lambda l: log.feed(l.text))  # every LogLine, synchronously (log collector)
    await sup.start()                            # returns at once; supervision runs in a task
    await sup.wait_for_state(ServerState.READY, timeout=...)
    snap = sup.snapshot()                        # frozen: state, epoch, config_hash, probes, ...
    sup.restart("manual"); sup.reset()           # operator actions
    await sup.stop()                             # hooks, SIGTERM, drain, SIGKILL the group
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_sentinel.lazy import lazy_exports

if TYPE_CHECKING:
    from sglang_sentinel.supervise.classify import CRASH_REASONS, RESTART_REASONS, Crash
    from sglang_sentinel.supervise.launch import BUILTIN_PROFILES, LaunchCommand, ProfileError, render_command
    from sglang_sentinel.supervise.logbus import LogLine
    from sglang_sentinel.supervise.metrics import SupervisorCollector
    from sglang_sentinel.supervise.preflight import GpuInfo, PreflightResult
    from sglang_sentinel.supervise.probes import ProbeResult
    from sglang_sentinel.supervise.snapshot import SupervisorSnapshot
    from sglang_sentinel.supervise.state import ServerState, StateChange
    from sglang_sentinel.supervise.supervisor import BeforeStopHook, Supervisor

__all__ = [
    "BUILTIN_PROFILES",
    "CRASH_REASONS",
    "RESTART_REASONS",
    "BeforeStopHook",
    "Crash",
    "GpuInfo",
    "LaunchCommand",
    "LogLine",
    "PreflightResult",
    "ProbeResult",
    "ProfileError",
    "ServerState",
    "StateChange",
    "Supervisor",
    "SupervisorCollector",
    "SupervisorSnapshot",
    "render_command",
]

# Imported on first use: sglang_sentinel.config imports this package for its settings model, and
# every CLI command loads the config; httpx, the log parser and the runners are not needed for that.
__getattr__ = lazy_exports(
    __name__,
    {
        "CRASH_REASONS": "sglang_sentinel.supervise.classify",
        "RESTART_REASONS": "sglang_sentinel.supervise.classify",
        "Crash": "sglang_sentinel.supervise.classify",
        "LogLine": "sglang_sentinel.supervise.logbus",
        "SupervisorCollector": "sglang_sentinel.supervise.metrics",
        "GpuInfo": "sglang_sentinel.supervise.preflight",
        "PreflightResult": "sglang_sentinel.supervise.preflight",
        "ProbeResult": "sglang_sentinel.supervise.probes",
        "BUILTIN_PROFILES": "sglang_sentinel.supervise.launch",
        "LaunchCommand": "sglang_sentinel.supervise.launch",
        "ProfileError": "sglang_sentinel.supervise.launch",
        "render_command": "sglang_sentinel.supervise.launch",
        "ServerState": "sglang_sentinel.supervise.state",
        "StateChange": "sglang_sentinel.supervise.state",
        "BeforeStopHook": "sglang_sentinel.supervise.supervisor",
        "Supervisor": "sglang_sentinel.supervise.supervisor",
        "SupervisorSnapshot": "sglang_sentinel.supervise.snapshot",
    },
)
