"""The exporter's HTTP server (aiohttp): ``/metrics``, ``/healthz`` and a pluggable ``/``.

``/metrics`` renders the registry in a thread pool, never in the event loop: collectors may wait
on SGLang (bounded by its timeout) and rendering a few hundred series takes milliseconds, which
the daemon's loop (supervisor checks, load generation, watchdog pings) must not lose. The format
follows the Accept header — OpenMetrics when asked for (Prometheus asks by default), else the
text format 0.0.4 — via prometheus_client's own negotiation; gzip when accepted; ``name[]``
query parameters filter families as prometheus_client's own servers do.
"""

from __future__ import annotations

import asyncio
import gzip
import html
import math
from collections.abc import Awaitable, Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

from aiohttp import web
from prometheus_client.exposition import choose_encoder
from prometheus_client.metrics_core import Metric
from prometheus_client.registry import Collector

import sglang_sentinel
from sglang_sentinel.collect.render import Format, render
from sglang_sentinel.export.auth import AuthVerdict, BasicAuth, ExporterConfigError, load_users, tls_context
from sglang_sentinel.export.settings import ExporterSettings
from sglang_sentinel.log import get_logger

__all__ = ["Exporter", "ExporterConfigError", "Handler", "HealthCheck"]

_log = get_logger(__name__)

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# Returns (healthy, short text); /healthz answers 200 or 503 with the text.
HealthCheck = Callable[[], tuple[bool, str]]

# /verdict: the orchestrator's liveness probe of the SGLang container (sglang_sentinel/verdict.py).
_UNAUTHENTICATED = frozenset({"/healthz", "/verdict"})
# Seconds before Prometheus' own scrape timeout at which /metrics stops waiting and answers 503.
_SCRAPE_MARGIN_S = 0.5


def _loopback(remote: str | None) -> bool:
    import ipaddress

    if not remote:
        return False
    try:
        address = ipaddress.ip_address(remote)
    except ValueError:
        return False
    mapped = getattr(address, "ipv4_mapped", None)  # ::ffff:127.0.0.1 on a dual-stack socket
    return bool(address.is_loopback or (mapped is not None and mapped.is_loopback))


class _Only:
    """``?name[]=`` filtering. CollectorRegistry.restricted_registry relies on describe(), which
    our collectors leave empty (describing would mean collecting, i.e. fetching from SGLang)."""

    def __init__(self, registry: Collector, names: frozenset[str]) -> None:
        self._registry = registry
        self._names = names

    def collect(self) -> Iterator[Metric]:
        for metric in self._registry.collect():
            if metric.name in self._names or any(s.name in self._names for s in metric.samples):
                yield metric


class Exporter:
    """Serves ``registry`` over HTTP(S). Async ``start()``/``stop()``; usable on its own.

    ``registry`` is anything with ``collect()``: a ``CollectorRegistry``, or a ``CollectorSet``
    directly (no ``python_``/platform default collectors either way; the set serves the daemon's
    ``process_*`` series itself).

    ``index`` replaces the default landing page at ``/`` (the daemon's status page);
    ``routes`` adds more (e.g. a JSON status endpoint). With ``port = 0`` the OS picks a free
    port: read :attr:`port` after ``start()``.
    """

    def __init__(
        self,
        registry: Collector,
        settings: ExporterSettings | None = None,
        *,
        index: Handler | None = None,
        health: HealthCheck | None = None,
        routes: Iterable[web.RouteDef] = (),
        reset: Handler | None = None,
        own_auth_prefixes: tuple[str, ...] = (),
    ) -> None:
        """``own_auth_prefixes``: paths whose routes check their own credentials (the group's peer
        API, bearer token): basic auth, meant for scrapers, neither covers nor blocks them."""
        self.registry = registry
        self._reset = reset
        self.settings = settings or ExporterSettings()
        self._index = index
        self._health = health
        self._routes = list(routes)
        self._own_auth = own_auth_prefixes
        self._runner: web.AppRunner | None = None
        self._executor: ThreadPoolExecutor | None = None
        self._auth: BasicAuth | None = None
        self._inflight = 0
        self.port: int | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise RuntimeError("exporter not started")
        scheme = "https" if self.settings.tls is not None else "http"
        host = self.settings.host
        if ":" in host:
            host = f"[{host}]"
        return f"{scheme}://{host}:{self.port}"

    def set_index(self, handler: Handler) -> None:
        """Replace the ``/`` page (also after start)."""
        self._index = handler

    async def start(self) -> None:
        """Bind and serve. Raises ExporterConfigError for unusable TLS/auth files or a busy port."""
        s = self.settings
        ssl_context = tls_context(s.tls) if s.tls is not None else None
        if s.basic_auth_users_file is not None:
            self._auth = BasicAuth(load_users(s.basic_auth_users_file), scraper_addresses=s.scraper_addresses)
        app = web.Application(middlewares=[self._auth_middleware])
        app.router.add_get("/metrics", self._metrics)
        app.router.add_get("/healthz", self._healthz)
        app.router.add_get("/", self._root)
        app.router.add_routes(self._routes)
        if self._reset is not None:
            app.router.add_post("/reset", self._reset_guarded)
        self._executor = ThreadPoolExecutor(
            max_workers=s.max_concurrent_scrapes, thread_name_prefix="sentinel-scrape"
        )
        # No access log: Prometheus scrapes every few seconds; one line each would drown the journal.
        runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await runner.setup()
        site = web.TCPSite(runner, s.host, s.port, ssl_context=ssl_context, reuse_address=True)
        try:
            await site.start()
        except OSError as exc:
            await runner.cleanup()
            self._executor.shutdown(wait=False)
            raise ExporterConfigError(
                f"exporter cannot listen on {s.host}:{s.port}: {exc.strerror or exc}"
            ) from None
        self._runner = runner
        self.port = int(runner.addresses[0][1])
        _log.info(
            "exporter_listening", url=self.url, tls=ssl_context is not None, auth=self._auth is not None
        )

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self._executor is not None:
            self._executor.shutdown(wait=False, cancel_futures=True)
            self._executor = None
        if self._auth is not None:
            self._auth.close()

    @web.middleware
    async def _auth_middleware(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        # /healthz and /verdict stay open: a liveness probe must not need the scrape credentials,
        # and they reveal nothing but "ok" or a probe name and reason.
        own = self._own_auth and request.path.startswith(self._own_auth)
        if self._auth is not None and request.path not in _UNAUTHENTICATED and not own:
            # bcrypt runs in the auth checker's own pool (auth.py), never in self._executor: a
            # flood of bad passwords must not take the threads that render /metrics.
            verdict = await self._auth.verdict(request.headers.get("Authorization"), request.remote or "")
            if verdict is AuthVerdict.LIMITED:
                return web.Response(status=429, text="Too many failed logins\n", headers={"Retry-After": "1"})
            if verdict is not AuthVerdict.OK:
                return web.Response(
                    status=401, text="Unauthorized\n", headers={"WWW-Authenticate": 'Basic realm="sentinel"'}
                )
        return await handler(request)

    def _render(self, accept: str, names: list[str], gzipped: bool) -> tuple[bytes, str]:
        _, content_type = choose_encoder(accept)
        registry: Collector = _Only(self.registry, frozenset(names)) if names else self.registry
        # Our renderer, not `encoder`: it caches each family's rendering (render.py), and it renders
        # OpenMetrics without prometheus_client 0.26's "underscores" escaping, which keeps the
        # colon of ``sglang:x`` in HELP/TYPE but turns it into ``sglang_x`` on sample lines
        # (prometheus/client_python#1177, open) — Prometheus, which asks for OpenMetrics by
        # default, would see orphaned metadata and untyped series. Every name we serve is a valid
        # classic name, which no escaping scheme changes, so this is what a correct rendering is.
        fmt: Format = "openmetrics" if content_type.startswith("application/openmetrics-text") else "text"
        body = render(registry, fmt)
        if gzipped:
            # Prometheus always asks for gzip. Level 1, in this worker thread: ~8× smaller for
            # exposition text at a fraction of the default level's cost (aiohttp's own
            # compression would use the default level and another executor hop).
            body = gzip.compress(body, compresslevel=1, mtime=0)
        return body, content_type

    def _deadline(self, request: web.Request) -> float:
        """This scrape's deadline: ours, or Prometheus' scrape timeout less a margin when shorter."""
        deadline = self.settings.scrape_timeout_seconds
        try:
            theirs = float(request.headers.get("X-Prometheus-Scrape-Timeout-Seconds", ""))
        except ValueError:
            return deadline
        if theirs > 0 and math.isfinite(theirs):
            # Answer a little before Prometheus gives up, so that the 503 (and its reason) arrives.
            deadline = min(deadline, max(theirs - _SCRAPE_MARGIN_S, theirs / 2))
        return deadline

    async def _metrics(self, request: web.Request) -> web.StreamResponse:
        if self._inflight >= self.settings.max_concurrent_scrapes:
            return web.Response(status=503, text="too many concurrent scrapes\n")
        loop = asyncio.get_running_loop()
        self._inflight += 1
        gzipped = "gzip" in request.headers.get("Accept-Encoding", "")
        future = loop.run_in_executor(
            self._executor,
            self._render,
            request.headers.get("Accept", ""),
            request.query.getall("name[]", []),
            gzipped,
        )

        # A worker counts as in flight until its render really ends, not when this scrape stops
        # waiting for it: the limit says how many threads are busy.
        def done(_: asyncio.Future[tuple[bytes, str]]) -> None:
            self._inflight -= 1

        future.add_done_callback(done)
        deadline = self._deadline(request)
        try:
            body, content_type = await asyncio.wait_for(asyncio.shield(future), deadline)
        except TimeoutError:
            _log.warning("metrics_render_timeout", deadline_s=deadline)
            return web.Response(
                status=503, text=f"collecting metrics took longer than {deadline:g} s; see the daemon log\n"
            )
        except Exception:
            _log.exception("metrics_render_failed")
            return web.Response(status=500, text="rendering metrics failed; see the daemon log\n")
        headers = {"Content-Type": content_type}
        if gzipped:
            headers["Content-Encoding"] = "gzip"
        return web.Response(body=body, headers=headers)

    async def _reset_guarded(self, request: web.Request) -> web.StreamResponse:
        """``POST /reset``, the one path that changes something (the operator's reset).

        POST only (aiohttp answers 405 to anything else): a crawler or a prefetching browser must
        not restart a server. With basic auth configured the middleware has already required it
        (it covers every path but /healthz). Without auth, only loopback clients may reset: the
        read-only pages are harmless to expose, an action is not.
        """
        assert self._reset is not None
        if self._auth is None and not _loopback(request.remote):
            return web.Response(
                status=403,
                text="reset is allowed from loopback only unless [exporter] basic_auth_users_file is set\n",
            )
        return await self._reset(request)

    async def _healthz(self, request: web.Request) -> web.StreamResponse:
        if self._health is None:
            return web.Response(text="ok\n")
        healthy, text = self._health()
        return web.Response(status=200 if healthy else 503, text=text.rstrip("\n") + "\n")

    async def _root(self, request: web.Request) -> web.StreamResponse:
        if self._index is not None:
            return await self._index(request)
        version = html.escape(sglang_sentinel.__version__)
        page = (
            "<!doctype html><html><head><meta charset='utf-8'><title>sentinel</title></head><body>"
            f"<h1>sglang-sentinel {version}</h1><ul>"
            "<li><a href='metrics'>/metrics</a> — Prometheus metrics</li>"
            "<li><a href='healthz'>/healthz</a> — liveness</li>"
            "</ul></body></html>\n"
        )
        return web.Response(text=page, content_type="text/html")
