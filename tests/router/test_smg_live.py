"""The real SGLang router (PyPI ``smg``, pinned in requirements.txt) over three simulators.

``sentinel run`` in external mode with ``kind = "router"`` is ready only while the router has a
healthy worker (its /health is 200 with none), its canaries pass through the router (which
enforces the model name), and ``sentinel_router_worker_routable`` follows a SIGKILLed worker out
of rotation and back after its restart. ``sentinel fleet`` then serves ``/probe?target=`` for the
three workers and the router. Everything listens on loopback; the router is kept off the network
(its proxies and HF_ENDPOINT point at a dead loopback port: it may try to fetch a tokenizer).
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.router.detect import detect_kind
from sglang_sentinel_sim.testing import SimProcess
from support.ports import free_port

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        importlib.util.find_spec("smg") is None,
        reason="the SGLang router is not installed: pip install -r tests/router/requirements.txt"
        " (scripts/test does)",
    ),
]

# The router's health checker: a worker is out after FAILURES × INTERVAL seconds of failed checks.
HEALTH_INTERVAL_S = 1
HEALTH_FAILURES = 2
DEAD_NET = "http://127.0.0.1:9"  # nothing listens there: no download can leave the box
# Generous slack over the router's own bound: a 2-core box shared with other test runs.
SLACK_S = 15.0


def start_sims(sim_factory: Callable[..., SimProcess], *argsets: tuple[str, ...]) -> list[SimProcess]:
    """One simulator per ``argsets`` entry, started at the same time (each waits for its import)."""
    with ThreadPoolExecutor(len(argsets)) as pool:
        return list(pool.map(lambda args: sim_factory(*args), argsets))


def _client() -> httpx.Client:
    return httpx.Client(trust_env=False, timeout=5.0)


def wait_for(
    what: str, check: Callable[[], bool], timeout: float, proc: subprocess.Popen[bytes] | None = None
) -> float:
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what}: process exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if check():
                return time.monotonic() - t0
        time.sleep(0.2)
    pytest.fail(f"{what}: not within {timeout:g} s")


def samples(url: str, path: str = "/metrics") -> dict[tuple[str, frozenset[tuple[str, str]]], float]:
    with _client() as c:
        text = c.get(url + path).text
    return {
        (s.name, frozenset(s.labels.items())): s.value
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    }


def sample(url: str, name: str, path: str = "/metrics", **labels: str) -> float | None:
    return samples(url, path).get((name, frozenset(labels.items())))


@contextlib.contextmanager
def spawn(cmd: list[str], log: Path, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        proc = subprocess.Popen(
            cmd,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {})},
            start_new_session=True,
        )
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=10)


def router_env() -> dict[str, str]:
    return {
        "HF_ENDPOINT": DEAD_NET,
        "HF_HUB_OFFLINE": "1",
        **{
            k: DEAD_NET
            for k in ("http_proxy", "https_proxy", "HTTP_PROXY", "HTTPS_PROXY", "all_proxy", "ALL_PROXY")
        },
        # The workers are on loopback: without this the router sends its health checks to the proxy.
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }


@contextlib.contextmanager
def foreign_streams(url: str, n: int) -> Iterator[None]:
    """``n`` long streamed completions through the router (someone else's traffic), cut on exit."""
    import threading

    stop = threading.Event()
    body = {"model": "glm-5", "prompt": "hi", "max_tokens": 100_000, "ignore_eos": True, "stream": True}

    def one() -> None:
        with (
            contextlib.suppress(httpx.HTTPError),
            _client() as c,
            c.stream("POST", url + "/v1/completions", json=body, timeout=60) as r,
        ):
            for _ in r.iter_bytes():
                if stop.is_set():
                    return

    threads = [threading.Thread(target=one, daemon=True) for _ in range(n)]
    for t in threads:
        t.start()
    try:
        yield
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=10)


def pool_load(router_url: str) -> float:
    from sglang_sentinel.schedule.polite import ServerLoadReader

    async def read() -> float:
        reader = ServerLoadReader(router_url, "auto", 5.0, kind="router")
        try:
            load = await reader.read()
        finally:
            await reader.aclose()
        return load.running + load.queued

    return asyncio.run(read())


@pytest.mark.slow(seconds=20)
def test_run_and_fleet_against_the_real_router(
    sim_factory: Callable[..., SimProcess], tmp_path: Path
) -> None:
    sims = start_sims(sim_factory, *[("--enable-metrics",)] * 3)
    ports = [s.port for s in sims]
    workers = [f"http://127.0.0.1:{p}" for p in ports]
    rport, rmetrics, exporter, fleet_port = free_port(), free_port(), free_port(), free_port()
    router_url = f"http://127.0.0.1:{rport}"
    router_cmd = [
        sys.executable, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(rport),
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(rmetrics),
        "--health-check-interval-secs", str(HEALTH_INTERVAL_S),
        "--health-failure-threshold", str(HEALTH_FAILURES), "--log-level", "warn",
        "--worker-urls", *workers,
    ]  # fmt: skip
    with spawn(router_cmd, tmp_path / "router.log", router_env()) as router:

        def ready_workers() -> int:
            with _client() as c:
                r = c.get(router_url + "/readiness")
                return int(r.json().get("healthy_workers", 0)) if r.status_code == 200 else 0

        wait_for("router with 3 healthy workers", lambda: ready_workers() == 3, 60, router)

        # No worker: /health still 200, /readiness 503. sentinel must not call that ready.
        for s in sims:
            s.kill()
        wait_for("router not ready", lambda: _client().get(router_url + "/readiness").status_code == 503, 30)
        assert _client().get(router_url + "/health").status_code == 200

        # kind = "auto" (external mode's default) tells the router from a server by its routes,
        # even with no worker up.
        found = asyncio.run(detect_kind(router_url, within_s=0))
        assert (found.kind, found.evidence) == (
            "router",
            "readiness=router workers=router server_info=absent",
        )

        config = tmp_path / "run.toml"
        config.write_text(
            f'state_dir = "{tmp_path / "state"}"\n'
            # No kind: "auto" is the default in external mode.
            '[server]\nmode = "external"\nhost = "127.0.0.1"\n'
            f"port = {rport}\nstartup_poll_interval = 0.5\n"
            f'[server.router]\nmetrics_url = "http://127.0.0.1:{rmetrics}/metrics"\nexpected_workers = 3\n'
            "[server.checks.health]\ninterval = 1\n"
            "[server.checks.canary]\ninterval = 2\n"
            f'[exporter]\nport = {exporter}\n[collectors]\nenabled = ["sglang", "router"]\n'
        )
        run_cmd = [sys.executable, "-m", "sglang_sentinel", "run", "--config", str(config)]
        sentinel = f"http://127.0.0.1:{exporter}"
        with spawn(run_cmd, tmp_path / "sentinel.log") as run:
            wait_for(
                "sentinel exporter", lambda: _client().get(sentinel + "/healthz").status_code == 200, 60, run
            )
            time.sleep(3)  # several readiness polls against a router with no worker
            assert sample(sentinel, "sentinel_server_state", state="ready") == 0
            assert sample(sentinel, "sentinel_router_ready") == 0
            evidence = "readiness=router workers=router server_info=absent"
            assert (
                sample(sentinel, "sentinel_target_info", kind="router", declared="auto", evidence=evidence)
                == 1
            )
            assert sample(sentinel, "sentinel_target_kind_undecided") == 0

            # The workers come back on their ports: the router readmits them, sentinel is ready.
            sims = start_sims(sim_factory, *[("--enable-metrics", "--port", str(p)) for p in ports])
            wait_for(
                "sentinel ready",
                lambda: sample(sentinel, "sentinel_server_state", state="ready") == 1,
                60,
                run,
            )
            wait_for(
                "canaries through the router",
                lambda: (
                    sample(sentinel, "sentinel_probe_success", probe="canary_arithmetic") == 1
                    and sample(sentinel, "sentinel_probe_success", probe="canary_is_prime") == 1
                ),
                60,
                run,
            )
            wait_for(
                "3 routable",
                lambda: sample(sentinel, "sentinel_router_workers", state="routable") == 3,
                30,
                run,
            )
            assert sample(sentinel, "sentinel_router_workers_expected") == 3
            # The SGLang collector reads the workers through /engine_metrics (the router has no /metrics).
            assert sample(sentinel, "sentinel_collector_success", collector="sglang") == 1

            # A worker itself is detected as a server; the polite check counts foreign traffic over
            # the pool through the router (/engine_metrics: the workers' own gauges).
            assert asyncio.run(detect_kind(workers[0], within_s=0)).kind == "server"
            with foreign_streams(router_url, 4):
                took = wait_for("foreign traffic over the pool", lambda: pool_load(router_url) >= 4, 30)
            print(f"4 foreign requests seen through the router after {took:.1f} s")

            # SIGKILL one worker: out of rotation within the router's failures × interval.
            victim = sims[1]
            victim.kill()
            took = wait_for(
                "killed worker unroutable",
                lambda: sample(sentinel, "sentinel_router_worker_routable", worker=workers[1]) == 0,
                HEALTH_FAILURES * HEALTH_INTERVAL_S + SLACK_S,
                run,
            )
            assert sample(sentinel, "sentinel_router_worker_routable", worker=workers[0]) == 1
            assert sample(sentinel, "sentinel_server_state", state="ready") == 1  # two workers still serve
            print(f"worker out of rotation after {took:.1f} s")
            sims[1] = sim_factory("--enable-metrics", "--port", str(ports[1]))
            took = wait_for(
                "restarted worker routable again",
                lambda: sample(sentinel, "sentinel_router_worker_routable", worker=workers[1]) == 1,
                60,
                run,
            )
            print(f"worker back in rotation {took:.1f} s after its restart")

        # sentinel fleet: the three workers from a file_sd file, the router from the TOML.
        sd = tmp_path / "targets.json"
        sd.write_text(
            "["
            + ",".join(
                f'{{"targets": ["127.0.0.1:{p}"], "labels": {{"name": "w{i}"}}}}' for i, p in enumerate(ports)
            )
            + "]"
        )
        fleet_cfg = tmp_path / "fleet.toml"
        fleet_cfg.write_text(
            f'[fleet]\ninterval = 2\nfile_sd = "{sd}"\nfile_sd_check_interval = 0.5\n'
            f'[[fleet.targets]]\nname = "router"\nurl = "{router_url}"\nkind = "router"\n'
            f'router_metrics_url = "http://127.0.0.1:{rmetrics}/metrics"\n'
            f"[exporter]\nport = {fleet_port}\n"
        )
        fleet = f"http://127.0.0.1:{fleet_port}"
        fleet_cmd = [sys.executable, "-m", "sglang_sentinel", "fleet", "--config", str(fleet_cfg)]
        with spawn(fleet_cmd, tmp_path / "fleet.log") as proc:
            names = ["w0", "w1", "w2", "router"]

            def all_probed() -> bool:
                return all(
                    sample(fleet, "sentinel_probe_success", f"/probe?target={n}", probe="canary_arithmetic")
                    == 1
                    for n in names
                )

            wait_for("fleet results for every target", all_probed, 60, proc)
            for n in names:
                assert sample(fleet, "sentinel_probe_success", f"/probe?target={n}", probe="readiness") == 1
            assert sample(fleet, "sentinel_router_workers", "/probe?target=router", state="routable") == 3
            assert sample(fleet, "sentinel_fleet_targets") == 4
            assert sample(fleet, "sentinel_fleet_file_sd_reloads_total") == 1
            with _client() as c:
                assert c.get(fleet + "/probe?target=nope").status_code == 404

            # A worker dropped from the file is no longer probed; a bad edit is refused, not applied.
            sd.write_text(
                sd.read_text()
                .replace(f'{{"targets": ["127.0.0.1:{ports[2]}"], "labels": {{"name": "w2"}}}}', "")
                .replace(",]", "]")
            )
            wait_for("file_sd reload", lambda: sample(fleet, "sentinel_fleet_targets") == 3, 20, proc)
            sd.write_text("[{")
            wait_for(
                "bad file_sd counted",
                lambda: (sample(fleet, "sentinel_fleet_file_sd_errors_total") or 0) >= 1,
                20,
                proc,
            )
            assert sample(fleet, "sentinel_fleet_targets") == 3
        assert router.poll() is None, (tmp_path / "router.log").read_text()[-2000:]


def test_an_open_breaker_on_a_healthy_worker_is_seen_as_unroutable(
    sim_factory: Callable[..., SimProcess], tmp_path: Path
) -> None:
    # sglang-router kept a restarted worker unroutable behind its breaker while /workers called
    # it healthy. Reproduced here: one worker answers 503 to generation (its /health stays 200),
    # round-robin sends it requests until the breaker opens.
    from prometheus_client import CollectorRegistry

    from sglang_sentinel.collect.router import RouterCollector, _Config

    sims = start_sims(sim_factory, *[("--enable-metrics",)] * 2)
    rport, rmetrics = free_port(), free_port()
    router_url = f"http://127.0.0.1:{rport}"
    cmd = [
        sys.executable, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(rport),
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(rmetrics),
        "--policy", "round_robin", "--disable-retries", "--cb-failure-threshold", "3",
        "--cb-timeout-duration-secs", "60", "--log-level", "warn",
        "--worker-urls", *(s.base_url for s in sims),
    ]  # fmt: skip
    with spawn(cmd, tmp_path / "router.log", router_env()) as router, _client() as c:
        wait_for(
            "router with 2 healthy workers",
            lambda: c.get(router_url + "/readiness").json().get("healthy_workers") == 2,
            60,
            router,
        )
        sims[0].control("/faults", "POST", {"name": "http_503", "params": {"rate": 1.0}})
        body = {"model": "glm-5", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
        codes = [c.post(router_url + "/v1/chat/completions", json=body).status_code for _ in range(12)]
        assert 503 in codes

        reg = CollectorRegistry()
        cfg = _Config(True, router_url, f"http://127.0.0.1:{rmetrics}/metrics", 2, 5.0)
        reg.register(RouterCollector(cfg))

        def value(name: str, **labels: str) -> float | None:
            return reg.get_sample_value(name, labels)

        bad, good = sims[0].base_url, sims[1].base_url
        wait_for("breaker open", lambda: value("sentinel_router_worker_breaker_open", worker=bad) == 1, 20)
        assert value("sentinel_router_worker_healthy", worker=bad) == 1  # what the router's health says
        assert value("sentinel_router_worker_routable", worker=bad) == 0
        assert value("sentinel_router_worker_routable", worker=good) == 1
        assert value("sentinel_router_workers", state="breaker_open") == 1
        assert value("sentinel_router_ready") == 1
        # The errors clients saw, from the router's counters: every 503 was the faulty worker's own
        # answer (retries off), and the breaker counted its failures there only.
        assert value("sentinel_router_upstream_5xx_total", source="worker") == codes.count(503)
        assert value("sentinel_router_upstream_5xx_total", source="gateway") == 0
        assert (value("sentinel_router_worker_breaker_failures_total", worker=bad) or 0) >= 3
        assert value("sentinel_router_worker_breaker_failures_total", worker=good) == 0
        assert value("sentinel_router_retries_exhausted_total") is not None


def test_a_prefill_decode_pair_of_simulators_serves_through_the_router_in_pd_mode(
    sim_factory: Callable[..., SimProcess], tmp_path: Path
) -> None:
    # smg --pd-disaggregation sends each request to a prefill and a decode server, with
    # bootstrap_host/port/room added; the client gets the decode server's answer. No KV moves
    # between the simulators (sglang_sentinel_sim.disagg): the pair serves, and each role does its part.
    from sglang_sentinel.collect.router import RouterCollector, _Config

    bport = free_port()
    role_flags = ("--enable-metrics", "--disaggregation-mode")
    prefill, decode = start_sims(
        sim_factory,
        (*role_flags, "prefill", "--disaggregation-bootstrap-port", str(bport)),
        (*role_flags, "decode"),
    )
    rport = free_port()
    router_url = f"http://127.0.0.1:{rport}"
    cmd = [
        sys.executable, "-m", "smg", "launch", "--host", "127.0.0.1", "--port", str(rport),
        "--prometheus-host", "127.0.0.1", "--prometheus-port", str(free_port()),
        "--health-check-interval-secs", "1", "--log-level", "warn", "--pd-disaggregation",
        "--prefill", prefill.base_url, str(bport), "--decode", decode.base_url,
    ]  # fmt: skip
    with spawn(cmd, tmp_path / "router.log", router_env()) as router, _client() as c:
        wait_for(
            "router with the pair healthy",
            lambda: c.get(router_url + "/readiness").json().get("healthy_workers") == 2,
            60,
            router,
        )
        roles = {
            w["url"]: (w["worker_type"], w.get("bootstrap_port"))
            for w in c.get(router_url + "/workers").json()["workers"]
        }
        assert roles == {prefill.base_url: ("prefill", bport), decode.base_url: ("decode", None)}
        # Straight to a role server, without a bootstrap room: refused, as SGLang does.
        assert c.post(prefill.base_url + "/generate", json={"text": "hi"}).status_code == 400
        body = {"model": "glm-5", "prompt": "hello there", "max_tokens": 24, "ignore_eos": True}
        reply = c.post(router_url + "/v1/completions", json=body, timeout=30)
        assert reply.status_code == 200, reply.text
        assert reply.json()["usage"]["completion_tokens"] == 24  # the decode server's answer
        native = c.post(
            router_url + "/generate", json={"text": "hi", "sampling_params": {"max_new_tokens": 5}}
        )
        assert native.json()["meta_info"]["completion_tokens"] == 5
        for sim in (prefill, decode):
            assert '"POST /v1/completions HTTP/1.1" 200' in sim.stdout_text()
        # The router collector sees the pair as its pool.
        cfg = _Config(enabled=True, base_url=router_url, metrics_url=None, expected_workers=2, timeout=5)
        families = {f.name: f for f in RouterCollector(cfg).collect()}
        routable = {s.labels["worker"]: s.value for s in families["sentinel_router_worker_routable"].samples}
        assert routable == {prefill.base_url: 1.0, decode.base_url: 1.0}
