"""The load engine's auxiliary reads are bounded: a hostile /v1/models cannot fill the client's memory."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from sglang_sentinel.load import LoadSpec, RandomDataset
from sglang_sentinel.load.session import MODELS_MAX_BYTES, make_session, resolve_model


@pytest.fixture
async def models_server() -> AsyncIterator[tuple[str, dict[str, web.StreamResponse | bytes]]]:
    """A loopback server whose /v1/models answers what the test puts in ``replies["body"]``."""
    replies: dict[str, web.StreamResponse | bytes] = {}

    async def models(request: web.Request) -> web.StreamResponse:
        body = replies["body"]
        assert isinstance(body, bytes)
        if replies.get("chunked"):
            resp = web.StreamResponse()
            await resp.prepare(request)
            for i in range(0, len(body), 65536):
                await resp.write(body[i : i + 65536])
            await resp.write_eof()
            return resp
        return web.Response(body=body, content_type="application/json")

    app = web.Application()
    app.router.add_get("/v1/models", models)
    app.router.add_get("/server_info", models)  # the same body: read_capped serves both readers
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        yield f"http://127.0.0.1:{port}", replies
    finally:
        await runner.cleanup()


def _spec(url: str) -> LoadSpec:
    return LoadSpec(base_url=url, dataset=RandomDataset(8, 8, 1.0), num_requests=1)


async def test_model_id_from_the_server(
    models_server: tuple[str, dict[str, web.StreamResponse | bytes]],
) -> None:
    url, replies = models_server
    replies["body"] = b'{"object": "list", "data": [{"id": "glm-5", "object": "model"}]}'
    async with make_session(_spec(url)) as session:
        assert await resolve_model(session, _spec(url)) == ("glm-5", None)


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
async def test_an_oversized_model_list_is_refused_not_buffered(
    models_server: tuple[str, dict[str, web.StreamResponse | bytes]], chunked: bool
) -> None:
    url, replies = models_server
    pad = b" " * (4 * MODELS_MAX_BYTES)
    replies["body"] = b'{"data": [{"id": "glm-5"}], "pad": "' + pad + b'"}'
    if chunked:
        replies["chunked"] = b"1"
    async with make_session(_spec(url)) as session:
        model, note = await resolve_model(session, _spec(url))
    assert model == "default"
    assert note is not None
    assert "ValueError" in note


@pytest.mark.parametrize("oversized", [False, True], ids=["small", "oversized"])
async def test_bench_server_info_is_read_under_the_same_cap(
    models_server: tuple[str, dict[str, web.StreamResponse | bytes]], oversized: bool
) -> None:
    from sglang_sentinel.load import compute_metrics
    from sglang_sentinel.load.bench import SERVER_INFO_MAX_BYTES, record_server_info
    from sglang_sentinel.load.result import RunResult

    url, replies = models_server
    pad = b" " * (SERVER_INFO_MAX_BYTES + 1 if oversized else 10)
    replies["body"] = b'{"version": "0.5.23", "pad": "' + pad + b'"}'
    replies["chunked"] = b"1"  # no Content-Length: the cap must hold while reading
    result = RunResult(_spec(url), compute_metrics([], duration=1.0), [], started_at=0.0)
    async with make_session(_spec(url)) as session:
        await record_server_info(session, _spec(url), result)
    if oversized:
        assert result.server_info is None  # refused, not buffered whole
    else:
        assert result.server_info is not None
        assert result.server_info["version"] == "0.5.23"
