"""``sentinel sim``: an SGLang v0.5.9-compatible server simulator (contract: docs/sim.md).

In-process use (fast tests)::

    from sglang_sentinel_sim import serve

    async with serve(speed=100, enable_metrics=True) as sim:
        ...  # sim.base_url, sim.control_url, sim.truth, sim.engine

As a process: ``sentinel sim --port 0 --ready-file PATH ...`` (see tests/conftest.py's
``sim_factory``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sglang_sentinel.lazy import lazy_exports

if TYPE_CHECKING:
    from sglang_sentinel_sim.config import SimConfig
    from sglang_sentinel_sim.profiles import DEFAULT_PROFILE, PROFILES, Profile, get_profile
    from sglang_sentinel_sim.server import SimServer, serve
    from sglang_sentinel_sim.text import count_tokens

__all__ = [
    "DEFAULT_PROFILE",
    "PROFILES",
    "Profile",
    "SimConfig",
    "SimServer",
    "count_tokens",
    "get_profile",
    "serve",
]

# Imported on first use: `sentinel --help` imports `sglang_sentinel_sim.command` (which runs this
# __init__) to build its parser; the server module pulls in aiohttp's web stack and the whole
# simulator, which only `sentinel sim` itself needs.
__getattr__ = lazy_exports(
    __name__,
    {
        "SimConfig": "sglang_sentinel_sim.config",
        "DEFAULT_PROFILE": "sglang_sentinel_sim.profiles",
        "PROFILES": "sglang_sentinel_sim.profiles",
        "Profile": "sglang_sentinel_sim.profiles",
        "get_profile": "sglang_sentinel_sim.profiles",
        "SimServer": "sglang_sentinel_sim.server",
        "serve": "sglang_sentinel_sim.server",
        "count_tokens": "sglang_sentinel_sim.text",
    },
)
