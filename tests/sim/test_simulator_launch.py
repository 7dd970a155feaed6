"""The launch flags the performance model reacts to (sglang_sentinel_sim/launchflags.py, launchmodel.py):
each effect measured through the engine in virtual time, the start-up failures and the garbage
answers through an in-process server, the flag errors through the CLI."""

from __future__ import annotations

import argparse
import io
import signal

import httpx
import pytest

from sglang_sentinel.cli import main
from sglang_sentinel.sglang.crashes import CrashKind
from sglang_sentinel.sglang.launch_facts import dsa_verdicts
from sglang_sentinel.sglang.logparse import classify_crash
from sglang_sentinel.supervise.probes import probe_canary
from sglang_sentinel.supervise.settings import CanaryCheckSettings
from sglang_sentinel_sim import serve
from sglang_sentinel_sim.config import SimConfig
from sglang_sentinel_sim.engine import Engine, Request
from sglang_sentinel_sim.launchflags import LaunchFlags, add_launch_arguments, launch_flags_from
from sglang_sentinel_sim.profiles import Profile, get_profile
from sglang_sentinel_sim.text import Script
from support.sim_virtual import simulate
from support.waits import until

GLM = get_profile("glm5-nvfp4-8x-rtxpro6000")


def _flags(*argv: str) -> LaunchFlags:
    parser = argparse.ArgumentParser()
    add_launch_arguments(parser)
    return launch_flags_from(parser.parse_args(argv))


def _profile(*argv: str, version: str = "0.5.23", **options: object) -> Profile:
    config = SimConfig(sglang_version=version, launch=_flags(*argv), **options)  # type: ignore[arg-type]
    config.validate()
    return config.resolved_profile()


def _decode_tokens_per_s(profile: Profile, concurrency: int) -> float:
    results = simulate(profile, [(0.0, 200, 400)] * concurrency)
    return concurrency * 400 / max(r.finish for r in results)


# ---- no flags, or the profile's own launch spelled out: the fitted profile, unchanged --------------
@pytest.mark.parametrize(
    ("argv", "version"),
    [
        ((), "0.5.23"),
        (
            ("--nsa-prefill-backend", "trtllm", "--nsa-decode-backend", "trtllm", "--disable-cuda-graph"),
            "0.5.9",
        ),
        (
            ("--mem-fraction-static", "0.85", "--kv-cache-dtype", "fp8_e4m3", "--moe-runner-backend", "auto"),
            "0.5.9",
        ),
        (("--dsa-decode-backend", "trtllm", "--cuda-graph-backend-decode", "disabled"), "0.5.23"),
    ],
)
def test_the_profiles_own_launch_leaves_it_unchanged(argv: tuple[str, ...], version: str) -> None:
    assert _profile(*argv, version=version) == GLM


# ---- CUDA graphs --------------------------------------------------------------------------------
def test_cuda_graphs_speed_up_decode_up_to_the_captured_max_bs_only() -> None:
    graphs = _profile("--cuda-graph-max-bs-decode", "16")
    assert (graphs.cuda_graph, graphs.cuda_graph_max_bs) == (True, 16)
    # 8 running: every decode step replays a graph -> less fixed cost per step, more tokens/s.
    assert _decode_tokens_per_s(graphs, 8) > 1.2 * _decode_tokens_per_s(GLM, 8)
    # 32 running (> 16): eager steps, exactly as without graphs.
    assert _decode_tokens_per_s(graphs, 32) == pytest.approx(_decode_tokens_per_s(GLM, 32))


def test_cuda_graphs_cost_capture_time_at_start_up() -> None:
    small = _profile("--cuda-graph-backend-decode", "full", "--cuda-graph-max-bs-decode", "32")
    large = _profile("--cuda-graph-backend-decode", "full")  # SGLang's 512 for 96 GB at TP 8
    assert large.cuda_graph_max_bs == 512
    assert 0 < small.graph_capture_s < large.graph_capture_s
    assert GLM.graph_capture_s == 0.0
    # 0.5.9 spelling, explicit list: the largest size is the max, one capture per size.
    listed = _profile("--cuda-graph-bs", "1", "2", "4", "8", version="0.5.9")
    assert listed.cuda_graph_max_bs == 8
    assert listed.graph_capture_s == pytest.approx(4 * GLM.graph_capture_s_per_bs)


def test_disabling_graphs_on_a_graph_profile_slows_its_small_batches() -> None:
    tiny = get_profile("tiny-llama-1x-h200")
    eager = SimConfig(profile=tiny.name, launch=_flags("--disable-cuda-graph")).resolved_profile()
    assert not eager.cuda_graph
    assert _decode_tokens_per_s(eager, 4) < _decode_tokens_per_s(tiny, 4)


# ---- KV pool --------------------------------------------------------------------------------------
def test_kv_pool_follows_mem_fraction_and_kv_dtype() -> None:
    low, high = _profile("--mem-fraction-static", "0.80"), _profile("--mem-fraction-static", "0.90")
    assert low.max_total_num_tokens < GLM.max_total_num_tokens < high.max_total_num_tokens
    # +5 % of 95 GB on top of the 23.5 GB pool.
    assert high.max_total_num_tokens / GLM.max_total_num_tokens == pytest.approx(
        (23.5 + 4.75) / 23.5, rel=1e-3
    )
    # DSA's bf16 rows are 1152 bytes, its fp8 rows 656: fewer tokens in the same memory.
    bf16 = _profile("--kv-cache-dtype", "bf16")
    assert bf16.max_total_num_tokens / GLM.max_total_num_tokens == pytest.approx(656 / 1152, rel=1e-3)
    assert bf16.max_total_num_tokens % GLM.page_size == 0
    # An explicit --max-total-tokens wins over the fraction.
    assert _profile("--mem-fraction-static", "0.9", max_total_tokens=1000).max_total_num_tokens == 1000


def _max_running(profile: Profile) -> int:
    engine = Engine(profile, clock=lambda: 0.0)
    reqs = [Request(f"r{i}", 30000, 2000, Script([], 0, 1), ignore_eos=True) for i in range(40)]
    for req in reqs:
        engine.submit(req)
    while engine.busy:
        engine._plan_and_cost()
        engine._apply(0.0)
    assert all(r.generated == 2000 for r in reqs)
    return engine.stats.max_running


def test_a_larger_pool_runs_more_requests_at_once() -> None:
    assert _max_running(_profile("--mem-fraction-static", "0.80")) < _max_running(GLM)
    assert _max_running(GLM) < _max_running(_profile("--mem-fraction-static", "0.90"))


def test_max_running_requests_caps_the_running_batch() -> None:
    profile = GLM.with_overrides(max_running_requests=5)
    assert _max_running(profile) == 5


# ---- start-up failures ----------------------------------------------------------------------------
async def _startup_log(*argv: str, version: str = "0.5.23") -> tuple[str, str | None]:
    err = io.StringIO()
    config = SimConfig(port=0, speed=1000, sglang_version=version, launch=_flags(*argv))
    async with serve(config, wait_ready=False, err=err) as sim:
        await until(lambda: sim.stopped, what="the launch failing at start-up")
        assert sim.ready_at is None
        return err.getvalue(), sim.exit_reason


async def test_too_high_mem_fraction_dies_at_start_up_out_of_memory() -> None:
    log, reason = await _startup_log("--mem-fraction-static", "0.95")
    assert reason == "crash:oom"
    assert "torch.OutOfMemoryError: CUDA out of memory." in log
    assert "fired up" not in log
    assert classify_crash(log.splitlines()) == CrashKind.CUDA_OOM


async def test_graph_capture_out_of_memory_prints_sglangs_hints() -> None:
    log, reason = await _startup_log(
        "--mem-fraction-static", "0.91", "--cuda-graph-max-bs", "512", version="0.5.9"
    )
    assert reason == "crash:graph_oom"
    assert "Capture cuda graph begin." in log
    assert "Exception: Capture cuda graph failed: CUDA out of memory." in log
    assert "2. set --cuda-graph-max-bs to a smaller value (e.g., 16)" in log
    assert classify_crash(log.splitlines()) == CrashKind.CUDA_OOM


async def test_too_low_mem_fraction_leaves_no_kv_pool() -> None:
    log, reason = await _startup_log("--mem-fraction-static", "0.55")
    assert reason == "crash:kv_pool"
    text = "Not enough memory. Please try to increase --mem-fraction-static."
    assert f"{text} Current value: mem_fraction_static=0.55" in log


async def test_a_backend_without_sm120_kernels_fails_at_start_up() -> None:
    log, reason = await _startup_log("--dsa-decode-backend", "fa3")
    assert reason == "crash:unsupported"
    assert "RuntimeError: fa3: Unsupported architecture" in log
    assert classify_crash(log.splitlines()) == CrashKind.UNSUPPORTED_ARCH


async def test_sglang_refuses_fp8_kv_with_another_dsa_backend_on_sm120() -> None:
    log, reason = await _startup_log("--dsa-prefill-backend", "tilelang", "--dsa-decode-backend", "tilelang")
    assert reason == "crash:refused"
    assert (
        "ValueError: GLM DSA with FP8 KV cache on NVIDIA SM120/SM121 supports only flashinfer_sparse_mla "
        "(default) or triton_sparse_mla (prefill), but got ['tilelang']." in log
    )
    assert "fired up" not in log


# (flags, version): judged by the simulator's start-up and by preflight's table.
_TILELANG = ("--dsa-prefill-backend", "tilelang", "--dsa-decode-backend", "tilelang")
_KV_LAUNCHES = [
    (_TILELANG, "0.5.23"),
    ((*_TILELANG, "--kv-cache-dtype", "bf16"), "0.5.23"),
    (("--dsa-decode-backend", "flashinfer_sparse_mla", "--kv-cache-dtype", "bf16"), "0.5.23"),
    (("--dsa-prefill-backend", "triton_sparse_mla", "--dsa-decode-backend", "flashinfer_sparse_mla"),
     "0.5.23"),
    (("--launch-defaults", "sglang"), "0.5.23"),
    (("--dsa-prefill-backend", "flashmla_sparse", "--dsa-decode-backend", "flashmla_sparse"), "0.5.23"),
    (("--nsa-prefill-backend", "tilelang", "--nsa-decode-backend", "tilelang"), "0.5.9"),
    (("--mem-fraction-static", "0.88"), "0.5.9"),  # the deployment's trtllm with SGLang's fp8_e4m3
]  # fmt: skip


@pytest.mark.parametrize(("argv", "version"), _KV_LAUNCHES)
def test_the_simulator_refuses_what_preflights_table_calls_refused(
    argv: tuple[str, ...], version: str
) -> None:
    p = _profile(*argv, version=version)
    verdicts = dsa_verdicts(version, p.sm_arch, p.dsa_prefill_backend, p.dsa_decode_backend, p.kv_cache_dtype)
    refused = [row.key for row in verdicts.bad if row.effect == "refused"]
    assert p.startup_failure.startswith("refused:") == bool(refused), (p.startup_failure, refused)


def test_fp8_kv_is_refused_only_where_sglang_refuses_it() -> None:
    assert _profile("--dsa-decode-backend", "tilelang", "--dsa-prefill-backend", "tilelang").startup_failure
    assert _profile(
        "--dsa-decode-backend", "flashinfer_sparse_mla", "--kv-cache-dtype", "bf16"
    ).startup_failure
    # 0.5.9 has no such check (and no flashinfer_sparse_mla); the trtllm baseline is exempt.
    assert _profile("--nsa-decode-backend", "tilelang", version="0.5.9").startup_failure == ""
    assert _profile("--mem-fraction-static", "0.88", version="0.5.23").startup_failure == ""


def test_the_memory_check_passes_for_the_deployment_and_for_graphs_at_0_90() -> None:
    assert (
        _profile("--mem-fraction-static", "0.90", "--cuda-graph-max-bs-decode", "512").startup_failure == ""
    )
    assert _profile("--mem-fraction-static", "0.88").startup_failure == ""


# ---- correctness of the backends on SM120 ---------------------------------------------------------
async def _canaries(*argv: str, version: str = "0.5.23") -> list[str]:
    config = SimConfig(port=0, speed=1000, sglang_version=version, launch=_flags(*argv))
    settings = CanaryCheckSettings()
    async with serve(config) as sim, httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client:
        return [(await probe_canary(client, canary, settings)).reason for canary in settings.canaries]


@pytest.mark.parametrize(
    ("argv", "version"),
    [
        (("--nsa-prefill-backend", "flashmla_auto", "--nsa-decode-backend", "flashmla_kv"), "0.5.9"),
        (
            # With fp8 KV, 0.5.23 refuses them at start-up.
            (
                "--dsa-prefill-backend",
                "flashmla_sparse",
                "--dsa-decode-backend",
                "flashmla_sparse",
                "--kv-cache-dtype",
                "bf16",
            ),
            "0.5.23",
        ),
        (("--moe-runner-backend", "flashinfer_trtllm"), "0.5.23"),
        # SGLang's own defaults on 0.5.9 (fp8 KV -> flashmla_auto / flashmla_kv).
        (("--launch-defaults", "sglang"), "0.5.9"),
    ],
)
async def test_known_bad_backends_answer_garbage_the_canary_catches(
    argv: tuple[str, ...], version: str
) -> None:
    reasons = await _canaries(*argv, version=version)
    assert all(r.startswith("garbage_") for r in reasons), reasons


@pytest.mark.parametrize(
    ("argv", "version"),
    [
        (("--nsa-prefill-backend", "trtllm", "--nsa-decode-backend", "trtllm"), "0.5.9"),
        (
            (
                "--dsa-prefill-backend",
                "tilelang",
                "--dsa-decode-backend",
                "tilelang",
                "--kv-cache-dtype",
                "bf16",
            ),
            "0.5.23",
        ),
        (("--launch-defaults", "sglang"), "0.5.23"),  # flashinfer_sparse_mla for GLM on SM12x
    ],
)
async def test_good_backends_answer_correctly(argv: tuple[str, ...], version: str) -> None:
    assert await _canaries(*argv, version=version) == ["ok", "ok"]


def test_garbage_comes_at_normal_or_better_speed() -> None:
    bad = _profile("--dsa-prefill-backend", "flashmla_auto", "--dsa-decode-backend", "flashmla_kv")
    assert bad.output_garbage == "nan"
    assert _decode_tokens_per_s(bad, 8) >= _decode_tokens_per_s(GLM, 8)
    slower = _profile(
        "--dsa-decode-backend", "tilelang", "--dsa-prefill-backend", "tilelang", "--kv-cache-dtype", "bf16"
    )
    assert slower.output_garbage == ""
    assert slower.startup_failure == ""
    assert _decode_tokens_per_s(slower, 8) < _decode_tokens_per_s(GLM, 8)


# ---- what the server reports ----------------------------------------------------------------------
async def test_server_info_reports_the_effective_launch() -> None:
    config = SimConfig(
        port=0,
        speed=1000,
        launch=_flags(
            "--mem-fraction-static",
            "0.9",
            "--cuda-graph-max-bs-decode",
            "64",
            "--dsa-decode-backend",
            "flashinfer_sparse_mla",
        ),
    )
    async with serve(config) as sim, httpx.AsyncClient(base_url=sim.base_url) as client:
        info = (await client.get("/server_info")).json()
    assert info["mem_fraction_static"] == 0.9
    assert info["disable_cuda_graph"] is False
    assert info["cuda_graph_backend_decode"] == "full"
    assert info["cuda_graph_max_bs_decode"] == 64
    assert info["dsa_decode_backend"] == "flashinfer_sparse_mla"
    assert info["dsa_prefill_backend"] == "trtllm"
    assert info["attention_backend"] == "nsa"
    assert info["kv_cache_dtype"] == "fp8_e4m3"
    assert info["max_total_num_tokens"] == sim.profile.max_total_num_tokens > GLM.max_total_num_tokens


async def test_server_info_of_the_default_launch_says_what_the_deployment_ran() -> None:
    async with (
        serve(SimConfig(port=0, speed=1000, sglang_version="0.5.9")) as sim,
        httpx.AsyncClient(base_url=sim.base_url) as client,
    ):
        info = (await client.get("/server_info")).json()
    assert (info["nsa_prefill_backend"], info["nsa_decode_backend"]) == ("trtllm", "trtllm")
    assert (info["mem_fraction_static"], info["disable_cuda_graph"], info["cuda_graph_max_bs"]) == (
        0.85,
        True,
        None,
    )


# ---- flag errors ------------------------------------------------------------------------------------
def _main(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str]:
    try:
        code = main(["sim", "--check-args", *args])
    except SystemExit as exc:  # argparse's own errors
        code = int(exc.code or 0)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (("--attention-backend", "warp_drive"), "invalid choice: 'warp_drive'"),
        (("--kv-cache-dtype", "fp3"), "invalid choice: 'fp3'"),
        (("--cuda-graph-backend-decode", "sometimes"), "invalid choice: 'sometimes'"),
        (("--nsa-decode-backend", "trtllm"), "unrecognized arguments: --nsa-decode-backend"),
        (
            ("--sglang-version", "0.5.9", "--dsa-decode-backend", "trtllm"),
            "unrecognized arguments: --dsa-decode-backend",
        ),
        (
            ("--sglang-version", "0.5.9", "--dsa-decode-backend", "flashinfer_sparse_mla"),
            "unrecognized arguments",
        ),
        (("--sglang-version", "0.5.9", "--kv-cache-dtype", "nvfp4"), "invalid choice: 'nvfp4'"),
        (("--sglang-version", "0.5.9", "--cuda-graph-max-bs-decode", "8"), "unrecognized arguments"),
        (("--cuda-graph-max-bs", "8"), "unrecognized arguments: --cuda-graph-max-bs"),
        (("--mem-fraction-static", "1.5"), "--mem-fraction-static must be between 0 and 1"),
        (("--kv-cache-dtype", "fp8_e5m2"), "a DSA model (GlmMoeDsaForCausalLM) takes bf16 or fp8_e4m3"),
    ],
)
def test_bad_launch_flags_exit_2(
    capsys: pytest.CaptureFixture[str], args: tuple[str, ...], needle: str
) -> None:
    code, err = _main(capsys, *args)
    assert code == 2
    assert needle in err


def test_good_launch_flags_pass_check_args(capsys: pytest.CaptureFixture[str]) -> None:
    code, err = _main(
        capsys,
        "--dsa-prefill-backend", "trtllm", "--dsa-decode-backend", "trtllm", "--mem-fraction-static",
        "0.88", "--cuda-graph-backend-decode=full", "--cuda-graph-backend-prefill=disabled",
        "--cuda-graph-max-bs-decode", "128", "--moe-runner-backend", "flashinfer_cutlass",
        "--enable-torch-compile",
    )  # fmt: skip
    assert (code, err) == (0, "")


def test_the_oom_start_up_is_a_dead_process_like_sglangs(sim_factory) -> None:  # type: ignore[no-untyped-def]
    sim = sim_factory("--mem-fraction-static", "0.95", wait_ready=False)
    assert sim.wait_exit(30) == -signal.SIGKILL
    log = sim.stderr_text()
    assert "torch.OutOfMemoryError: CUDA out of memory." in log
    assert "Received sigquit from a child process" in log
    assert classify_crash(log.splitlines()) == CrashKind.CUDA_OOM


async def test_disable_cuda_graph_is_deprecated_in_0_5_23_only() -> None:
    for version, warned in (("0.5.23", True), ("0.5.9", False)):
        err = io.StringIO()
        config = SimConfig(port=0, speed=1000, sglang_version=version, launch=_flags("--disable-cuda-graph"))
        async with serve(config, err=err):
            pass
        assert ("'--disable-cuda-graph' is deprecated" in err.getvalue()) is warned
