"""The real lab's parts that need no server: known-bad skips, argv of a trial, the GPU state read."""

from __future__ import annotations

from pathlib import Path

from sglang_sentinel.calibrate.settings import CalibrationSettings
from sglang_sentinel.collect.gpu.fake import FakeNvml
from sglang_sentinel.supervise.launch import render_command
from sglang_sentinel.supervise.settings import LaunchProfile, ServerSettings
from sglang_sentinel.tune.gpu import nvml_state_reader
from sglang_sentinel.tune.settings import TuneSettings
from sglang_sentinel.tune.trial import ServerLab


def _lab(tmp_path: Path, version: str) -> ServerLab:
    server = ServerSettings(
        profile="glm5-nvfp4-rtxpro6000",
        profiles={"glm5-nvfp4-rtxpro6000": LaunchProfile(sglang_version=version)},
    )
    return ServerLab(
        server,
        render_command(server),
        TuneSettings(),
        CalibrationSettings(),
        directory=tmp_path,
        reference=None,
    )


def test_known_bad_dsa_backends_are_skipped_with_the_table_reason(tmp_path: Path) -> None:
    lab = _lab(tmp_path, "0.5.9")
    assert lab.skip_reason({}) is None  # the table's own row for 0.5.9 on SM120 (trtllm)
    why = lab.skip_reason({"--nsa-decode-backend": "flashmla_kv", "--nsa-prefill-backend": "flashmla_sparse"})
    assert why is not None
    assert why.startswith("known bad on SM120 with SGLang 0.5.9")
    assert "flashmla" in why


def test_a_trial_argv_uses_the_versions_spelling_and_masks_nothing_it_should_show(tmp_path: Path) -> None:
    lab = _lab(tmp_path, "0.5.23")
    argv = lab.argv_for({"--nsa-decode-backend": "tilelang", "--disable-cuda-graph": False})
    assert argv[-2:] == ["--dsa-decode-backend", "tilelang"]
    assert "--nsa-decode-backend" not in argv
    assert not any(a.startswith("--cuda-graph-backend") or a == "--disable-cuda-graph" for a in argv)
    assert lab.command_for({"--nsa-decode-backend": "tilelang"}).dsa[1] == "tilelang"


def test_gpu_state_has_clocks_and_throttle_reasons_and_absent_means_absent() -> None:
    state = nvml_state_reader(lambda: FakeNvml(2, "busy"))()
    assert state is not None
    devices = state["devices"]
    assert [d["index"] for d in devices] == [0, 1]
    assert devices[0]["sm_clock_hz"] > 1e8
    assert isinstance(devices[0]["throttle_reasons"], list)
    assert all(v is not None for d in devices for v in d.values())

    def broken() -> FakeNvml:
        raise RuntimeError("NVML Shared Library Not Found")

    assert nvml_state_reader(broken)() is None
