"""The running server's SGLang version: read when it becomes ready, fed to the sglang collector."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import httpx
import pytest

from sglang_sentinel.collect.sglang_metrics import SGLangMetricsCollector
from sglang_sentinel.collect.source import CollectionFailed
from sglang_sentinel.supervise import ServerState, Supervisor
from sglang_sentinel.supervise.launch import LaunchCommand
from sglang_sentinel.supervise.server_version import ServerVersionReader, attach_version_reader
from sglang_sentinel.supervise.settings import ServerSettings
from sglang_sentinel.supervise.state import StateMachine
from support.waits import until

pytestmark = [pytest.mark.usefixtures("no_leaked_children")]


def server(routes: dict[str, httpx.Response], seen: list[httpx.Request] | None = None) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        if seen is not None:
            seen.append(request)
        return routes.get(request.url.path, httpx.Response(404, json={"detail": "Not Found"}))

    return httpx.MockTransport(handle)


def version_series(collector: SGLangMetricsCollector) -> tuple[float | None, dict[str, str]]:
    families = []
    try:
        for family in collector.collect():  # own series come first, then the fetch failure
            families.append(family)
    except CollectionFailed:
        pass
    by_name = {f.name: f for f in families}
    known = by_name["sentinel_sglang_version_known"].samples[0].value
    return known, dict(by_name["sentinel_sglang_version_info"].samples[0].labels)


def offline_collector() -> SGLangMetricsCollector:
    # /metrics is not what these tests are about: every fetch fails at once.
    return SGLangMetricsCollector(
        "http://127.0.0.1:1/metrics", transport=httpx.MockTransport(lambda r: httpx.Response(503))
    )


async def reader_for(
    transport: httpx.MockTransport, fallback: str | None = None
) -> tuple[ServerVersionReader, SGLangMetricsCollector]:
    collector = offline_collector()
    reader = ServerVersionReader(
        "http://sglang", collector.set_sglang_version, fallback=lambda: fallback, transport=transport
    )
    return reader, collector


async def test_0_5_23_server_info() -> None:
    info = {"version": "0.5.23", "model_path": "/models/GLM-5-NVFP4", "tp_size": 8}
    seen: list[httpx.Request] = []
    transport = server({"/server_info": httpx.Response(200, json=info)}, seen)
    collector = offline_collector()
    reader = ServerVersionReader(
        "http://sglang", collector.set_sglang_version, api_key=lambda: "k3y", transport=transport
    )
    assert await reader.refresh() == ("0.5.23", "/server_info")
    assert seen[0].headers["authorization"] == "Bearer k3y"
    assert version_series(collector) == (1.0, {"reported": "0.5.23", "behaves_as": "0.5.23"})


async def test_0_5_9_get_server_info_when_server_info_is_missing() -> None:
    transport = server({"/get_server_info": httpx.Response(200, json={"version": "0.5.9"})})
    reader, collector = await reader_for(transport)
    assert await reader.refresh() == ("0.5.9", "/get_server_info")
    assert version_series(collector) == (1.0, {"reported": "0.5.9", "behaves_as": "0.5.9"})


async def test_unknown_newer_version_behaves_as_the_newest_known() -> None:
    transport = server({"/server_info": httpx.Response(200, json={"version": "0.6.2"})})
    reader, collector = await reader_for(transport)
    await reader.refresh()
    assert version_series(collector) == (0.0, {"reported": "0.6.2", "behaves_as": "0.5.23"})


@pytest.mark.parametrize(
    "reply",
    [
        httpx.Response(200, content=b"<html>not json"),
        httpx.Response(200, json=["version", "0.5.9"]),
        httpx.Response(200, json={"version": 5.9}),
        httpx.Response(200, json={"version": "x" * 1000}),
        httpx.Response(401, json={"error": "unauthorized"}),
    ],
)
async def test_bad_replies_fall_back_to_the_launch_version(reply: httpx.Response) -> None:
    transport = server({"/server_info": reply, "/get_server_info": reply})
    reader, collector = await reader_for(transport, fallback="0.5.19")
    assert await reader.refresh() == ("0.5.19", "launch command")
    assert version_series(collector) == (1.0, {"reported": "0.5.19", "behaves_as": "0.5.19"})


async def test_nothing_known_is_said_to_be_unknown() -> None:
    reader, collector = await reader_for(server({}))
    assert await reader.refresh() == (None, "none")
    assert version_series(collector) == (0.0, {"reported": "", "behaves_as": "0.5.23"})


async def test_read_on_the_transition_to_ready_only() -> None:
    seen: list[httpx.Request] = []
    reader, collector = await reader_for(
        server({"/server_info": httpx.Response(200, json={"version": "0.5.23"})}, seen)
    )
    machine = StateMachine()
    machine.subscribe(reader.on_state)
    machine.set(ServerState.STARTING, "launched")
    machine.set(ServerState.WARMING, "port open")
    assert seen == []
    machine.set(ServerState.READY, "health ok")
    machine.set(ServerState.UNHEALTHY, "canary")
    machine.set(ServerState.READY, "canary ok")  # same process: not read again
    await asyncio.sleep(0.05)
    assert len(seen) == 1
    assert reader.latest == ("0.5.23", "/server_info")
    assert version_series(collector)[0] == 1.0
    # A new life (after a restart) is read again: SGLang may have been upgraded in between.
    machine.set(ServerState.RESTARTING, "crash")
    machine.set(ServerState.READY, "health ok")
    await asyncio.sleep(0.05)
    assert len(seen) == 2
    await reader.close()


async def test_the_daemon_hook_reads_the_simulator(
    fast: Callable[..., ServerSettings], sim_cmd: Callable[..., LaunchCommand], port: int
) -> None:
    # What daemon.py wires: the supervisor's ready transition feeds the sglang collector.
    # An older server on purpose: 0.5.9 is not the simulator's default, so the reading is the server's.
    sup = Supervisor(fast(port), command=sim_cmd(port, "--sglang-version", "0.5.9"))
    collector = offline_collector()
    reader = attach_version_reader(sup, collector.set_sglang_version, f"http://127.0.0.1:{port}")
    assert reader is not None
    assert attach_version_reader(sup, None, "http://x") is None  # sglang collector disabled
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.READY, timeout_s=20)
        await until(lambda: reader.latest is not None, what="the version read")
        assert reader.latest == ("0.5.9", "/server_info")
        assert version_series(collector) == (1.0, {"reported": "0.5.9", "behaves_as": "0.5.9"})
    finally:
        await sup.stop()
        await reader.close()
