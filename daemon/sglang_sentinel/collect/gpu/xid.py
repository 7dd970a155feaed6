"""The XID watcher: a thread blocked in NVML's event wait, counting critical errors by XID.

XIDs are events, not state: nothing can be read back later, so they must be caught as they
happen. The wait has a 1 s timeout (nvidia_gpu_exporter's choice) so the thread notices a stop
or a re-initialisation within a second; it ends on any lifecycle error, and the poller starts a
new one after the next successful initialisation.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable, Mapping

import pynvml

from sglang_sentinel.collect.gpu.errors import ErrorClass, classify, error_name
from sglang_sentinel.collect.gpu.reading import Nvml
from sglang_sentinel.log import get_logger

__all__ = ["XidWatcher"]

_log = get_logger(__name__)
_WAIT_MS = 1000


class XidWatcher:
    """Counts XID events of the given GPUs through ``on_xid(uuid, xid, timestamp)``."""

    def __init__(
        self,
        nvml: Nvml,
        handles: Mapping[str, object],
        on_xid: Callable[[str, int, float], None],
        on_lifecycle_error: Callable[[str], None],
    ) -> None:
        self._nvml = nvml
        self._handles = dict(handles)
        self._on_xid = on_xid
        self._on_lifecycle_error = on_lifecycle_error
        self._stop = threading.Event()
        self.registered: tuple[str, ...] = ()
        self._thread = threading.Thread(target=self._run, name="sentinel-gpu-xid", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self, timeout: float) -> None:
        self._stop.set()
        # The wait returns within _WAIT_MS; a driver wedged inside it is abandoned (daemon thread).
        self._thread.join(timeout)

    def _lifecycle(self, exc: BaseException) -> None:
        # After stop() the poller is shutting NVML down on purpose: the error that causes here
        # is expected and must not trigger another re-initialisation.
        if not self._stop.is_set():
            self._on_lifecycle_error(error_name(exc))

    def _run(self) -> None:
        nvml = self._nvml
        try:
            event_set = nvml.nvmlEventSetCreate()
        except Exception as exc:
            _log.warning("gpu_xid_events_unavailable", error=error_name(exc))
            return
        try:
            registered = []
            for uuid, handle in self._handles.items():
                try:
                    supported = nvml.nvmlDeviceGetSupportedEventTypes(handle)
                    if supported & pynvml.nvmlEventTypeXidCriticalError:
                        nvml.nvmlDeviceRegisterEvents(handle, pynvml.nvmlEventTypeXidCriticalError, event_set)
                        registered.append(uuid)
                except Exception as exc:
                    if classify(exc) is ErrorClass.LIFECYCLE:
                        self._lifecycle(exc)
                        return
                    _log.info("gpu_xid_events_unsupported", uuid=uuid, error=error_name(exc))
            self.registered = tuple(registered)
            if not registered:
                return
            while not self._stop.is_set():
                try:
                    data = nvml.nvmlEventSetWait_v2(event_set, _WAIT_MS)
                except pynvml.NVMLError_Timeout:
                    continue
                except Exception as exc:
                    if classify(exc) is ErrorClass.LIFECYCLE:
                        self._lifecycle(exc)
                        return
                    _log.warning("gpu_xid_wait_failed", error=error_name(exc))
                    # Do not spin on a persistent error; the poller restarts us after a re-init.
                    self._stop.wait(_WAIT_MS / 1000)
                    continue
                if not data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                    continue
                try:
                    uuid = str(nvml.nvmlDeviceGetUUID(data.device))
                except Exception:
                    uuid = "unknown"
                xid = int(data.eventData)
                _log.error("gpu_xid_error", uuid=uuid, xid=xid)
                self._on_xid(uuid, xid, time.time())
        finally:
            with contextlib.suppress(Exception):
                nvml.nvmlEventSetFree(event_set)
