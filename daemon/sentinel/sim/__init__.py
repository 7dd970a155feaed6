"""``sentinel sim``: an SGLang v0.5.9-compatible server simulator (contract: docs/sim.md).

In-process use (fast tests)::

    from sentinel.sim import serve

    async with serve(speed=100, enable_metrics=True) as sim:
        ...  # sim.base_url, sim.control_url, sim.truth, sim.engine

As a process: ``sentinel sim --port 0 --ready-file PATH ...`` (see tests/conftest.py's
``sim_factory``).
"""

from sentinel.sim.config import SimConfig
from sentinel.sim.profiles import DEFAULT_PROFILE, PROFILES, Profile, get_profile
from sentinel.sim.server import SimServer, serve
from sentinel.sim.text import count_tokens

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
