"""The flagship (sglang) profile end to end in child mode, against a fake ``sglang`` package.

Covers what the simulator cannot: version detection through the profile's interpreter, the
``--nsa-*`` / ``--dsa-*`` rendering actually reaching the process, GPU preflight through the
injectable reader, and re-rendering when SGLang is upgraded between two lives.
"""

from __future__ import annotations

import os
import stat
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry

from sglang_sentinel.sglang.versions import Version
from sglang_sentinel.supervise import GpuInfo, ServerState, Supervisor
from sglang_sentinel.supervise.settings import ServerSettings

pytestmark = [pytest.mark.usefixtures("no_leaked_children")]

FAKE_SGLANG = Path(__file__).with_name("fake_sglang")
RTX_TOTAL = 97887 * (1 << 20)


def eight_gpus() -> list[GpuInfo]:
    return [GpuInfo(i, "NVIDIA RTX PRO 6000", RTX_TOTAL, RTX_TOTAL - (1 << 29), (12, 0)) for i in range(8)]


@pytest.fixture
def python_with_fake_sglang(tmp_path: Path) -> tuple[Path, Path]:
    version = tmp_path / "version"
    version.write_text("0.5.9")
    wrapper = tmp_path / "python"
    wrapper.write_text(
        "#!/bin/sh\n"
        f"export PYTHONPATH='{FAKE_SGLANG}'\n"
        f"export FAKE_SGLANG_VERSION_FILE='{version}'\n"
        f"exec '{sys.executable}' \"$@\"\n"
    )
    wrapper.chmod(wrapper.stat().st_mode | stat.S_IEXEC)
    return wrapper, version


async def test_flags_follow_the_installed_version_across_an_upgrade(
    fast: Callable[..., ServerSettings], port: int, tmp_path: Path, python_with_fake_sglang: tuple[Path, Path]
) -> None:
    python, version = python_with_fake_sglang
    model = tmp_path / "GLM-5-NVFP4"
    model.mkdir()
    (model / "config.json").write_text("{}")
    profile = {
        "python": str(python),
        "model_path": str(model),
        "tp_size": 8,
        "mem_fraction_static": 0.85,
        "dsa_prefill_backend": "flashmla_sparse",
        "dsa_decode_backend": "flashmla_kv",
        "kv_cache_dtype": "bf16",
    }
    settings = fast(port, profile="glm", profiles={"glm": profile})
    sup = Supervisor(settings, gpu_reader=eight_gpus)
    lines: list[str] = []
    sup.add_line_listener(lambda line: lines.append(line.text))
    await sup.start()
    try:
        assert sup.command is not None
        assert sup.command.sglang_version == Version(0, 5, 9)
        first_hash = sup.config_hash
        await sup.wait_for_state(ServerState.READY, timeout_s=20)
        argv_line = next(t for t in lines if t.startswith("server_args="))
        assert "'--nsa-decode-backend', 'flashmla_kv'" in argv_line
        assert "entrypoint='launch_server.py'" in argv_line
        assert "'--tp-size', '8'" in argv_line
        # SGLang 0.5.23 is installed, then the server dies: the next life must use --dsa-*
        # (0.5.23 rejects --nsa-* outright).
        version.write_text("0.5.23")
        lines.clear()
        assert sup._runner is not None
        pid = sup._runner.pid
        assert pid is not None
        os.kill(pid, 9)
        await sup.wait_for_state(ServerState.RESTARTING, timeout_s=10)
        await sup.wait_for_state(ServerState.READY, timeout_s=20)
        argv_line = next(t for t in lines if t.startswith("server_args="))
        assert "'--dsa-decode-backend', 'flashmla_kv'" in argv_line
        assert "--nsa-" not in argv_line
        # `sglang serve` (the console script's main) through the profile's interpreter.
        assert "entrypoint='sglang serve'" in argv_line
        assert sup.config_hash != first_hash
        reg = CollectorRegistry()
        reg.register(sup.collector())
        labels = {
            "mode": "child",
            "profile": "glm",
            "config_hash": sup.config_hash,
            "sglang_version": "0.5.23",
        }
        assert reg.get_sample_value("sentinel_server_info", labels) == 1
        assert reg.get_sample_value("sentinel_server_preflight_success", {"check": "gpus"}) == 1
        assert reg.get_sample_value("sentinel_server_preflight_success", {"check": "sglang"}) == 1
    finally:
        await sup.stop()


async def test_missing_gpus_block_the_launch(
    fast: Callable[..., ServerSettings], port: int, tmp_path: Path, python_with_fake_sglang: tuple[Path, Path]
) -> None:
    python, _ = python_with_fake_sglang
    (tmp_path / "config.json").write_text("{}")
    profile = {"python": str(python), "model_path": str(tmp_path), "tp_size": 8}
    settings = fast(port, profile="glm", profiles={"glm": profile}, restart={"max_restarts": 0})
    sup = Supervisor(settings, gpu_reader=lambda: eight_gpus()[:2])
    await sup.start()
    try:
        await sup.wait_for_state(ServerState.FAILED, timeout_s=20)
        assert sup.last_crash is not None
        assert sup.last_crash.reason == "preflight"
        assert "needs 8 GPU(s), 2 present" in sup.last_crash.detail
        assert sup._runner is not None
        assert sup._runner.pid is None  # never launched
    finally:
        await sup.stop()
