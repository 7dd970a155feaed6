"""``[server] kind = "auto"`` and polite injection through a router.

The router side is replies captured from smg 1.13.0 (tests/router/data); the server side is the
simulator itself over HTTP, in both SGLang versions. sglang-router 0.3.2's ``sglang_x`` spelling
at /engine_metrics is documented (its 0.3.2 source), not captured: its fixture is the smg capture renamed.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

import httpx
import pytest
from structlog.testing import capture_logs

from sglang_sentinel.config import ConfigError, load_settings
from sglang_sentinel.daemon import Daemon
from sglang_sentinel.router.detect import classify, detect_kind
from sglang_sentinel.schedule.polite import (
    LoadReadError,
    ServerLoadReader,
    parse_loads_json,
    parse_metrics_text,
)
from sglang_sentinel_sim import serve

DATA = Path(__file__).with_name("data")
WORKERS = json.loads((DATA / "smg-1.13.0-workers.json").read_text())
GET_LOADS = json.loads((DATA / "smg-1.13.0-get-loads.json").read_text())
ENGINE_SMG = (DATA / "smg-1.13.0-engine-metrics-excerpt.prom").read_text()
ENGINE_032 = (DATA / "sglang-router-0.3.2-engine-metrics-excerpt.prom").read_text()
READY = {"status": "ready", "healthy_workers": 2, "total_workers": 2}  # smg 1.13.0, verbatim
INFO = {"version": "0.5.9", "model_path": "m", "tp_size": 1}  # SGLang's /server_info, in part
NOT_FOUND = {"error": {"type": "invalid_request_error", "code": "unknown_url"}}


def fake_router(
    *, ready: int = 200, engine: str | None = ENGINE_SMG, loads: Any = GET_LOADS
) -> Callable[[httpx.Request], httpx.Response]:
    """smg's answers; /get_server_info would be proxied to a worker, /server_info is 404."""

    def handle(request: httpx.Request) -> httpx.Response:
        path = request.url.path
        if path == "/readiness":
            body = READY if ready == 200 else {"status": "not ready", "reason": "no healthy workers"}
            return httpx.Response(ready, json=body)
        if path == "/workers":
            return httpx.Response(200, json=WORKERS)
        if path == "/engine_metrics" and engine is not None:
            return httpx.Response(200, text=engine)
        if path == "/get_loads":
            return httpx.Response(200, json=loads)
        return httpx.Response(404, json=NOT_FOUND)

    return handle


# -- detection ---------------------------------------------------------------------------------


@pytest.mark.parametrize("ready", [200, 503])
async def test_a_router_is_detected_with_or_without_healthy_workers(ready: int) -> None:
    found = await detect_kind(
        "http://router:30000", within_s=0, transport=httpx.MockTransport(fake_router(ready=ready))
    )
    assert found.kind == "router"
    assert found.evidence == "readiness=router workers=router server_info=absent"


@pytest.mark.parametrize("version", ["0.5.9", "0.5.23"])
async def test_a_plain_sglang_server_is_detected_as_a_server(version: str) -> None:
    async with serve(speed=200, sglang_version=version) as sim:
        found = await detect_kind(sim.base_url, within_s=0)
    assert found.kind == "server"
    assert found.evidence == "readiness=absent workers=absent server_info=server"


async def test_nothing_listening_is_undecided_not_a_guess() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    found = await detect_kind("http://x:1", within_s=0, transport=httpx.MockTransport(refuse))
    assert found.kind is None
    assert found.evidence == "readiness=no_answer workers=no_answer server_info=no_answer"


@pytest.mark.parametrize(
    ("replies", "kind"),
    [
        # A router that proxies /server_info to a worker is still a router: two router-only routes.
        (
            {"/readiness": (200, READY), "/workers": (200, WORKERS), "/server_info": (200, INFO)},
            "router",
        ),
        # Half the router evidence: undecided.
        ({"/readiness": (200, READY), "/workers": (404, None), "/server_info": (404, None)}, None),
        # server_info in SGLang's shape, but /readiness did not answer: it may be a router that timed out.
        ({"/readiness": None, "/workers": (404, None), "/server_info": (200, INFO)}, None),
        # A /readiness that is some other service's JSON, not the router's.
        (
            {"/readiness": (200, {"ok": 1}), "/workers": (200, {"workers": []}), "/server_info": (404, None)},
            None,
        ),
        # A 200 /server_info that is not SGLang's (no version): undecided.
        ({"/readiness": (404, None), "/workers": (404, None), "/server_info": (200, {"tp_size": 1})}, None),
        # SGLang behind an API key answers 401 everywhere but /health: undecided (falls back to server).
        ({"/readiness": (401, None), "/workers": (401, None), "/server_info": (401, None)}, None),
    ],
)  # fmt: skip
def test_classify_needs_agreeing_evidence(replies: dict[str, Any], kind: str | None) -> None:
    assert classify(replies).kind == kind


async def test_detection_waits_for_a_target_that_starts_late() -> None:
    calls = {"n": 0}
    router = fake_router()

    def late(request: httpx.Request) -> httpx.Response:
        calls["n"] += 1
        if calls["n"] <= 3:  # the first round (three routes) finds nothing listening
            raise httpx.ConnectError("refused", request=request)
        return router(request)

    found = await detect_kind("http://r:1", within_s=5, interval_s=0.01, transport=httpx.MockTransport(late))
    assert found.kind == "router"
    assert calls["n"] == 6


def test_auto_resolved_to_router_turns_the_router_collector_on_unless_the_list_is_explicit() -> None:
    ext = {"SENTINEL_SERVER__MODE": "external", "SENTINEL_SERVER__KIND": "auto"}
    auto = load_settings(None, environ=ext)
    assert "router" not in auto.collectors.enabled
    resolved = auto.with_target_kind("router")
    assert resolved.server.kind == "router"
    assert "router" in resolved.collectors.enabled
    explicit = load_settings(None, environ={**ext, "SENTINEL_COLLECTORS__ENABLED": '["sglang"]'})
    assert explicit.with_target_kind("router").collectors.enabled == ("sglang",)
    assert auto.with_target_kind("server").collectors == auto.collectors


def test_auto_needs_external_mode() -> None:
    with pytest.raises(ConfigError, match='kind = "auto" needs mode = "external"'):
        load_settings(None, environ={"SENTINEL_SERVER__KIND": "auto"})


# -- polite injection through a router ----------------------------------------------------------


@pytest.mark.parametrize("text", [ENGINE_SMG, ENGINE_032], ids=["smg-1.13.0", "sglang-router-0.3.2"])
def test_engine_metrics_sum_over_the_workers_in_either_spelling(text: str) -> None:
    load = parse_metrics_text(text)
    assert (load.running, load.queued) == (5 + 13, 0)
    assert load.token_usage == pytest.approx(0.1)  # the fullest worker
    assert not load.live


def test_both_spellings_of_one_worker_count_once() -> None:
    line = 'sglang{s}num_running_reqs{{tp_rank="0",worker_addr="http://w:1"}} 4\n'
    queue = 'sglang{s}num_queue_reqs{{tp_rank="0",worker_addr="http://w:1"}} 1\n'
    text = line.format(s=":") + line.format(s="_") + queue.format(s=":") + queue.format(s="_")
    other = 'sglang_num_running_reqs{tp_rank="0",worker_addr="http://w:2"} 2\n'
    other += 'sglang_num_queue_reqs{tp_rank="0",worker_addr="http://w:2"} 0\n'
    load = parse_metrics_text(text + other)
    assert (load.running, load.queued) == (6, 1)


def test_the_routers_get_loads_is_a_pool_total_but_not_live() -> None:
    load = parse_loads_json(GET_LOADS, live=False)
    assert (load.running, load.queued) == (18, 0)
    assert not load.live  # smg polls the workers' /v1/loads every 10 s: compared with our peak


async def test_reader_against_a_router_reads_engine_metrics_first() -> None:
    reader = ServerLoadReader(
        "http://router:30000", "auto", 2.0, transport=httpx.MockTransport(fake_router()), kind="router"
    )
    try:
        load = await reader.read()
    finally:
        await reader.aclose()
    assert (load.running, load.queued, load.live) == (18, 0, False)


async def test_reader_against_a_router_without_metrics_enabled_workers_falls_back_to_get_loads() -> None:
    requests: list[str] = []
    router = fake_router(
        engine="", loads={**GET_LOADS, "aggregate": {**GET_LOADS["aggregate"], "total_running_reqs": 7}}
    )

    def record(request: httpx.Request) -> httpx.Response:
        requests.append(request.url.path)
        return router(request)

    reader = ServerLoadReader(
        "http://router:30000", "auto", 2.0, transport=httpx.MockTransport(record), kind="router"
    )
    try:
        first = await reader.read()
        second = await reader.read()
    finally:
        await reader.aclose()
    assert first.running == second.running == 7
    # Not sticky: workers restarted with --enable-metrics are read through /engine_metrics again.
    assert requests == ["/engine_metrics", "/get_loads"] * 2


@pytest.mark.parametrize(("source", "path"), [("loads", "/get_loads"), ("metrics", "/engine_metrics")])
async def test_reader_against_a_router_never_asks_for_v1_loads_or_metrics(
    source: Literal["loads", "metrics"], path: str
) -> None:
    requests: list[str] = []
    router = fake_router()

    def record(request: httpx.Request) -> httpx.Response:
        requests.append(request.url.path)
        return router(request)

    reader = ServerLoadReader(
        "http://router:30000", source, 2.0, transport=httpx.MockTransport(record), kind="router"
    )
    try:
        await reader.read()
    finally:
        await reader.aclose()
    assert requests == [path]


async def test_an_unreachable_router_is_a_failed_read() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    reader = ServerLoadReader(
        "http://router:30000", "auto", 2.0, transport=httpx.MockTransport(refuse), kind="router"
    )
    try:
        with pytest.raises(LoadReadError, match="engine_metrics"):
            await reader.read()
    finally:
        await reader.aclose()


async def test_the_daemon_resolves_auto_at_start_and_says_so(tmp_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = int(s.getsockname()[1])
    async with serve(speed=200, enable_metrics=True) as sim:
        for port, kind, event in (
            (sim.port, "server", "target_kind_detected"),
            (dead_port, "server", "target_kind_undetermined"),
        ):
            env = {
                "SENTINEL_STATE_DIR": str(tmp_path / f"state{port}"),
                "SENTINEL_SERVER__MODE": "external",
                "SENTINEL_SERVER__KIND": "auto",
                "SENTINEL_SERVER__PORT": str(port),
                "SENTINEL_SERVER__STARTUP_POLL_INTERVAL": "0.2",
                "SENTINEL_SERVER__ROUTER__DETECT_TIMEOUT_SECONDS": "0.5",
                "SENTINEL_EXPORTER__PORT": "0",
                "SENTINEL_COLLECTORS__GPU__BACKEND": "fake",
            }
            daemon = Daemon(load_settings(None, environ=env), environ=env)
            with capture_logs() as logs:
                await daemon._start()
            try:
                assert daemon.settings.server.kind == kind
                assert "router" not in daemon.settings.collectors.enabled
                found = [e for e in logs if e["event"].startswith("target_kind_")]
                assert [e["event"] for e in found] == [event]
                async with httpx.AsyncClient(base_url=daemon.exporter.url, timeout=10) as c:
                    text = (await c.get("/metrics")).text
                line = next(ln for ln in text.splitlines() if ln.startswith("sentinel_target_info{"))
                assert f'kind="{kind}"' in line
                assert 'declared="auto"' in line
            finally:
                await daemon._shutdown()


def test_calibration_can_target_one_worker_behind_the_router(tmp_path: Path) -> None:
    env = {
        "SENTINEL_STATE_DIR": str(tmp_path),
        "SENTINEL_SERVER__MODE": "external",
        "SENTINEL_SERVER__KIND": "router",
        "SENTINEL_CALIBRATION__WORKER_URL": "http://10.0.0.5:30000/",
    }
    daemon = Daemon(load_settings(None, environ=env), environ=env)
    assert daemon.server_url == "http://127.0.0.1:30000"  # probes and reference loads: the router
    assert daemon.calibration_url == "http://10.0.0.5:30000"  # sweeps: the worker
    assert daemon.calibration._server_url == "http://10.0.0.5:30000"
    plain = Daemon(load_settings(None, environ={"SENTINEL_STATE_DIR": str(tmp_path)}), environ={})
    assert plain.calibration_url == plain.server_url
    for bad in ("10.0.0.5:30000", "http://10.0.0.5:30000/v1", "ftp://x"):
        with pytest.raises(ConfigError, match="worker_url"):
            load_settings(None, environ={**env, "SENTINEL_CALIBRATION__WORKER_URL": bad})


async def test_a_stop_during_detection_does_not_wait_for_its_timeout(tmp_path: Path) -> None:
    from sglang_sentinel.daemon import _Stopped

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        dead_port = int(s.getsockname()[1])
    env = {
        "SENTINEL_STATE_DIR": str(tmp_path),
        "SENTINEL_SERVER__MODE": "external",
        "SENTINEL_SERVER__KIND": "auto",
        "SENTINEL_SERVER__PORT": str(dead_port),
        "SENTINEL_SERVER__ROUTER__DETECT_TIMEOUT_SECONDS": "600",
        "SENTINEL_EXPORTER__PORT": "0",
    }
    daemon = Daemon(load_settings(None, environ=env), environ=env)
    start = asyncio.create_task(daemon._start())
    await asyncio.sleep(0.5)
    daemon.request_stop("test")
    with pytest.raises(_Stopped):
        await asyncio.wait_for(start, 10)  # not the 600 s of detect_timeout_seconds
    await daemon._shutdown()


def test_target_info_says_when_auto_decided_nothing() -> None:
    from sglang_sentinel.router.detect import TargetInfo

    def samples(info: TargetInfo) -> dict[str, float]:
        return {s.name: s.value for m in info.collect() for s in m.samples}

    assert samples(TargetInfo("server", "auto", "readiness=no_answer", undecided=True)) == {
        "sentinel_target_info": 1.0,
        "sentinel_target_kind_undecided": 1.0,
    }
    assert samples(TargetInfo("router", "auto", "readiness=router"))["sentinel_target_kind_undecided"] == 0.0
    # A declared kind was never detected: no undecided series at all.
    assert "sentinel_target_kind_undecided" not in samples(TargetInfo("router", "router"))
