"""``sentinel fleet``: one process probing many targets (servers or routers), no supervision.

Public surface::

    from sglang_sentinel.fleet import FleetService, load_fleet_file
    service = FleetService(load_fleet_file(path))
    await service.start()      # /probe?target=NAME, /metrics (the fleet's own health)
    ...
    await service.stop()
"""

from __future__ import annotations

from sglang_sentinel.fleet.config import FleetConfigError, load_fleet_file
from sglang_sentinel.fleet.prober import Prober, TargetResult
from sglang_sentinel.fleet.service import FleetService
from sglang_sentinel.fleet.settings import FleetFile, FleetSettings, FleetTarget

__all__ = [
    "FleetConfigError",
    "FleetFile",
    "FleetService",
    "FleetSettings",
    "FleetTarget",
    "Prober",
    "TargetResult",
    "load_fleet_file",
]
