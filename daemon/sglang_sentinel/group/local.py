"""This node's member of the group: its supervisor's launch gate, and stop/start by epoch.

The supervisor awaits :meth:`LocalMember.gate` before every launch: it passes once per granted
epoch, so a server that died is not relaunched on its own — the group restarts as a whole, when
rank 0 says so. ``stop``/``start`` are idempotent per epoch (a retried call changes nothing).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence

from sglang_sentinel.group.state import ALIVE_STATES, MemberView
from sglang_sentinel.log import get_logger
from sglang_sentinel.supervise.preflight import GpuInfo
from sglang_sentinel.supervise.supervisor import Supervisor

__all__ = ["GpuMemoryReader", "LocalMember"]

_log = get_logger(__name__)

# Returns the GPUs now (NVML), or raises where there is no NVML.
GpuMemoryReader = Callable[[], Sequence[GpuInfo]]


class LocalMember:
    def __init__(self, supervisor: Supervisor, rank: int, gpu_reader: GpuMemoryReader | None) -> None:
        self.supervisor = supervisor
        self.rank = rank
        self._gpu_reader = gpu_reader
        self.granted_epoch = 0
        self.stopped_epoch = 0
        self.launched_epoch = 0
        self._changed = asyncio.Event()
        self._nvml_failed = False

    def _may_launch(self) -> bool:
        g = self.granted_epoch
        return g > self.launched_epoch and g >= self.stopped_epoch

    async def gate(self) -> None:
        """The supervisor's launch gate: one launch per granted epoch."""
        if not self._may_launch():
            _log.info("group_waiting_for_start", rank=self.rank, launched_epoch=self.launched_epoch)
        while not self._may_launch():
            self._changed.clear()
            await self._changed.wait()
        self.launched_epoch = self.granted_epoch

    def start(self, epoch: int) -> bool:
        """Grant ``epoch``; False (and nothing changes) when it is not newer than the last one."""
        if epoch <= self.granted_epoch or epoch < self.stopped_epoch:
            return False
        self.granted_epoch = epoch
        _log.info("group_start_accepted", rank=self.rank, epoch=epoch)
        self._changed.set()
        return True

    def stop(self, epoch: int) -> bool:
        """Stop the server for ``epoch`` (deliberately, as a "group" restart); False if seen already."""
        if epoch <= self.stopped_epoch:
            return False
        self.stopped_epoch = epoch
        state = self.supervisor.state.value
        _log.info("group_stop_accepted", rank=self.rank, epoch=epoch, server_state=state)
        if state in ALIVE_STATES:
            self.supervisor.restart("group")
        self._changed.set()
        return True

    def _gpu_used(self) -> int | None:
        if self._gpu_reader is None or self._nvml_failed:
            return None
        try:
            gpus = self._gpu_reader()
        except Exception as exc:
            # No NVML (a CPU box, a container without the driver): the process exit is the signal.
            self._nvml_failed = True
            _log.info("group_gpu_memory_unavailable", error=str(exc))
            return None
        if not gpus:
            return None
        return max(g.memory_total_bytes - g.memory_free_bytes for g in gpus)

    async def view(self) -> MemberView:
        used = await asyncio.to_thread(self._gpu_used) if self._gpu_reader is not None else None
        return MemberView(
            rank=self.rank,
            state=self.supervisor.state.value,
            pid=self.supervisor.server_pid,
            gpu_memory_used_bytes=used,
            granted_epoch=self.granted_epoch,
            stopped_epoch=self.stopped_epoch,
        )
