"""The exporter over real loopback HTTP(S): formats, negotiation, auth, TLS, failure answers."""

from __future__ import annotations

import asyncio
import base64
import ssl
from pathlib import Path
from typing import Any

import bcrypt
import httpx
import pytest
from aiohttp import web
from prometheus_client.openmetrics.parser import text_string_to_metric_families as om_parse
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.collect import CollectorSet
from sglang_sentinel.export import ExporterConfigError, ExporterSettings, TlsSettings, load_users
from support.waits import until


async def get(url: str, **kw: Any) -> httpx.Response:
    verify = kw.pop("verify", True)
    async with httpx.AsyncClient(timeout=10, verify=verify) as client:
        return await client.get(url, **kw)


async def test_metrics_text_format(collectors: CollectorSet, exporter_factory: Any) -> None:
    exporter = await exporter_factory(collectors)
    r = await get(exporter.url + "/metrics")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain; version=0.0.4")
    families = {f.name for f in text_string_to_metric_families(r.text)}
    assert {"sentinel_build_info", "sentinel_collector_success", "sglang:num_running_reqs"} <= families
    assert "sentinel_gpu_power_watts" in families
    assert "sentinel_sglang_log_lines" in families


async def test_openmetrics_on_request(collectors: CollectorSet, exporter_factory: Any) -> None:
    exporter = await exporter_factory(collectors)
    accept = "application/openmetrics-text;version=1.0.0,text/plain;version=0.0.4;q=0.5"
    r = await get(exporter.url + "/metrics", headers={"Accept": accept})
    assert r.headers["content-type"].startswith("application/openmetrics-text")
    assert r.text.endswith("# EOF\n")
    families = {f.name: f for f in om_parse(r.text)}  # the strict OpenMetrics parser accepts it
    assert "sglang:num_running_reqs" in families  # the colon survives
    assert families["sentinel_gpu_energy_joules"].type == "counter"


async def test_gzip_and_name_filter(collectors: CollectorSet, exporter_factory: Any) -> None:
    exporter = await exporter_factory(collectors)
    async with httpx.AsyncClient() as client:
        r = await client.get(exporter.url + "/metrics", headers={"Accept-Encoding": "gzip"})
    assert r.headers.get("content-encoding") == "gzip"
    assert "sentinel_build_info" in r.text
    r = await get(exporter.url + "/metrics", params=[("name[]", "sentinel_build_info")])
    assert [f.name for f in text_string_to_metric_families(r.text)] == ["sentinel_build_info"]


async def test_healthz_index_and_custom_routes(collectors: CollectorSet, exporter_factory: Any) -> None:
    async def status(request: web.Request) -> web.StreamResponse:
        return web.Response(text="status page")

    async def extra(request: web.Request) -> web.StreamResponse:
        return web.json_response({"state": "ready"})

    exporter = await exporter_factory(collectors, routes=[web.get("/status.json", extra)])
    assert (await get(exporter.url + "/healthz")).text == "ok\n"
    assert "/metrics" in (await get(exporter.url + "/")).text  # default landing page
    exporter.set_index(status)
    assert (await get(exporter.url + "/")).text == "status page"
    assert (await get(exporter.url + "/status.json")).json() == {"state": "ready"}
    assert (await get(exporter.url + "/nope")).status_code == 404


async def test_health_hook(collectors: CollectorSet, exporter_factory: Any) -> None:
    state = [True]
    exporter = await exporter_factory(
        collectors, health=lambda: (state[0], "ready" if state[0] else "server down")
    )
    assert (await get(exporter.url + "/healthz")).status_code == 200
    state[0] = False
    r = await get(exporter.url + "/healthz")
    assert (r.status_code, r.text) == (503, "server down\n")


async def test_render_error_is_a_500_not_a_dead_server(exporter_factory: Any) -> None:
    class Broken:
        def collect(self) -> Any:
            from prometheus_client.core import GaugeMetricFamily

            family = GaugeMetricFamily("broken_value", "x", labels=["a"])
            family.add_metric(["1"], "not a number")  # type: ignore[arg-type]
            yield family

    collectors = CollectorSet([("broken", Broken())])
    exporter = await exporter_factory(collectors)
    r = await get(exporter.url + "/metrics")
    assert r.status_code == 500
    assert (await get(exporter.url + "/healthz")).status_code == 200


async def test_too_many_concurrent_scrapes_get_503(exporter_factory: Any) -> None:
    import threading

    entered, gate = threading.Event(), threading.Event()

    class Slow:
        def collect(self) -> Any:
            entered.set()
            gate.wait(60)
            return iter(())

    collectors = CollectorSet([("slow", Slow())])
    exporter = await exporter_factory(collectors, settings=ExporterSettings(port=0, max_concurrent_scrapes=1))
    first = asyncio.ensure_future(get(exporter.url + "/metrics"))
    await until(entered.is_set, what="the first scrape collecting")  # it holds the one slot
    second = await get(exporter.url + "/metrics")
    gate.set()
    assert second.status_code == 503
    assert (await first).status_code == 200


def _users_file(tmp_path: Path, password: str = "s3cret") -> Path:
    hashed = bcrypt.hashpw(password.encode(), bcrypt.gensalt(4)).decode()
    path = tmp_path / "users"
    # htpasswd writes $2y$; accept it like Prometheus does.
    path.write_text(f"# scrapers\n\nprometheus:{hashed.replace('$2b$', '$2y$')}\n")
    return path


async def test_basic_auth(collectors: CollectorSet, exporter_factory: Any, tmp_path: Path) -> None:
    settings = ExporterSettings(port=0, basic_auth_users_file=_users_file(tmp_path))
    exporter = await exporter_factory(collectors, settings=settings)
    r = await get(exporter.url + "/metrics")
    assert r.status_code == 401
    assert r.headers["www-authenticate"] == 'Basic realm="sentinel"'
    assert (await get(exporter.url + "/metrics", auth=("prometheus", "wrong"))).status_code == 401
    assert (await get(exporter.url + "/metrics", auth=("nobody", "s3cret"))).status_code == 401
    assert (await get(exporter.url + "/", auth=("prometheus", "wrong"))).status_code == 401
    for _ in range(2):  # the second one comes from the cache
        assert (await get(exporter.url + "/metrics", auth=("prometheus", "s3cret"))).status_code == 200
    garbage = {"Authorization": "Basic " + base64.b64encode(b"no-colon").decode()}
    assert (await get(exporter.url + "/metrics", headers=garbage)).status_code == 401
    assert (await get(exporter.url + "/metrics", headers={"Authorization": "Basic !!!"})).status_code == 401
    assert (await get(exporter.url + "/healthz")).status_code == 200  # liveness stays open


def test_users_file_errors(tmp_path: Path) -> None:
    with pytest.raises(ExporterConfigError, match=r"not found|No such file"):
        load_users(tmp_path / "missing")
    bad = tmp_path / "bad"
    bad.write_text("prometheus:plaintext\n")
    with pytest.raises(ExporterConfigError, match="line 1: expected 'user:bcrypt-hash'"):
        load_users(bad)
    empty = tmp_path / "empty"
    empty.write_text("# nobody\n")
    with pytest.raises(ExporterConfigError, match="no users"):
        load_users(empty)


async def test_tls(collectors: CollectorSet, exporter_factory: Any, certificate: tuple[Path, Path]) -> None:
    cert, key = certificate
    settings = ExporterSettings(port=0, tls=TlsSettings(cert_file=cert, key_file=key))
    exporter = await exporter_factory(collectors, settings=settings)
    assert exporter.url.startswith("https://")
    ctx = ssl.create_default_context(cafile=str(cert))
    r = await get(exporter.url + "/metrics", verify=ctx)
    assert r.status_code == 200
    assert "sentinel_build_info" in r.text
    with pytest.raises(httpx.HTTPError):
        await get(exporter.url.replace("https", "http") + "/metrics")


async def test_mutual_tls_requires_a_client_certificate(
    collectors: CollectorSet, exporter_factory: Any, certificate: tuple[Path, Path]
) -> None:
    cert, key = certificate
    settings = ExporterSettings(port=0, tls=TlsSettings(cert_file=cert, key_file=key, client_ca_file=cert))
    exporter = await exporter_factory(collectors, settings=settings)
    without = ssl.create_default_context(cafile=str(cert))
    with pytest.raises(httpx.HTTPError):
        await get(exporter.url + "/metrics", verify=without)
    with_cert = ssl.create_default_context(cafile=str(cert))
    with_cert.load_cert_chain(cert, key)
    assert (await get(exporter.url + "/metrics", verify=with_cert)).status_code == 200


async def test_bad_tls_files_and_busy_port(
    collectors: CollectorSet, exporter_factory: Any, tmp_path: Path
) -> None:
    from sglang_sentinel.export import Exporter

    missing = ExporterSettings(
        port=0, tls=TlsSettings(cert_file=tmp_path / "c.pem", key_file=tmp_path / "k.pem")
    )
    with pytest.raises(ExporterConfigError, match=r"TLS: .*c\.pem"):
        await Exporter(collectors.registry(), missing).start()
    (tmp_path / "c.pem").write_text("not a certificate")
    (tmp_path / "k.pem").write_text("not a key")
    with pytest.raises(ExporterConfigError, match="cannot load certificate"):
        await Exporter(collectors.registry(), missing).start()
    first = await exporter_factory(collectors)
    busy = Exporter(collectors.registry(), ExporterSettings(port=first.port))
    with pytest.raises(ExporterConfigError, match=f"cannot listen on 127.0.0.1:{first.port}"):
        await busy.start()


async def test_a_collector_set_serves_directly(collectors: CollectorSet) -> None:
    from sglang_sentinel.export import Exporter

    exporter = Exporter(collectors, ExporterSettings(port=0))
    await exporter.start()
    try:
        r = await get(exporter.url + "/metrics")
        assert r.status_code == 200
        assert 'sentinel_collector_success{collector="gpu"} 1.0' in r.text
    finally:
        await exporter.stop()
    with pytest.raises(RuntimeError, match="not started"):
        _ = Exporter(collectors).url
