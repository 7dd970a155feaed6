"""How each NVML error is treated: a field that is absent, a GPU to re-initialise, or a counted glitch.

The classes follow nvidia_gpu_exporter's NVML backend (github.com/utkuozdemir/nvidia_gpu_exporter):
"not supported" and
its relatives mean the series does not exist on this board (absent, never 0); the lifecycle
errors mean every handle is suspect, so the cycle fails and NVML is re-initialised on the next
one; anything else is a one-off failure of one field, counted and retried next cycle.
"""

from __future__ import annotations

import enum

import pynvml

__all__ = ["ErrorClass", "NvmlLifecycleError", "classify", "error_name"]


class ErrorClass(enum.Enum):
    ABSENT = "absent"
    LIFECYCLE = "lifecycle"
    TRANSIENT = "transient"


_ABSENT = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_DEPRECATED,
        # What NVLink and a few per-architecture queries answer on boards without the feature.
        pynvml.NVML_ERROR_INVALID_ARGUMENT,
        pynvml.NVML_ERROR_NOT_FOUND,
        pynvml.NVML_ERROR_NO_DATA,
    }
)
_LIFECYCLE = frozenset(
    {
        pynvml.NVML_ERROR_UNINITIALIZED,
        pynvml.NVML_ERROR_DRIVER_NOT_LOADED,
        pynvml.NVML_ERROR_LIBRARY_NOT_FOUND,
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH,
        pynvml.NVML_ERROR_GPU_NOT_FOUND,
        # The GPU answers nothing useful until it is reset; treat it like a lost one.
        pynvml.NVML_ERROR_RESET_REQUIRED,
    }
)
_NAMES: dict[int, str] = {
    value: name.removeprefix("NVML_ERROR_").lower()
    for name, value in vars(pynvml).items()
    if name.startswith("NVML_ERROR_") and isinstance(value, int)
}


def error_name(exc: BaseException) -> str:
    """A stable snake_case name for a label: ``gpu_is_lost``, ``not_supported``, ``timeout``, ..."""
    if isinstance(exc, pynvml.NVMLError):
        code: int = exc.value
        return _NAMES.get(code, f"nvml_{code}")
    if isinstance(exc, NvmlLifecycleError):
        return exc.reason
    return type(exc).__name__.lower()


def classify(exc: BaseException) -> ErrorClass:
    if isinstance(exc, pynvml.NVMLError):
        value: int = exc.value
        if value in _ABSENT:
            return ErrorClass.ABSENT
        if value in _LIFECYCLE:
            return ErrorClass.LIFECYCLE
        return ErrorClass.TRANSIENT
    # An older nvidia-ml-py without a binding for a newer call: the field does not exist for us.
    if isinstance(exc, AttributeError):
        return ErrorClass.ABSENT
    return ErrorClass.TRANSIENT


class NvmlLifecycleError(Exception):
    """NVML as a whole (or this GPU) is unusable until re-initialised; ``reason`` is a label value."""

    def __init__(self, reason: str, detail: str = "") -> None:
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
