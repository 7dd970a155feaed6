"""Fixtures of the live Prometheus tests: sentinel daemons on the simulator (``box_factory``, see
``support.live_prometheus.Box``) and Prometheus servers scraping them (``prometheus_factory``)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from support.live_prometheus import Box, Prometheus


@pytest.fixture
def box_factory(tmp_path: Path) -> Iterator[Callable[..., Box]]:
    made: list[Box] = []

    def make(name: str = "box", overrides: dict[str, Any] | None = None) -> Box:
        workdir = tmp_path / name
        workdir.mkdir()
        box = Box(workdir, overrides or {})
        made.append(box)
        return box

    yield make
    for box in made:
        box.close()


@pytest.fixture
def prometheus_factory(tmp_path: Path) -> Iterator[Callable[..., Prometheus]]:
    started: list[Prometheus] = []

    def start(targets: dict[str, str], **kwargs: Any) -> Prometheus:
        prom = Prometheus(tmp_path / f"prometheus{len(started)}", targets, **kwargs)
        started.append(prom)
        return prom

    yield start
    for prom in started:
        prom.stop()
