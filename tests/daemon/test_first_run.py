"""A first ``sentinel run`` with no configuration, on a host without NVIDIA GPUs: no false alarm.

No config file: only what a test must change to run beside others (state directory, ports) and
the simulator's clock (``--speed``, simulated time) come from the environment. The server
becomes ready, ``sentinel status`` exits 0, the status page shows nothing red (the GPU collector
is *not applicable*: the simulator needs no GPU), and the first calibration finds a measured
ceiling, not a lower bound.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from support.daemon_proc import DaemonProcess, free_port
from support.loopback import HTTP


def _no_gpu_here() -> bool:
    import pynvml

    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        return True
    pynvml.nvmlShutdown()
    return False


@pytest.mark.skipif(not _no_gpu_here(), reason="this host has an NVIDIA driver")
@pytest.mark.slow(seconds=75)
def test_first_run_without_configuration_shows_no_false_alarm(
    tmp_path: Path, daemons: list[DaemonProcess]
) -> None:
    port = free_port()
    env = {
        "SENTINEL_STATE_DIR": str(tmp_path / "state"),
        "SENTINEL_EXPORTER__PORT": str(port),
        "SENTINEL_SERVER__PORT": str(free_port()),
        # The built-in "sim" profile, extended only by its clock: 10x simulated time (the first
        # calibration climbs to 256 streams: at 20x their tokens came faster than a starved client
        # on a busy box could read them, and an honest "client-bound" left the capacity unset).
        "SENTINEL_SERVER__PROFILES__SIM__EXTRA_ARGS": '["--speed", "10"]',
    }
    config = tmp_path / "empty.toml"  # DaemonProcess passes --config: an empty file, the defaults
    config.write_text("")
    d = DaemonProcess(config, port, tmp_path / "daemon.log", env=env)
    daemons.append(d)
    d.wait_ready(120)
    d.wait(
        "every probe and collector settled",
        lambda: (
            all(p.get("success") is True for p in d.status()["probes"])
            and all(c.get("state") is not None for c in d.status()["collectors"])
        ),
        120,
    )
    status = subprocess.run(
        [sys.executable, "-m", "sglang_sentinel", "status", "--url", d.url],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert status.returncode == 0, status.stdout + status.stderr
    assert "sentinel: healthy" in status.stdout
    assert "collector   n/a  gpu: no NVIDIA GPU" in status.stdout
    doc = d.status()
    gpu = next(c for c in doc["collectors"] if c["name"] == "gpu")
    assert gpu["state"] == "not_applicable", gpu
    m = d.metrics()
    assert d.value(m, "sentinel_collector_state", collector="gpu", state="not_applicable") == 1
    assert d.value(m, "sentinel_collector_success", collector="gpu") is None
    page = HTTP.get(d.url + "/", timeout=10).text
    assert not re.search(r'class="badge bad"', page), page
    assert "not applicable" in page

    d.wait("the first calibration", lambda: bool(d.status()["capacity"]), 400)
    capacity = d.status()["capacity"]
    assert capacity.get("bound") != "lower", capacity
    assert "raise max_concurrency" not in d.text()
    page = HTTP.get(d.url + "/", timeout=10).text
    assert "lower bound" not in page
    assert not re.search(r'class="badge bad"', page)
