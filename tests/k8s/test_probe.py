"""The SGLang container's exec probe as rendered (files/probe.py from the chart's ConfigMap, the
command of the rendered probes), run against loopback stand-ins for sentinel and SGLang.

The case the probe design exists for: sentinel's sidecar crash-looping (its port closed, or a
process that accepts and never answers) must not fail SGLang's liveness while SGLang's own
/health passes; sentinel's confirmed verdict (503) must fail it whatever /health says.
"""

from __future__ import annotations

import shutil
import socket
import ssl
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("helm_python", reason="helm-python-sdk missing (tests/k8s/requirements.txt)")

from k8s import chart


class Stub:
    """An HTTP server on 127.0.0.1 answering every GET with ``status`` and ``body``."""

    def __init__(self, status: int, body: str, tls: tuple[Path, Path] | None = None) -> None:
        stub = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                stub.paths.append(self.path)
                data = (stub.body + "\n").encode()
                self.send_response(stub.status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args: Any) -> None:
                pass

        self.status, self.body = status, body
        self.paths: list[str] = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        if tls is not None:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
            self.server.socket = context.wrap_socket(self.server.socket, server_side=True)
        self.port = int(self.server.server_address[1])
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def closed_port() -> int:
    """A port nobody listens on (a crash-looping sidecar between two restarts)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture
def stubs() -> Iterator[list[Stub]]:
    made: list[Stub] = []
    yield made
    for stub in made:
        stub.close()


def rendered_probes(
    sentinel_port: int, sglang_port: int, tmp_path: Path, *, tls: bool = False
) -> dict[str, list[str]]:
    """probe name -> command, with the script written where the command expects it (re-rooted)."""
    exporter: dict[str, Any] = {"port": sentinel_port}
    if tls:
        exporter["tls"] = {"secretName": "sentinel-tls"}
    values = {"exporter": exporter, "sglang": {"port": sglang_port}}
    objects = chart.render(values)
    (config,) = [o for o in objects if o["kind"] == "ConfigMap" and "probe.py" in o["data"]]
    script = tmp_path / "probe.py"
    script.write_text(config["data"]["probe.py"], encoding="utf-8")
    (deployment,) = [o for o in objects if o["kind"] == "Deployment"]
    (sglang,) = [c for c in deployment["spec"]["template"]["spec"]["containers"] if c["name"] == "sglang"]
    out = {}
    for name in ("startupProbe", "livenessProbe", "readinessProbe"):
        command = list(sglang[name]["exec"]["command"])
        assert command[0] == "python3"
        assert command[1] == "/etc/sentinel-probe/probe.py"
        out[name] = [sys.executable, str(script), *command[2:]]
        out[name + ".timeout"] = [str(sglang[name]["timeoutSeconds"])]
    return out


def run(command: list[str], timeout: float) -> tuple[int, str, float]:
    start = time.monotonic()
    proc = subprocess.run(command, capture_output=True, text=True, timeout=timeout + 30)
    return proc.returncode, proc.stdout.strip(), time.monotonic() - start


def test_a_crash_looping_sidecar_does_not_restart_a_healthy_sglang(stubs: list[Stub], tmp_path: Path) -> None:
    sglang = Stub(200, "")
    stubs.append(sglang)
    probes = rendered_probes(closed_port(), sglang.port, tmp_path)
    for name in ("livenessProbe", "readinessProbe", "startupProbe"):
        code, out, _ = run(probes[name], 60)
        assert code == 0, (name, out)
        assert "sentinel unreachable" in out
        assert "SGLang /health: 200" in out
    assert sglang.paths == ["/health"] * 3


def test_with_sentinel_down_a_failing_sglang_still_fails(stubs: list[Stub], tmp_path: Path) -> None:
    sglang = Stub(503, "")
    stubs.append(sglang)
    probes = rendered_probes(closed_port(), sglang.port, tmp_path)
    code, out, _ = run(probes["livenessProbe"], 60)
    assert code == 1, out
    assert "SGLang /health: 503" in out
    # Nobody at all (SGLang's process gone too): fails, not a traceback.
    probes = rendered_probes(closed_port(), closed_port(), tmp_path)
    code, out, _ = run(probes["livenessProbe"], 60)
    assert code == 1, out
    assert "SGLang /health: ConnectionRefusedError" in out


def test_sentinels_verdict_decides_while_it_answers(stubs: list[Stub], tmp_path: Path) -> None:
    sglang = Stub(200, "")
    failed = Stub(503, "failed: canary_arithmetic garbage_repeated (3 in a row)")
    stubs += [sglang, failed]
    probes = rendered_probes(failed.port, sglang.port, tmp_path)
    code, out, _ = run(probes["livenessProbe"], 60)
    assert (code, out) == (1, "sentinel 503: failed: canary_arithmetic garbage_repeated (3 in a row)")
    assert failed.paths == ["/verdict"]
    assert sglang.paths == []  # a confirmed failure is not second-guessed by /health
    code, _, _ = run(probes["readinessProbe"], 60)
    assert code == 1
    assert failed.paths[-1] == "/verdict?ready"
    ok = Stub(200, "unsure: server starting")
    stubs.append(ok)
    probes = rendered_probes(ok.port, sglang.port, tmp_path)
    assert run(probes["livenessProbe"], 60)[:2] == (0, "sentinel 200: unsure: server starting")


@pytest.mark.slow
def test_a_hung_sidecar_falls_back_within_the_probe_timeout(tmp_path: Path, stubs: list[Stub]) -> None:
    """A sidecar that accepts connections and never answers (a wedged event loop)."""
    sglang = Stub(200, "")
    stubs.append(sglang)
    hung = socket.socket()
    hung.bind(("127.0.0.1", 0))
    hung.listen(8)
    try:
        probes = rendered_probes(int(hung.getsockname()[1]), sglang.port, tmp_path)
        timeout = float(probes["livenessProbe.timeout"][0])
        code, out, took = run(probes["livenessProbe"], timeout)
        assert code == 0, out
        assert "sentinel unreachable (TimeoutError)" in out
        # The kubelet kills an exec probe at timeoutSeconds and counts a failure: the fallback
        # must have answered well before.
        assert took < timeout
    finally:
        hung.close()


@pytest.mark.skipif(shutil.which("openssl") is None, reason="openssl not installed")
def test_an_https_sidecar_is_asked_over_https(tmp_path: Path, stubs: list[Stub]) -> None:
    """exporter.tls: the probe speaks HTTPS to a certificate that names the Service, not 127.0.0.1."""
    cert, key = tmp_path / "tls.crt", tmp_path / "tls.key"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj",
         "/CN=sentinel-sglang-sentinel.sentinel.svc", "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    sentinel = Stub(503, "failed: stall stalled (3 in a row)", tls=(cert, key))
    stubs.append(sentinel)
    probes = rendered_probes(sentinel.port, closed_port(), tmp_path, tls=True)
    assert probes["livenessProbe"][3] == "https"
    assert run(probes["livenessProbe"], 60)[:2] == (1, "sentinel 503: failed: stall stalled (3 in a row)")


def test_bad_arguments_exit_2_with_usage(tmp_path: Path) -> None:
    probes = rendered_probes(closed_port(), closed_port(), tmp_path)
    proc = subprocess.run([*probes["livenessProbe"][:2], "alive"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert proc.stdout.startswith("usage: probe.py")
