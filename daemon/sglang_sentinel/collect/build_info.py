"""``sentinel_build_info``: the running version, for dashboards and upgrade tracking."""

from __future__ import annotations

import platform
from collections.abc import Iterator
from importlib import metadata

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics_core import Metric

import sglang_sentinel

__all__ = ["BuildInfoCollector"]


def _version(dist: str) -> str:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return ""


class BuildInfoCollector:
    def __init__(self) -> None:
        # Read once: versions cannot change under a running process.
        self._labels = {
            "version": sglang_sentinel.__version__,
            "python_version": platform.python_version(),
            "prometheus_client_version": _version("prometheus-client"),
            "nvidia_ml_py_version": _version("nvidia-ml-py"),
        }

    def collect(self) -> Iterator[Metric]:
        family = GaugeMetricFamily(
            "sentinel_build_info",
            "Version of sentinel and its key libraries (constant 1).",
            labels=list(self._labels),
        )
        family.add_metric(list(self._labels.values()), 1.0)
        yield family
