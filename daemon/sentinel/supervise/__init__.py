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

from sentinel.lazy import lazy_exports

if TYPE_CHECKING:
    from sentinel.supervise.classify import CRASH_REASONS, RESTART_REASONS, Crash
    from sentinel.supervise.launch import BUILTIN_PROFILES, LaunchCommand, ProfileError, render_command
    from sentinel.supervise.logbus import LogLine
    from sentinel.supervise.metrics import SupervisorCollector
    from sentinel.supervise.preflight import GpuInfo, PreflightResult
    from sentinel.supervise.probes import ProbeResult
    from sentinel.supervise.snapshot import SupervisorSnapshot
    from sentinel.supervise.state import ServerState, StateChange
    from sentinel.supervise.supervisor import BeforeStopHook, Supervisor

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

# Imported on first use: sentinel.config imports this package for its settings model, and
# every CLI command loads the config; httpx, the log parser and the runners are not needed for that.
__getattr__ = lazy_exports(
    __name__,
    {
        "CRASH_REASONS": "sentinel.supervise.classify",
        "RESTART_REASONS": "sentinel.supervise.classify",
        "Crash": "sentinel.supervise.classify",
        "LogLine": "sentinel.supervise.logbus",
        "SupervisorCollector": "sentinel.supervise.metrics",
        "GpuInfo": "sentinel.supervise.preflight",
        "PreflightResult": "sentinel.supervise.preflight",
        "ProbeResult": "sentinel.supervise.probes",
        "BUILTIN_PROFILES": "sentinel.supervise.launch",
        "LaunchCommand": "sentinel.supervise.launch",
        "ProfileError": "sentinel.supervise.launch",
        "render_command": "sentinel.supervise.launch",
        "ServerState": "sentinel.supervise.state",
        "StateChange": "sentinel.supervise.state",
        "BeforeStopHook": "sentinel.supervise.supervisor",
        "Supervisor": "sentinel.supervise.supervisor",
        "SupervisorSnapshot": "sentinel.supervise.snapshot",
    },
)
