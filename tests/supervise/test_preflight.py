"""Preflight checks with a fake GPU reader fed with real-looking NVML figures."""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Literal

import pytest

from sglang_sentinel.sglang.versions import Version
from sglang_sentinel.supervise.launch import LaunchCommand, render_command
from sglang_sentinel.supervise.preflight import (
    GpuInfo,
    PreflightResult,
    check_gpus,
    check_known_bad,
    check_model_path,
    check_port,
    run_preflight,
)
from sglang_sentinel.supervise.settings import ServerSettings

GIB = 1 << 30
# RTX PRO 6000 Blackwell: 96 GB class (reported 97887 MiB), compute capability 12.0.
RTX_TOTAL = 97887 * (1 << 20)


def rtx(n: int, free: int = RTX_TOTAL - 600 * (1 << 20), cc: tuple[int, int] = (12, 0)) -> list[GpuInfo]:
    return [GpuInfo(i, "NVIDIA RTX PRO 6000 Blackwell Server Edition", RTX_TOTAL, free, cc) for i in range(n)]


def glm_cmd(**profile: object) -> LaunchCommand:
    s = ServerSettings.model_validate(
        {
            "profile": "g",
            "profiles": {"g": {"model_path": "/m", "tp_size": 8, "mem_fraction_static": 0.85, **profile}},
        }
    )
    return render_command(s, detected_version=Version(0, 5, 9))


def test_gpu_count_and_free_memory() -> None:
    cmd = glm_cmd()
    assert check_gpus(cmd, lambda: rtx(8))[0].status == "ok"
    few = check_gpus(cmd, lambda: rtx(4))[0]
    assert few.status == "fail"
    assert "needs 8 GPU(s), 4 present" in few.message
    # A previous server still holds 40 GiB: 0.85 of total is not free.
    busy = check_gpus(cmd, lambda: rtx(8, free=RTX_TOTAL - 40 * GIB))[0]
    assert busy.status == "fail"
    assert "GPU0" in busy.message
    assert "free" in busy.message


def test_nvml_absent() -> None:
    def broken() -> list[GpuInfo]:
        raise RuntimeError("NVML Shared Library Not Found")

    r = check_gpus(glm_cmd(), broken)[0]
    assert r.status == "fail"
    assert "NVML Shared Library Not Found" in r.message
    sim = render_command(ServerSettings())
    assert check_gpus(sim, broken)[0].status == "skip"


def test_port_in_use_has_its_own_reason() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen()
        r = check_port("127.0.0.1", s.getsockname()[1])
    assert r.status == "fail"
    assert r.reason == "port_in_use"
    assert check_port("127.0.0.1", 0).status == "ok"


def test_model_path(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text("{}")
    assert check_model_path(glm_cmd(model_path=str(tmp_path))).status == "ok"
    empty = tmp_path / "empty"
    empty.mkdir()
    assert check_model_path(glm_cmd(model_path=str(empty))).status == "fail"
    assert check_model_path(glm_cmd(model_path="/no/such")).status == "fail"
    assert check_model_path(glm_cmd(model_path="zai-org/GLM-5")).status == "warn"


def glm_at(version: Version, **override: object) -> LaunchCommand:
    """The built-in GLM-5-NVFP4 profile (launch table on), optionally overridden, at ``version``."""
    g = "glm5-nvfp4-rtxpro6000"
    s = ServerSettings.model_validate({"profile": g, "profiles": {g: override} if override else {}})
    return render_command(s, detected_version=version)


def dsa_warnings(results: list[PreflightResult]) -> list[str]:
    return [r.message for r in results if r.status == "warn" and "NaN race" not in r.message]


@pytest.mark.parametrize(
    "version", [Version(0, 5, 9), Version(0, 5, 19), Version(0, 5, 23), Version(0, 5, 40)]
)
def test_the_profiles_own_choice_is_never_warned_about(version: Version) -> None:
    assert dsa_warnings(check_known_bad(glm_at(version), rtx(8))) == []


def test_known_bad_on_sm120() -> None:
    # trtllm is the deployment's finding on 0.5.9, known-bad from 0.5.12: an override to it warns.
    assert dsa_warnings(check_known_bad(glm_at(Version(0, 5, 9), dsa_decode_backend="trtllm"), rtx(8))) == []
    warns = dsa_warnings(check_known_bad(glm_at(Version(0, 5, 23), dsa_decode_backend="trtllm"), rtx(8)))
    assert len(warns) == 1
    assert "glm5.sm120.trtllm_unsupported" in warns[0]
    assert "Unsupported architecture" in warns[0]
    assert "sgl-project/sglang#29580" in warns[0]
    # KV left to SGLang on SM120: it picks fp8_e4m3 for DSA, which 0.5.23 refuses with the profile's
    # tilelang; said with what SGLang picks. On 0.5.9 fp8 with trtllm is the deployment's launch.
    fp8 = dsa_warnings(check_known_bad(glm_at(Version(0, 5, 23), kv_cache_dtype="auto"), rtx(8)))
    assert any("glm5.sm120.fp8_kv_backend" in m and "KV fp8_e4m3 (SGLang defaults" in m for m in fp8)
    deployment = glm_at(Version(0, 5, 9), dsa_decode_backend="trtllm", kv_cache_dtype="auto")
    assert dsa_warnings(check_known_bad(deployment, rtx(8))) == []
    # 0.5.9's own defaults (flashmla_*) gave garbage on SM120 (the deployment's finding).
    sglang_default = dsa_warnings(
        check_known_bad(glm_at(Version(0, 5, 9), dsa_prefill_backend="flashmla_sparse"), rtx(8))
    )
    assert any("glm5.sm120.flashmla_garbage" in m for m in sglang_default)
    # A non-table profile still gets the trtllm verdict (it is about the kernels, not the model).
    plain = check_known_bad(glm_cmd(dsa_decode_backend="trtllm", kv_cache_dtype="bf16"), rtx(8))
    assert plain == check_known_bad(glm_cmd(dsa_decode_backend="trtllm", kv_cache_dtype="bf16"), rtx(8))
    h200 = check_known_bad(glm_cmd(dsa_decode_backend="trtllm", kv_cache_dtype="bf16"), rtx(8, cc=(9, 0)))
    assert [(r.status, r.message) for r in h200] == [("ok", "no known-bad combination for SM90")]
    fp4 = check_known_bad(glm_cmd(quantization="modelopt_fp4", kv_cache_dtype="bf16"), rtx(8))
    assert any("NaN race" in r.message for r in fp4)


def test_profile_for_sm120_on_other_gpus_says_so() -> None:
    warns = dsa_warnings(check_known_bad(glm_at(Version(0, 5, 23)), rtx(8, cc=(9, 0))))
    assert any("renders for SM120" in m and "SM90" in m for m in warns)


def test_version_without_a_known_good_choice_warns_about_the_version() -> None:
    warns = dsa_warnings(check_known_bad(glm_at(Version(0, 5, 15)), rtx(8)))
    assert len(warns) == 1
    assert "glm5.sm120.none_known" in warns[0]
    assert "sgl-project/sglang#26087" in warns[0]


async def test_run_preflight_collects_everything() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    s = ServerSettings(port=port)
    results = await run_preflight(render_command(s), s, gpu_reader=lambda: rtx(1))
    assert {r.name: r.status for r in results} == {"gpus": "ok", "port": "ok", "model_path": "skip"}


@pytest.mark.parametrize(("mode", "status"), [("child", "fail"), ("systemd", "fail"), ("external", "warn")])
async def test_a_detected_sglang_older_than_every_release_read_is_refused_where_sentinel_launches(
    mode: Literal["child", "systemd", "external"], status: str, tmp_path: Path
) -> None:
    # The same check as a pinned sglang_version (settings: a config error): the launch would pass
    # flags rendered for the oldest release read, which an older parser may reject (argparse exit 2).
    model = tmp_path / "GLM-5-NVFP4"
    model.mkdir()
    (model / "config.json").write_text("{}")
    s = ServerSettings.model_validate(
        {
            "mode": mode,
            "profile": "glm5-nvfp4-rtxpro6000",
            "profiles": {"glm5-nvfp4-rtxpro6000": {"model_path": str(model)}},
        }
    )
    old = Version(0, 5, 8)
    cmd = render_command(s, detected_version=old)
    detected = (old, "sglang 0.5.8 importable by python3")
    results = await run_preflight(cmd, s, gpu_reader=lambda: rtx(8), check_port_free=False, detected=detected)
    by_name = {r.name: r for r in results}
    assert by_name["sglang"].status == "ok"  # importable: that part holds
    unsupported = by_name["sglang_version"]
    assert unsupported.status == status
    assert "SGLang 0.5.8 is older than the oldest supported release (0.5.9)" in unsupported.message
    # A supported release, detected or with a .postN / pre-release, adds nothing.
    for ok in (Version(0, 5, 9), Version(0, 5, 10, 1), Version(0, 5, 23, -1, "rc0")):
        fine = await run_preflight(
            render_command(s, detected_version=ok), s, gpu_reader=lambda: rtx(8), check_port_free=False,
            detected=(ok, f"sglang {ok} importable by python3"),
        )  # fmt: skip
        assert "sglang_version" not in {r.name for r in fine}


def test_read_gpus_nvml_through_a_fake_pynvml(monkeypatch: pytest.MonkeyPatch) -> None:
    import types

    from sglang_sentinel.supervise.preflight import read_gpus_nvml

    calls: list[str] = []

    class NVMLError(Exception):
        pass

    def cc(handle: int) -> tuple[int, int]:
        if handle == 1:
            raise NVMLError("Not Supported")
        return (12, 0)

    fake = types.SimpleNamespace(
        NVMLError=NVMLError,
        nvmlInit=lambda: calls.append("init"),
        nvmlShutdown=lambda: calls.append("shutdown"),
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda i: i,
        # Real readings of an RTX PRO 6000 Blackwell (MiB → bytes); older bindings return bytes names.
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=102641958912, free=102076055552),
        nvmlDeviceGetName=lambda h: (
            b"NVIDIA RTX PRO 6000 Blackwell Server Edition" if h else "NVIDIA RTX PRO 6000"
        ),
        nvmlDeviceGetCudaComputeCapability=cc,
    )
    monkeypatch.setitem(sys.modules, "pynvml", fake)
    gpus = read_gpus_nvml()
    assert calls == ["init", "shutdown"]
    assert [g.compute_capability for g in gpus] == [(12, 0), None]
    assert gpus[1].name == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    assert gpus[0].memory_free_bytes == 102076055552


def test_preflight_reads_declared_capabilities_not_the_kind(tmp_path: Path) -> None:
    weights = tmp_path / "ckpt"
    weights.mkdir()
    s = ServerSettings.model_validate(
        {
            "profile": "other",
            "profiles": {
                "other": {
                    "kind": "command",
                    "command": ["srv", "{port}"],
                    "model_path": str(weights),
                    "needs_weights": True,
                    "needs_gpus": 2,
                }
            },
        }
    )
    cmd = render_command(s)
    assert check_model_path(cmd).status == "fail"  # no config.json: a command profile is checked too
    (weights / "config.json").write_text("{}")
    assert check_model_path(cmd).status == "ok"
    result, _ = check_gpus(cmd, lambda: rtx(1))
    assert (result.status, result.message) == ("fail", "profile needs 2 GPU(s), 1 present")
