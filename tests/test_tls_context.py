"""One verifying TLS context per process for every httpx client sentinel makes (httpread.tls_context):
the same verdicts as the context httpx builds per client, SSL_CERT_FILE honoured only by clients
that trust the environment, against a real TLS server on loopback with its own certificate."""

from __future__ import annotations

import ast
import asyncio
import ssl
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import httpx
import pytest

from sglang_sentinel.httpread import tls_context


@pytest.fixture
def fresh_contexts() -> Iterator[None]:
    """The contexts are made once per process: these tests make their own and leave none behind."""
    tls_context.cache_clear()
    yield
    tls_context.cache_clear()


@pytest.fixture
async def https_url(certificate: tuple[Path, Path]) -> AsyncIterator[str]:
    cert, key = certificate
    server_ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    server_ctx.load_cert_chain(cert, key)

    async def answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nConnection: close\r\n\r\nok")
            await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError, ssl.SSLError):
            pass  # a client that refused our certificate hung up during the handshake
        finally:
            writer.close()

    server = await asyncio.start_server(answer, "127.0.0.1", 0, ssl=server_ctx)
    port = server.sockets[0].getsockname()[1]
    try:
        yield f"https://127.0.0.1:{port}/"
    finally:
        server.close()
        await server.wait_closed()


async def _get(url: str, ctx: ssl.SSLContext, *, trust_env: bool) -> int:
    async with httpx.AsyncClient(verify=ctx, trust_env=trust_env) as client:
        return (await client.get(url, timeout=30)).status_code


async def test_one_context_per_process_that_verifies(fresh_contexts: None, https_url: str) -> None:
    assert tls_context() is tls_context()
    assert tls_context(trust_env=False) is tls_context(trust_env=False)
    for ctx in (tls_context(), tls_context(trust_env=False)):
        assert ctx.verify_mode is ssl.CERT_REQUIRED
        assert ctx.check_hostname
        # A certificate no CA of the bundle signed is refused, as by the context httpx makes itself.
        with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
            await _get(https_url, ctx, trust_env=False)


async def test_ssl_cert_file_is_trusted_by_clients_that_trust_the_environment_only(
    fresh_contexts: None, https_url: str, certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))
    assert await _get(https_url, tls_context(), trust_env=True) == 200
    with pytest.raises(httpx.ConnectError, match="CERTIFICATE_VERIFY_FAILED"):
        await _get(https_url, tls_context(trust_env=False), trust_env=False)


def test_every_httpx_client_sentinel_makes_uses_the_shared_context() -> None:
    # A new client without `verify=` would load the CA bundle again (per scrape, per probe round).
    root = Path(__file__).resolve().parents[1] / "daemon" / "sglang_sentinel"
    missing = []
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in ("AsyncClient", "Client")
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id == "httpx"
                and not any(k.arg == "verify" for k in node.keywords)
            ):
                missing.append(f"{path.relative_to(root)}:{node.lineno}")
    assert not missing, f"httpx clients without verify=tls_context(...): {missing}"
