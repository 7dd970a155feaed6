"""SGLang's /metrics re-exposed: real payloads pass through unchanged; failures never serve stale data."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.collect import CollectorSet, SGLangMetricsCollector
from sglang_sentinel.collect.sglang_metrics import default_metrics_url
from sglang_sentinel.collect.source import CollectionFailed

SAMPLES = Path(__file__).resolve().parent / "samples"
URL = "http://127.0.0.1:30000/metrics"


def payload(name: str = "sglang-metrics-pr4444.txt") -> str:
    return (SAMPLES / name).read_text()


def collector(handler: Callable[[httpx.Request], httpx.Response], **kw: float) -> SGLangMetricsCollector:
    return SGLangMetricsCollector(URL, transport=httpx.MockTransport(handler), **kw)  # type: ignore[arg-type]


def collect(c: SGLangMetricsCollector) -> tuple[dict[str, float], str | None]:
    samples: dict[str, float] = {}
    failure = None
    try:
        for m in c.collect():
            for s in m.samples:
                samples[s.name + str(sorted(s.labels.items()))] = s.value
    except CollectionFailed as exc:
        failure = str(exc)
    return samples, failure


def sglang_names(samples: dict[str, float]) -> set[str]:
    return {k.split("[")[0] for k in samples if k.startswith("sglang")}


@pytest.mark.parametrize("sample", sorted(p.name for p in SAMPLES.glob("sglang-metrics-*.txt")))
def test_real_payloads_round_trip(sample: str) -> None:
    text = payload(sample)
    c = collector(lambda r: httpx.Response(200, text=text))
    set_ = CollectorSet([("sglang", c)])
    out = generate_latest(set_.registry()).decode()
    original = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
    }
    served = {
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in text_string_to_metric_families(out)
        if f.name.startswith("sglang")
        for s in f.samples
    }
    assert served == original
    assert 'sentinel_collector_success{collector="sglang"} 1.0' in out


def test_names_keep_the_colon_and_types() -> None:
    c = collector(lambda r: httpx.Response(200, text=payload("sglang-metrics-docs-production-metrics.txt")))
    families = {m.name: m.type for m in c.collect() if m.name.startswith("sglang")}
    assert families["sglang:prompt_tokens"] == "counter"
    assert families["sglang:time_to_first_token_seconds"] == "histogram"
    assert families["sglang:token_usage"] == "gauge"


def test_down_serves_nothing_stale_and_counts() -> None:
    up = [True]

    def handler(request: httpx.Request) -> httpx.Response:
        if not up[0]:
            raise httpx.ConnectError("Connection refused", request=request)
        return httpx.Response(200, text=payload())

    c = collector(handler)
    samples, failure = collect(c)
    assert failure is None
    assert "sglang:num_running_reqs" in sglang_names(samples)
    first_success = c.last_success_timestamp()
    up[0] = False
    samples, failure = collect(c)
    assert failure is not None
    assert "Connection refused" in failure
    assert not sglang_names(samples)  # nothing stale
    assert samples["sentinel_sglang_metrics_fetch_failures_total[('reason', 'connect')]"] == 1
    assert c.last_success_timestamp() == first_success


def test_garbage_html_is_a_parse_failure() -> None:
    c = collector(lambda r: httpx.Response(200, text="<html><body>502 Bad Gateway</body></html>"))
    samples, failure = collect(c)
    assert failure is not None
    assert "not the Prometheus text format" in failure
    assert samples["sentinel_sglang_metrics_fetch_failures_total[('reason', 'parse')]"] == 1
    assert not sglang_names(samples)


@pytest.mark.parametrize(
    "body",
    [
        b"\xff\xfe\x00garbage",  # not UTF-8
        b'sglang:num_running_reqs{model_name="m"} not-a-number\n',
        b'sglang:num_running_reqs{model_name="m" 1\n',  # unterminated labels
        payload().encode()[: len(payload()) // 2] + b"{{{\n",  # truncated mid-line
    ],
)
def test_garbage_bodies_fail_cleanly(body: bytes) -> None:
    c = collector(lambda r: httpx.Response(200, content=body))
    samples, failure = collect(c)
    assert failure is not None
    assert not sglang_names(samples)


def test_empty_and_foreign_payloads() -> None:
    c = collector(lambda r: httpx.Response(200, text=""))
    _, failure = collect(c)
    assert failure is not None
    assert "no sglang metrics" in failure
    # The URL pointing at something else (sentinel itself, node_exporter): nothing re-exposed.
    c = collector(
        lambda r: httpx.Response(200, text="# TYPE sentinel_x gauge\nsentinel_x 1\nprocess_open_fds 3\n")
    )
    samples, failure = collect(c)
    assert failure is not None
    assert not any(k.startswith(("sentinel_x", "process_")) for k in samples)


def test_foreign_families_are_dropped_and_counted() -> None:
    text = payload() + "# TYPE process_open_fds gauge\nprocess_open_fds 12\n"
    c = collector(lambda r: httpx.Response(200, text=text))
    samples, failure = collect(c)
    assert failure is None
    assert samples["sentinel_sglang_metrics_dropped_families[]"] == 1
    assert not any(k.startswith("process_") for k in samples)


def test_http_errors_name_the_status() -> None:
    c = collector(lambda r: httpx.Response(404, text="Not Found"))
    samples, failure = collect(c)
    assert failure is not None
    assert "HTTP 404" in failure
    assert "--enable-metrics" in failure
    assert samples["sentinel_sglang_metrics_fetch_failures_total[('reason', 'http_status')]"] == 1
    c = collector(lambda r: httpx.Response(503, text="overloaded"))
    _, failure = collect(c)
    assert failure is not None
    assert "HTTP 503" in failure


def test_oversized_response_is_refused() -> None:
    c = collector(lambda r: httpx.Response(200, text=payload() * 50), max_bytes=4096)
    samples, failure = collect(c)
    assert failure is not None
    assert "over 4096 bytes" in failure
    assert not sglang_names(samples)


def test_timeout_from_transport() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    _, failure = collect(collector(handler))
    assert failure is not None
    assert "no complete reply within" in failure


@pytest.fixture
def slow_server() -> Iterator[tuple[str, list[float]]]:
    """A real loopback server whose delay (seconds, before the body) the test sets."""
    delay = [0.0]
    body = payload().encode()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            time.sleep(delay[0])
            self.send_response(200)
            self.send_header("Content-Type", "text/plain; version=0.0.4")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/metrics", delay
    server.shutdown()
    server.server_close()


def test_slow_server_is_cut_at_the_deadline(slow_server: tuple[str, list[float]]) -> None:
    url, delay = slow_server
    c = SGLangMetricsCollector(url, timeout=0.3)
    try:
        samples, failure = collect(c)
        assert failure is None
        assert sglang_names(samples)
        delay[0] = 30.0
        started = time.monotonic()
        samples, failure = collect(c)
        took = time.monotonic() - started
        assert failure is not None
        assert "no complete reply within 0.3 s" in failure
        assert took < 10  # cut at the deadline, not the server's 30 s (margin for a busy box)
        assert not sglang_names(samples)
        # The next scrape reads at once: the stalled reply (still sleeping in its thread) holds nothing.
        delay[0] = 0.0
        samples, failure = collect(c)
        assert failure is None
        assert sglang_names(samples)
    finally:
        c.close()


def test_default_url() -> None:
    assert default_metrics_url("127.0.0.1", 30000) == "http://127.0.0.1:30000/metrics"
    assert default_metrics_url("::1", 30000) == "http://[::1]:30000/metrics"
