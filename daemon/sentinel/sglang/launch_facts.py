# ruff: noqa: E501  (data table: a row's source citation stays on one line to be greppable)
"""What a launch command must look like for one SGLang version on one GPU architecture — as data.

``launch_facts(version, sm_arch) -> LaunchFacts``: flag spellings, entrypoint, environment
variables SGLang actually reads, the DSA (DeepSeek sparse attention: GLM-5, DeepSeek V3.2)
defaults SGLang picks when nothing is passed, and the known findings for GLM-5-NVFP4 on SM120.
Every fact carries its source (a path inside the wheel, a PR/issue, or the deployment's own
finding). Versions are resolved with :mod:`sentinel.sglang.versions` (an unknown newer version gets
the newest known facts; ``LaunchFacts.resolution`` says so). Nothing here renders argv: the
launch module consumes it.
"""

from __future__ import annotations

from dataclasses import dataclass

from sentinel.sglang.versions import Resolution, Version, behaves_new, parse_version, resolve

__all__ = ["Finding", "LaunchFacts", "dsa_defaults", "launch_facts"]


@dataclass(frozen=True, slots=True)
class Finding:
    """An observed outcome for one model/GPU/version combination (not a SGLang default)."""

    applies_from: str | None  # oldest version it applies to (None: any)
    applies_until: str | None  # newest version it applies to (None: still)
    what: str
    source: str


@dataclass(frozen=True, slots=True)
class LaunchFacts:
    resolution: Resolution
    sm_arch: int
    #: argv prefix of the recommended entrypoint.
    entrypoint: tuple[str, ...]
    #: ``python -m sglang.launch_server`` still works but prints a UserWarning.
    launch_server_warns: bool
    #: ``--nsa`` (≤ 0.5.12; alias still accepted through 0.5.19) or ``--dsa`` for the DSA backends.
    dsa_flag_prefix: str
    #: Whether ``--nsa-prefill-backend``/``--nsa-decode-backend`` are accepted at all.
    nsa_flags_accepted: bool
    #: Flags that turn CUDA graphs off without a deprecation warning.
    disable_cuda_graph_flags: tuple[str, ...]
    disable_cuda_graph_deprecated: bool
    #: The DeepGEMM switch SGLang reads (``SGLANG_ENABLE_JIT_DEEPGEMM``, default on).
    deep_gemm_env: str
    #: Variables often seen in launch recipes that this version does not read at all.
    unread_env: tuple[str, ...]
    #: KV cache dtype SGLang picks for a DSA model when ``--kv-cache-dtype`` is ``auto``.
    dsa_default_kv_dtype: str
    #: (prefill, decode) backends SGLang picks for a DSA model with the default KV dtype.
    dsa_default_backends: tuple[str, str]
    #: The same for GLM (``GlmMoeDsaForCausalLM``), which has its own SM12x rule from 0.5.19.
    glm_dsa_default_backends: tuple[str, str]
    #: GLM-5-NVFP4 on this architecture: what was seen, with sources.
    glm5_findings: tuple[Finding, ...]
    sources: tuple[str, ...]


_SERVER_ARGS_059 = (
    "sglang/srt/server_args.py ServerArgs._set_default_nsa_kv_cache_dtype/_set_default_nsa_backends (0.5.9)"
)
_OVERRIDES_023 = (
    "sglang/srt/arg_groups/overrides.py _dsa_kv_cache_dtype_default/_dsa_split_backend_resolution (0.5.23)"
)
_GLM_SM12_FROM = Version(0, 5, 19)  # is_glm_sm12_fp8 present in 0.5.19/0.5.20/0.5.21/0.5.23 overrides.py
# First version verified to have --dsa-* names (supervise/launch.py _DSA_NAMES_FROM; reference §1.1).
_DSA_NAMES_FROM = Version(0, 5, 15)


def dsa_defaults(version: Version, sm_arch: int, kv_cache_dtype: str, *, glm: bool) -> tuple[str, str]:
    """SGLang's own (prefill, decode) DSA backend choice for a CUDA GPU with nothing passed."""
    major = sm_arch // 10
    fp8 = kv_cache_dtype == "fp8_e4m3"
    # 0.5.9's rule (server_args.py L1153-1179) up to the first read wheel with the new one (0.5.19:
    # arg_groups/overrides.py, same as 0.5.23); 0.5.10-0.5.18 were not read and get 0.5.9's.
    if version < _GLM_SM12_FROM:
        if fp8:
            return ("flashmla_auto", "flashmla_kv")
        return ("flashmla_sparse", "trtllm" if major >= 10 else "fa3")
    if glm and major == 12 and fp8:
        return ("flashinfer_sparse_mla", "flashinfer_sparse_mla")
    if fp8:
        # "Blackwell FP8 defaults to trtllm; Hopper FP8 to flashmla_kv." (0.5.23 overrides.py)
        backend = "trtllm" if major >= 10 else "flashmla_kv"
        return (backend, backend)
    return ("flashmla_sparse", "trtllm" if major >= 10 else "fa3")


_GLM5_SM120: tuple[Finding, ...] = (
    Finding("0.5.9", "0.5.9",
            "trtllm DSA backends needed (--nsa-prefill-backend trtllm --nsa-decode-backend trtllm); SGLang's "
            "defaults flashmla_kv / flashmla_sparse gave NaN or garbage output",
            "deployment finding (issue #13; /work/shared/reference/sglang.md header)"),
    Finding("0.5.9", None,
            "0.5.9 picks fp8_e4m3 KV on SM120 when --kv-cache-dtype is omitted; FP8 KV on SM120 reported "
            "garbled / stops after 1 token: pass --kv-cache-dtype explicitly",
            f"{_SERVER_ARGS_059}; voipmonitor/rtx6kpro models/glm5.md"),
    Finding("0.5.12", None,
            "TRT-LLM-gen MLA kernels (trtllm DSA backend) fail on SM120: 'TllmGenFmhaRunner ... Unsupported "
            "architecture'",
            "sglang PR #29580; issues #37105, #39302; flashinfer-ai/flashinfer#5445"),
    Finding("0.5.19", None,
            "GLM + SM12x + fp8 KV defaults both DSA backends to flashinfer_sparse_mla (an explicit backend wins)",
            f"{_OVERRIDES_023} is_glm_sm12_fp8; PR #26928"),
    Finding(None, None,
            "working community reports: tilelang DSA backends with --kv-cache-dtype bf16 (0.5.23 rejects "
            "tilelang + fp8 KV unless both backends are tilelang, and needs SM89+)",
            f"{_OVERRIDES_023} _check_dsa_backend_constraints; /work/shared/reference/sglang.md §6.1"),
)  # fmt: skip


def _applies(f: Finding, v: Version) -> bool:
    if f.applies_from is not None and v < parse_version(f.applies_from):
        return False
    return not (f.applies_until is not None and v > parse_version(f.applies_until))


def launch_facts(version: str | None, sm_arch: int) -> LaunchFacts:
    """Facts for ``version`` (as reported; ``None``: undetected) on compute capability ``sm_arch``
    (e.g. 120 for RTX PRO 6000 Blackwell, 100 for B200, 90 for H100)."""
    res = resolve(version)
    v = res.behaves_as
    major = sm_arch // 10
    serve = behaves_new("entrypoint.sglang_serve", v)
    nsa_gone = behaves_new("cli.nsa_rejected", v)
    deprecated = behaves_new("cli.disable_cuda_graph_deprecated", v)
    kv = "fp8_e4m3" if major >= 10 else "bfloat16"
    return LaunchFacts(
        resolution=res,
        sm_arch=sm_arch,
        entrypoint=("sglang", "serve") if serve else ("python3", "-m", "sglang.launch_server"),
        launch_server_warns=serve,
        dsa_flag_prefix="--dsa" if v >= _DSA_NAMES_FROM else "--nsa",
        nsa_flags_accepted=not nsa_gone,
        disable_cuda_graph_flags=(
            ("--cuda-graph-backend-decode=disabled", "--cuda-graph-backend-prefill=disabled")
            if deprecated
            else ("--disable-cuda-graph",)
        ),
        disable_cuda_graph_deprecated=deprecated,
        deep_gemm_env="SGLANG_ENABLE_JIT_DEEPGEMM",
        unread_env=("SGLANG_ENABLE_DEEP_GEMM",),
        dsa_default_kv_dtype=kv,
        dsa_default_backends=dsa_defaults(v, sm_arch, kv, glm=False),
        glm_dsa_default_backends=dsa_defaults(v, sm_arch, kv, glm=True),
        glm5_findings=tuple(f for f in _GLM5_SM120 if major == 12 and _applies(f, v)),
        sources=(
            _SERVER_ARGS_059 if v < _GLM_SM12_FROM else _OVERRIDES_023,
            "sglang/launch_server.py __main__ warning (0.5.19, 0.5.20, 0.5.21, 0.5.23)",
            "sglang/srt/environ.py SGLANG_ENABLE_JIT_DEEPGEMM",
        ),
    )
