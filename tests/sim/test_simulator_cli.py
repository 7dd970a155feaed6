"""`sentinel sim` as a process: flags, ready file, signals, lifetime."""

from __future__ import annotations

import signal
import socket
import time

import httpx
import pytest

from sglang_sentinel.cli import main
from support.loopback import HTTP


def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    """Run the CLI in-process (a subprocess costs seconds of imports on a busy machine)."""
    code = main(["sim", *args])
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--speed", "0"), "--speed must be a positive number"),
        (("--fault", "meteor"), "unknown fault 'meteor'"),
        (("--fault", "stall:duration=soon"), "not a number"),
        (("--fault", "stall:duration"), "expected key=value"),
        (("--max-total-tokens", "0"), "--max-total-tokens must be at least 1"),
        (("--lifetime", "-1"), "--lifetime must be positive"),
        (("--capacity-scale", "0"), "--capacity-scale must be a positive number"),
        (("--capacity-scale", "nan"), "--capacity-scale must be a positive number"),
        (
            ("--sglang-version", "0.5.9", "--enable-hisparse"),
            "--enable-hisparse: unrecognized by SGLang 0.5.9 (0.5.10 – 0.5.23 have it)",
        ),
        (("--tp-size", "0"), "--tp-size must be at least 1"),
        (("--fault", "crash:text=meteor"), "text='meteor' must be one of"),
        (("--fault", "crash:text=died_init"), "needs phase=startup"),
        (("--fault", "crash:phase=startup,text=nan"), "is a serving crash"),
        (("--sglang-version", "0.5.9", "--fault", "nan_sanitized"), "has no SGLANG_SANITIZE_NAN_LOGITS"),
        (("--sglang-version", "0.5.13.post1", "--fault", "nan_sanitized"), "(from 0.5.14)"),
        (("--sglang-version", "0.5.9", "--fault", "crash:text=subprocess"), "not in 0.5.9"),
    ],
)
def test_bad_flags_are_one_line_errors(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    code, err = _main(capsys, *args)
    assert code == 2
    assert needle in err
    assert err.startswith("sentinel sim: ")
    assert len(err.strip().splitlines()) == 1


def test_unknown_profile_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sim", "--profile", "nope"])
    assert exc.value.code == 2


# Older than the oldest read, a .postN nobody published, newer than the newest read: not releases
# the daemon's table read, so the simulator cannot say what they do.
@pytest.mark.parametrize("version", ["0.5.8", "0.5.13.post2", "0.5.24"])
def test_unknown_sglang_version_is_a_usage_error(capsys: pytest.CaptureFixture[str], version: str) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["sim", "--sglang-version", version])
    assert exc.value.code == 2
    assert "0.5.9" in capsys.readouterr().err


def test_port_in_use_is_a_clean_error(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        code, err = _main(capsys, "--port", str(port), "--speed", "100", "--lifetime", "5")
    # as uvicorn: the port is bound after "loading weights", and the failure is exit status 1
    assert code == 1
    assert (
        f"[Errno 98] error while attempting to bind on address ('127.0.0.1', {port}): address already in use"
        in err
    )
    assert "Traceback" not in err


def test_a_control_port_in_use_is_named_as_such(capsys: pytest.CaptureFixture[str]) -> None:
    # The control API binds at start (the API port only after "loading weights"): its failure
    # names it, where "cannot bind <API port>" sent the reader (and sentinel's diagnosis) to the
    # wrong port.
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        control = busy.getsockname()[1]
        code, err = _main(capsys, "--port", "0", "--control-port", str(control), "--lifetime", "5")
    assert code == 1
    assert f"cannot bind the control API 127.0.0.1:{control}: " in err
    assert "address already in use" in err  # what sentinel's crash classifier reads as port_in_use
    assert "Traceback" not in err


def test_lifetime_ends_cleanly(sim_factory) -> None:  # type: ignore[no-untyped-def]
    sim = sim_factory("--lifetime", "0.5")
    assert sim.wait_exit(20) == 0
    assert "Simulator lifetime of 0.5 s reached" in sim.stderr_text()


def test_sigterm_drains_then_dies_like_sglang(sim_factory) -> None:  # type: ignore[no-untyped-def]
    sim = sim_factory("--speed", "50", "--api-key", "k")
    # the ready file names this process and its ports
    assert sim.info["pid"] == sim.pid
    assert sim.info["base_url"] == f"http://127.0.0.1:{sim.port}"
    assert sim.info["control_url"].startswith("http://127.0.0.1:")
    auth = {"Authorization": "Bearer k"}
    assert HTTP.get(sim.base_url + "/v1/models").status_code == 401
    body = {"text": "x", "sampling_params": {"max_new_tokens": 1000, "ignore_eos": True}, "stream": True}
    with httpx.Client(base_url=sim.base_url, timeout=30, headers=auth) as c:
        with c.stream("POST", "/generate", json=body) as resp:
            chunks = resp.iter_bytes()
            next(chunks)
            sim.process.send_signal(signal.SIGTERM)
            time.sleep(0.1)
            assert HTTP.get(sim.base_url + "/health", timeout=5).status_code == 503
            rest = b"".join(chunks)
        assert rest.endswith(b"data: [DONE]\n\n")  # the in-flight request finished
    assert sim.wait_exit(20) == -signal.SIGKILL
    log = sim.stderr_text()
    assert "Gracefully exiting... Remaining number of requests 1." in log
    assert "Health check request received during shutdown. Returning 503." in log
    out = sim.stdout_text()
    assert '"POST /generate HTTP/1.1" 200 OK' in out
    assert '"GET /v1/models HTTP/1.1" 401 Unauthorized' in out
