# ruff: noqa: E501  (data table: a row's source citation stays on one line to be greppable)
"""What a launch command must look like for one SGLang version on one GPU architecture — as data.

``launch_facts(version, sm_arch) -> LaunchFacts``: flag spellings, entrypoint, environment
variables SGLang actually reads, the DSA (DeepSeek sparse attention: GLM-5, DeepSeek V3.2)
defaults SGLang picks when nothing is passed, and the known findings for GLM-5-NVFP4 on SM120.
Every fact carries its source (a path inside the wheel, a PR/issue, or the deployment's own
finding). Versions are resolved with :mod:`sglang_sentinel.sglang.versions` (an unknown newer version gets
the newest known facts; ``LaunchFacts.resolution`` says so). Nothing here renders argv: the
launch module consumes it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from sglang_sentinel.sglang.versions import Resolution, Version, behaves_new, parse_version, resolve

__all__ = [
    "GLM5_NVFP4_TABLE",
    "SGLANG_CLI_STUB",
    "SM12_FP8_DSA_BACKENDS",
    "DsaRow",
    "DsaVerdicts",
    "Finding",
    "LaunchFacts",
    "dsa_defaults",
    "dsa_verdicts",
    "glm5_choice",
    "launch_facts",
    "normalize_kv_dtype",
]


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
    #: argv prefix of the recommended entrypoint (``sglang`` is the console script).
    entrypoint: tuple[str, ...]
    #: The same run by a given interpreter, after it: ``-m sglang.launch_server`` or ``-c <stub> serve``.
    entrypoint_args: tuple[str, ...]
    #: ``python -m sglang.launch_server`` still works but prints a UserWarning.
    launch_server_warns: bool
    #: ``--nsa`` (through 0.5.12.post1; ``--dsa`` registered from 0.5.13, the ``--nsa`` alias accepted
    #: through 0.5.19, rejected from 0.5.20) or ``--dsa`` for the DSA backends.
    dsa_flag_prefix: str
    #: Whether ``--nsa-prefill-backend``/``--nsa-decode-backend`` are accepted at all.
    nsa_flags_accepted: bool
    #: Flags that turn CUDA graphs off without a deprecation warning (``--disable-cuda-graph`` is
    #: deprecated from 0.5.14, where the per-phase graph backends first appear).
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
    #: The same for GLM (``GlmMoeDsaForCausalLM``), which has its own SM12x rule from 0.5.17.
    glm_dsa_default_backends: tuple[str, str]
    #: GLM-5-NVFP4 on this architecture: the GLM5_NVFP4_TABLE rows that apply, as findings.
    glm5_findings: tuple[Finding, ...]
    sources: tuple[str, ...]


_SERVER_ARGS_059 = (
    "sglang/srt/server_args.py ServerArgs._set_default_nsa_kv_cache_dtype/_set_default_nsa_backends (0.5.9)"
)
_OVERRIDES_023 = (
    "sglang/srt/arg_groups/overrides.py _dsa_kv_cache_dtype_default/_dsa_split_backend_resolution (0.5.23)"
)
# is_glm_sm12_fp8 (sglang/srt/arg_groups/overrides.py): first in 0.5.17, in every release since.
_GLM_SM12_FROM = Version(0, 5, 17)


def dsa_defaults(version: Version, sm_arch: int, kv_cache_dtype: str, *, glm: bool) -> tuple[str, str]:
    """SGLang's own (prefill, decode) DSA backend choice for a CUDA GPU with nothing passed."""
    major = sm_arch // 10
    fp8 = kv_cache_dtype == "fp8_e4m3"
    # 0.5.9's rule (server_args.py L1153-1179) up to the first release with the GLM SM12x rule
    # (0.5.17 arg_groups/overrides.py is_glm_sm12_fp8, same as 0.5.23).
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
        entrypoint_args=("-c", SGLANG_CLI_STUB, "serve") if serve else ("-m", "sglang.launch_server"),
        launch_server_warns=serve,
        dsa_flag_prefix="--dsa" if behaves_new("cli.dsa_names", v) else "--nsa",
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
        glm5_findings=tuple(
            Finding(r.applies_from, r.applies_until, f"{r.key} ({r.verdict}): {r.what}", r.source)
            for r in GLM5_NVFP4_TABLE
            if r.sm_major == 12 and r.applies(v, sm_arch)
        ),
        sources=(
            _SERVER_ARGS_059 if v < _GLM_SM12_FROM else _OVERRIDES_023,
            "sglang/launch_server.py __main__ warning (every release from 0.5.10)",
            "sglang/srt/environ.py SGLANG_ENABLE_JIT_DEEPGEMM",
        ),
    )


# What the ``sglang`` console script runs (``sglang = sglang.cli.main:main`` in 0.5.9 and 0.5.23
# entry_points.txt). Neither wheel has ``sglang/cli/__main__.py`` and ``cli/main.py`` has no
# ``__main__`` block, so ``python -m sglang.cli`` does not work; a venv's ``bin/sglang`` need not
# exist next to a configured interpreter. ``python -c <stub> serve ...`` is ``sglang serve ...`` run
# by exactly the profile's interpreter (argv[0] set so argparse's messages say "sglang").
SGLANG_CLI_STUB = 'import sys; sys.argv[0] = "sglang"; from sglang.cli.main import main; sys.exit(main())'

Verdict = Literal["known_good", "known_bad", "no_known_good"]


@dataclass(frozen=True, slots=True)
class DsaRow:
    """One row of the GLM-5-NVFP4 launch table.

    A *choice* row (``known_good`` / ``no_known_good``) is what the profile renders for a version
    range on an architecture: ``backends`` = (prefill, decode), "" = left to SGLang's own default;
    ``kv_cache_dtype`` rendered explicitly ("" = SGLang's). A ``known_bad`` row matches a launch
    whose effective prefill or decode backend is one of ``backends`` (empty: any; with ``allowed``:
    one outside ``allowed``) and whose KV dtype is of family ``kv_cache_dtype`` ("fp8", "bf16";
    "" = any).
    """

    key: str
    verdict: Verdict
    #: SM major the row is about (12: RTX PRO 6000 / SM120); 0 = any architecture without a row.
    sm_major: int
    applies_from: str
    applies_until: str | None  # None: still, including versions newer than the newest known
    backends: tuple[str, ...]
    kv_cache_dtype: str
    what: str
    source: str
    #: ``known_bad`` only: the row matches a launch with an effective backend NOT in this set
    #: (instead of one in ``backends``).
    allowed: tuple[str, ...] = ()
    #: ``known_bad`` only: ``refused`` = SGLang's own argument check stops the start-up with its
    #: message (the simulator reproduces these); "" = a kernel outcome (crash, garbage).
    effect: Literal["", "refused"] = ""
    #: ``known_bad`` only: SGLang's rule is about GlmMoeDsaForCausalLM (``dsa_verdicts(glm=True)``).
    glm_only: bool = False

    def applies(self, version: Version, sm_arch: int) -> bool:
        if self.sm_major and sm_arch // 10 != self.sm_major:
            return False
        f = Finding(self.applies_from, self.applies_until, self.what, self.source)
        return _applies(f, version)

    @property
    def versions(self) -> str:
        return f"{self.applies_from} – {self.applies_until or 'now'}"


#: DSA backends SGLang accepts with GLM + FP8 KV on SM12x (0.5.23 flash_mla_sm120.py
#: _validate_flashinfer_sparse_mla_backend; triton_sparse_mla is a prefill-only choice there).
SM12_FP8_DSA_BACKENDS: tuple[str, ...] = ("flashinfer_sparse_mla", "triton_sparse_mla")
_FLASH_MLA_SM120 = (
    "sglang/kernels/ops/attention/flash_mla_sm120.py _validate_flashinfer_sparse_mla_backend (0.5.23)"
)
_DEPLOYMENT = "deployment finding (the flagship deployment's launch line: GLM-5-NVFP4, TP 8 on RTX PRO 6000, SGLang 0.5.9)"

GLM5_NVFP4_TABLE: tuple[DsaRow, ...] = (
    # --- what the profile renders -------------------------------------------------------------
    DsaRow("glm5.sm120.trtllm_bf16", "known_good", 12, "0.5.9", "0.5.11", ("trtllm", "trtllm"), "bf16",
           "trtllm DSA backends with an explicit bf16 KV cache: the deployment's launch line (SGLang's "
           "defaults flashmla_kv / flashmla_sparse gave NaN or garbage); kept until the first report of "
           "trtllm failing on SM120 (0.5.12)",
           _DEPLOYMENT),
    DsaRow("glm5.sm120.none_known", "no_known_good", 12, "0.5.12", "0.5.18", ("tilelang", "tilelang"), "bf16",
           "no DSA backend known to work: on 0.5.12 every backend failed at start-up in DeepGEMM's indexer "
           "('attention.hpp: Unsupported architecture'); renders the later known-good tilelang + bf16; "
           "upgrade to 0.5.19+",
           "sgl-project/sglang#26087 (image lmsysorg/sglang:v0.5.12-cu130, 8x RTX PRO 6000)"),
    DsaRow("glm5.sm120.tilelang_bf16", "known_good", 12, "0.5.19", None, ("tilelang", "tilelang"), "bf16",
           "tilelang DSA backends with an explicit bf16 KV cache (SGLang's SM120 default would be fp8 KV "
           "+ flashinfer_sparse_mla, which needed source-built FlashInfer/DeepGEMM)",
           "sgl-project/sglang#37105 (working configuration, 8x RTX PRO 6000: --dsa-prefill-backend tilelang "
           "--dsa-decode-backend tilelang --kv-cache-dtype bfloat16); flashinfer-ai/flashinfer#5290 (SM120 "
           "production pools on bf16 KV + TileLang DSA); sgl-project/sglang#29580; " + _OVERRIDES_023
           + " _check_dsa_backend_constraints (tilelang needs SM89+)"),
    DsaRow("glm5.other_arch", "no_known_good", 0, "0.0.0", None, ("", ""), "",
           "no finding for GLM-5-NVFP4 on this architecture: DSA backends and KV dtype left to SGLang",
           "launch_facts.dsa_defaults (SGLang's own choice)"),
    # --- what preflight warns about ---------------------------------------------------------------
    DsaRow("glm5.sm120.flashmla_garbage", "known_bad", 12, "0.5.9", "0.5.11", ("flashmla_kv", "flashmla_sparse"), "",
           "flashmla_kv / flashmla_sparse DSA backends on SM120 gave NaN or garbage output",
           _DEPLOYMENT),
    DsaRow("glm5.sm120.trtllm_unsupported", "known_bad", 12, "0.5.12", None, ("trtllm",), "",
           "trtllm DSA backend on SM120: TRT-LLM-gen MLA kernels report 'Unsupported architecture'; "
           "expect a crash at warm-up",
           "sgl-project/sglang#29580; sgl-project/sglang#26087 (v0.5.12), sgl-project/sglang#37105, sgl-project/sglang#39302; flashinfer-ai/flashinfer#5290 "
           "(fmhaRunner.cuh accepts SM100/103/107 only), flashinfer-ai/flashinfer#5445"),
    # FP8 KV on SM12x is not bad as such: 0.5.9's trtllm has an fp8 path (nsa_backend.py
    # _forward_trtllm: mla_quantize_and_rope_for_fp8) and the deployment ran it (SGLang's fp8_e4m3,
    # no --kv-cache-dtype); 0.5.17+ make fp8 + flashinfer_sparse_mla GLM's SM12x default. What is
    # bad from then on is fp8 with another DSA backend, or that backend without fp8: SGLang refuses
    # both at start-up. SM12_FP8_DSA_BACKENDS is the allowed set; the simulator reads these rows.
    DsaRow("glm5.sm120.fp8_kv_backend", "known_bad", 12, "0.5.17", None, (), "fp8",
           "FP8 KV with a DSA backend other than flashinfer_sparse_mla (or triton_sparse_mla for prefill) "
           "on SM120: SGLang refuses it at start-up ('GLM DSA with FP8 KV cache on NVIDIA SM120/SM121 "
           "supports only flashinfer_sparse_mla (default) or triton_sparse_mla (prefill)'); SGLang picks "
           "fp8_e4m3 for DSA on SM ≥ 10 when --kv-cache-dtype is omitted",
           _FLASH_MLA_SM120 + "; " + _OVERRIDES_023 + " (is_glm_sm12_fp8; the refusal text is in "
           "every release from 0.5.17, where flashinfer_sparse_mla and is_glm_sm12_fp8 first appear)",
           allowed=SM12_FP8_DSA_BACKENDS, effect="refused", glm_only=True),
    DsaRow("glm5.sm120.flashinfer_sparse_mla_bf16", "known_bad", 12, "0.5.17", None, ("flashinfer_sparse_mla",), "bf16",
           "flashinfer_sparse_mla without an FP8 KV cache: SGLang refuses it at start-up "
           "('flashinfer_sparse_mla supports only GLM DSA with FP8 KV cache on NVIDIA SM120/SM121')",
           _FLASH_MLA_SM120 + " (the refusal text is in every release from 0.5.17)", effect="refused"),
)  # fmt: skip


def normalize_kv_dtype(kv: str) -> str:
    """The KV dtype family ("bf16", "fp8", "fp4", …); "" for auto/unset."""
    kv = kv.strip().lower()
    if kv in ("", "auto"):
        return ""
    if kv in ("bf16", "bfloat16"):
        return "bf16"
    if kv.startswith("fp8"):
        return "fp8"
    if kv.startswith("fp4"):
        return "fp4"
    return kv


def glm5_choice(version: str | None, sm_arch: int) -> DsaRow:
    """The table row the GLM-5-NVFP4 profile renders for ``version`` on ``sm_arch`` (unknown
    version: the newest known one's row, as everywhere)."""
    v = resolve(version).behaves_as
    for row in GLM5_NVFP4_TABLE:
        if row.verdict != "known_bad" and row.applies(v, sm_arch):
            return row
    raise AssertionError(f"GLM5_NVFP4_TABLE has no row for {v} on SM{sm_arch}")  # the sm_major=0 row


@dataclass(frozen=True, slots=True)
class DsaVerdicts:
    #: (prefill, decode, KV dtype) SGLang will use: the explicit ones, else its own defaults.
    effective: tuple[str, str, str]
    bad: tuple[DsaRow, ...]


def dsa_verdicts(
    version: str | None, sm_arch: int, prefill: str, decode: str, kv_cache_dtype: str, *, glm: bool = True
) -> DsaVerdicts:
    """The known-bad rows a DSA launch with these (possibly empty = SGLang's default) settings hits."""
    v = resolve(version).behaves_as
    facts_kv = "fp8_e4m3" if sm_arch // 10 >= 10 else "bfloat16"
    kv = kv_cache_dtype if normalize_kv_dtype(kv_cache_dtype) else facts_kv
    default = dsa_defaults(v, sm_arch, kv if normalize_kv_dtype(kv) != "fp8" else "fp8_e4m3", glm=glm)
    effective = (prefill or default[0], decode or default[1], kv)
    bad = tuple(
        row
        for row in GLM5_NVFP4_TABLE
        if row.verdict == "known_bad"
        and row.applies(v, sm_arch)
        and (glm or not row.glm_only)
        and (not row.backends or any(b in row.backends for b in effective[:2]))
        and (not row.allowed or any(b not in row.allowed for b in effective[:2]))
        and (not row.kv_cache_dtype or normalize_kv_dtype(kv) == row.kv_cache_dtype)
    )
    return DsaVerdicts(effective, bad)
