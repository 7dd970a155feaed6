"""Multi-node SGLang groups: an agent per node, rank 0's agent restarts the group as a whole.

Public API (what the daemon uses)::

    member = member_of(settings.group)            # GroupMember for the supervisor, or None
    group = build_group(settings.group, supervisor)  # GroupCoordinator, or None for nnodes = 1
    routes = group.api.routes()                   # the peer API, on the exporter
    collectors.add("group", group.collector())
    await group.start(); group.snapshot(); await group.stop()

Modules: settings.py ``[group]``, state.py the views and the restart decisions (pure),
local.py this node's launch gate and stop/start, peerapi.py the authenticated peer API,
client.py rank 0's peer calls, coordinator.py the loop, metrics.py ``sentinel_group_*``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sglang_sentinel.group.coordinator import GroupCoordinator
    from sglang_sentinel.group.settings import GroupSettings
    from sglang_sentinel.supervise import Supervisor
    from sglang_sentinel.supervise.member import GroupMember

__all__ = ["build_group", "member_of"]


def member_of(settings: GroupSettings) -> GroupMember | None:
    from sglang_sentinel.supervise.member import GroupMember

    if not settings.enabled:
        return None
    return GroupMember(settings.nnodes, settings.node_rank, settings.dist_init_addr)


def build_group(settings: GroupSettings, supervisor: Supervisor) -> GroupCoordinator | None:
    """The coordinator for this node (NVML for the GPU memory release), or None outside a group."""
    if not settings.enabled:
        return None
    from sglang_sentinel.group.coordinator import GroupCoordinator
    from sglang_sentinel.supervise.preflight import read_gpus_nvml

    return GroupCoordinator(settings, supervisor, gpu_reader=read_gpus_nvml)
