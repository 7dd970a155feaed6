"""The fleet's rounds against httpx.MockTransport: what is probed, in which order, with which model."""

from __future__ import annotations

import json

import httpx
import pytest

from sglang_sentinel.fleet.prober import Prober, probe_target
from sglang_sentinel.fleet.service import result_families
from sglang_sentinel.fleet.settings import FleetSettings, FleetTarget
from support.waits import until


def target_server(
    seen: list[tuple[str, str]], *, ready: int = 200, model: str = "glm-5"
) -> httpx.MockTransport:
    def handle(request: httpx.Request) -> httpx.Response:
        seen.append((request.url.host, request.url.path))
        path = request.url.path
        if path in ("/health", "/readiness"):
            return httpx.Response(ready)
        if path == "/v1/models":
            return httpx.Response(200, json={"object": "list", "data": [{"id": model}]})
        if path == "/v1/chat/completions":
            body = json.loads(request.content)
            if body["model"] != model:  # the router enforces the model name
                return httpx.Response(404, json={"error": "model not found"})
            prompt = body["messages"][0]["content"]
            answer = "4" if "2+2" in prompt else "def is_prime(n):\n    return n > 1"
            return httpx.Response(
                200, json={"choices": [{"message": {"content": answer}, "finish_reason": "stop"}]}
            )
        if path == "/workers":
            return httpx.Response(
                200, json={"workers": [{"url": "http://w1", "is_healthy": True, "status": "ready"}]}
            )
        return httpx.Response(404)

    return httpx.MockTransport(handle)


def settings(**extra: object) -> FleetSettings:
    return FleetSettings.model_validate({"interval": 1, "jitter": 0, **extra})


async def test_a_router_round_is_readiness_then_canaries_with_its_model_then_its_pool() -> None:
    seen: list[tuple[str, str]] = []
    target = FleetTarget(name="r", url="http://router:30000", kind="router")
    async with httpx.AsyncClient(base_url=target.url, transport=target_server(seen)) as c:
        probes, snap, err = await probe_target(c, target, settings())
    assert next(p.probe for p in probes) == "readiness"
    assert all(p.ok for p in probes), probes
    assert len(probes) == 1 + len(settings().canary.canaries)
    assert err is None
    assert snap is not None
    assert snap.counts()["routable"] == 1
    paths = [p for _, p in seen]
    assert paths[0] == "/readiness"
    assert "/health" not in paths
    assert paths[-1] == "/workers"


async def test_a_target_that_is_not_ready_gets_no_canaries() -> None:
    seen: list[tuple[str, str]] = []
    target = FleetTarget(name="s", url="http://gpu-a:30000")
    async with httpx.AsyncClient(base_url=target.url, transport=target_server(seen, ready=503)) as c:
        probes, snap, _ = await probe_target(c, target, settings())
    assert [(p.probe, p.reason) for p in probes] == [("readiness", "http_503")]
    assert snap is None
    assert [p for _, p in seen] == ["/health"]
    fams = {f.name: f for f in result_families_of(probes)}
    assert fams["sentinel_probe_failure_info"].samples[0].labels == {
        "probe": "readiness",
        "reason": "http_503",
    }


def result_families_of(probes: object) -> list:  # type: ignore[type-arg]
    from sglang_sentinel.fleet.prober import TargetResult

    t = FleetTarget(name="s", url="http://gpu-a:30000")
    return result_families(TargetResult(t, probes, None, None, 0.0, 0.0, 0.0))  # type: ignore[arg-type]


async def test_the_prober_keeps_each_targets_latest_round_and_follows_target_changes() -> None:
    seen: list[tuple[str, str]] = []
    prober = Prober(settings(canary={"enabled": False}), transport=target_server(seen))
    a = FleetTarget(name="a", url="http://a:1")
    b = FleetTarget(name="b", url="http://b:1")
    prober.set_targets((a, b))
    await until(lambda: {"a", "b"} <= set(prober.results))
    assert set(prober.results) == {"a", "b"}
    assert prober.stats.targets == 2
    prober.set_targets((b,))
    assert set(prober.results) == {"b"}
    assert prober.stats.targets == 1
    await prober.stop()
    assert prober.stats.rounds_ok >= 2
    assert prober.stats.rounds_failed == 0
    assert {h for h, _ in seen} == {"a", "b"}


async def test_a_targets_api_key_goes_with_every_probe_and_never_into_file_sd() -> None:
    auth: set[str | None] = set()

    def handle(request: httpx.Request) -> httpx.Response:
        auth.add(request.headers.get("authorization"))
        return httpx.Response(200)

    prober = Prober(settings(canary={"enabled": False}), transport=httpx.MockTransport(handle))
    prober.set_targets((FleetTarget(name="k", url="http://k:1", api_key="s3cret"),))
    await until(lambda: "k" in prober.results)
    await prober.stop()
    assert auth == {"Bearer s3cret"}
    from sglang_sentinel.fleet.targets import FileSdError, parse_file_sd

    with pytest.raises(FileSdError, match="api_key is refused"):
        parse_file_sd([{"targets": ["a:1"], "labels": {"name": "n", "api_key": "x"}}])


def test_a_router_whose_pool_cannot_be_read_says_so_on_probe() -> None:
    from sglang_sentinel.fleet.prober import TargetResult
    from sglang_sentinel.supervise.probes import ProbeResult

    t = FleetTarget(name="r", url="http://r:1", kind="router")
    ready = ProbeResult("readiness", True, 0.01, "ok")
    fams = {f.name: f for f in result_families(TargetResult(t, (ready,), None, "timeout", 0.0, 0.0, 0.0))}
    assert fams["sentinel_router_read_success"].samples[0].value == 0
    assert [s.labels for s in fams["sentinel_probe_failure_info"].samples] == [
        {"probe": "router_workers", "reason": "timeout"}
    ]
    assert "sentinel_router_workers" not in fams


async def test_auto_targets_are_told_apart_by_their_routes() -> None:
    seen: list[tuple[str, str]] = []
    base = target_server(seen)

    def handle(request: httpx.Request) -> httpx.Response:
        host, path = request.url.host, request.url.path
        if host == "down":
            raise httpx.ConnectError("refused", request=request)
        if host == "r" and path == "/readiness":  # smg 1.13.0's shape
            return httpx.Response(200, json={"status": "ready", "healthy_workers": 1, "total_workers": 1})
        if host == "s" and path in ("/readiness", "/workers"):
            return httpx.Response(404, json={"detail": "Not Found"})
        if host == "s" and path == "/server_info":
            return httpx.Response(200, json={"version": "0.5.23", "model_path": "m", "tp_size": 8})
        return base.handle_request(request)

    prober = Prober(settings(canary={"enabled": False}), transport=httpx.MockTransport(handle))
    targets = [FleetTarget(name=n, url=f"http://{n}:1", kind="auto") for n in ("r", "s", "down")]
    prober.set_targets(tuple(targets))
    await until(lambda: {"r", "s", "down"} <= set(prober.results))
    await prober.stop()
    kinds = {n: (r.target.kind, r.declared_kind) for n, r in prober.results.items()}
    assert kinds == {"r": ("router", "auto"), "s": ("server", "auto"), "down": ("server", "auto")}
    assert prober.results["r"].router is not None  # its pool was read as a router's
    info = {
        n: next(f for f in result_families(r) if f.name == "sentinel_target_info").samples[0].labels
        for n, r in prober.results.items()
    }
    assert info["r"]["kind"] == "router"
    assert info["s"] == {
        "kind": "server",
        "declared": "auto",
        "evidence": "readiness=absent workers=absent server_info=server",
    }
    assert info["down"]["evidence"] == "readiness=no_answer workers=no_answer server_info=no_answer"
    # A declared kind serves no target_info on /probe: nothing was detected.
    declared = FleetTarget(name="x", url="http://s:1")
    from sglang_sentinel.fleet.prober import TargetResult

    plain = TargetResult(declared, (), None, None, 0.0, 0.0, 0.0, None, "server")
    assert all(f.name != "sentinel_target_info" for f in result_families(plain))
