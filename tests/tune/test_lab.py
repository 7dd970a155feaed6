"""The real lab: the parts that need no server (known-bad skips, argv of a trial, the GPU state
read), and one server life (a real simulator) whose calibration rounds are scripted."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.calibrate.settings import CalibrationSettings
from sglang_sentinel.collect.gpu.fake import FakeNvml
from sglang_sentinel.supervise.launch import render_command
from sglang_sentinel.supervise.settings import LaunchProfile, ServerSettings
from sglang_sentinel.tune.gpu import nvml_state_reader
from sglang_sentinel.tune.settings import TuneSettings
from sglang_sentinel.tune.trial import CLIENT_BOUND_RETRIES, ServerLab
from support.daemon_proc import free_port


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


class _ScriptedRounds(ServerLab):
    """The real lab, server life and all, with the calibration rounds read from a script: whether a
    round is client-bound is up to the box's load, which a test cannot order."""

    def __init__(self, tmp_path: Path, script: list[float | None]) -> None:
        server = ServerSettings.model_validate(
            {
                "port": free_port(),
                "startup_poll_interval": 0.05,
                "start_timeout": 60,
                "profiles": {"sim": {"extra_args": ["--speed", "20", "--startup-time", "0.1"]}},
            }
        )
        cmd = render_command(server)
        super().__init__(
            server, cmd, TuneSettings(), CalibrationSettings(), directory=tmp_path, reference=None
        )
        self.script = script
        self.asked: list[tuple[str, int]] = []
        self.said: list[str] = []
        self.say = self.said.append

    async def _measure(self, kind: str, probe_concurrency: int | None, repeat: int) -> dict[str, Any]:
        self.asked.append((kind, repeat))
        value = self.script.pop(0)
        stop = "saturated" if value is not None else "client-bound"
        return {"kind": kind, "throughput_tok_s": value, "stop_reason": stop, "tokens": 100}


def _trial() -> dict[str, Any]:
    return {"id": "t01", "flags": {}, "rounds": []}


@pytest.mark.asyncio
async def test_a_client_bound_round_is_measured_again_in_the_same_life(tmp_path: Path) -> None:
    lab = _ScriptedRounds(tmp_path, [None, 812.5])
    trial = _trial()
    result = await lab.life(trial, gate=False, kinds=["short"], checkpoint=lambda: None)
    assert result.outcome == "ok", result.reason
    # Other prompts the second time (a prefix cache must not answer the repeat).
    assert lab.asked == [("short", 0), ("short", 1)]
    assert [r["throughput_tok_s"] for r in trial["rounds"]] == [None, 812.5]
    assert [r["round"] for r in trial["rounds"]] == [0, 1]
    assert any("client-bound" in line and "measuring it again (1 of" in line for line in lab.said), lab.said
    assert trial["ready_s"] > 0


@pytest.mark.asyncio
async def test_a_life_whose_rounds_stay_client_bound_fails_saying_so(tmp_path: Path) -> None:
    lab = _ScriptedRounds(tmp_path, [None] * (CLIENT_BOUND_RETRIES + 1) + [900.0])
    trial = _trial()
    result = await lab.life(trial, gate=False, kinds=["short", "full"], checkpoint=lambda: None)
    assert result.outcome == "failed"
    times = CLIENT_BOUND_RETRIES + 1
    assert result.reason == (
        f"short calibration measured nothing trustworthy (client-bound, {times} times in this life)"
    )
    assert len(trial["rounds"]) == CLIENT_BOUND_RETRIES + 1
    assert lab.script == [900.0]  # the full calibration never ran
