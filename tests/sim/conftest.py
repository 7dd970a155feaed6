"""In-process simulator fixtures for the sim tests (fast: one event loop, no subprocess)."""

from __future__ import annotations

import io
from collections.abc import AsyncIterator

import httpx
import pytest

from sglang_sentinel_sim import SimServer, serve


class Captured(io.StringIO):
    """The simulator's log stream, kept for assertions."""


@pytest.fixture
async def sim() -> AsyncIterator[SimServer]:
    async with serve(speed=200, enable_metrics=True, err=Captured()) as server:
        yield server


@pytest.fixture
async def client(sim: SimServer) -> AsyncIterator[httpx.AsyncClient]:
    async with httpx.AsyncClient(base_url=sim.base_url, timeout=30) as c:
        yield c
