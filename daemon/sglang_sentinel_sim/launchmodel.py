"""What the launch flags do to a simulated server: the profile as that launch would run.

A profile records the launch it was fitted on (profiles.py: backends, memory fraction, KV dtype,
CUDA graphs). :func:`apply_launch` computes the launch the flags describe -- a flag not given takes
the profile's value (``--launch-defaults profile``) or SGLang's own default for that model and GPU
(``--launch-defaults sglang``) -- and changes the profile *relative to its recorded launch*, so
no flags give back the profile unchanged, byte for byte. Modelled (magnitudes and sources:
docs/sim.md "Launch flags the performance model reacts to"):

- CUDA graphs: a decode step of at most ``cuda_graph_max_bs`` requests costs
  ``decode_graph_base_s`` instead of ``decode_base_s``; capturing adds start-up time per size.
- KV pool: ``max_total_num_tokens`` follows ``--mem-fraction-static`` (the extra fraction of GPU
  memory goes to the pool, SGLang's ``profile_max_num_token``) and the bytes per token of the
  KV dtype; no room left for activations and graphs fails the start-up with SGLang's text.
- Backends: per-backend speed factor and verdict on the simulated GPU (SM120 findings):
  ``ok``, ``garbage`` (the server answers NaN-style text or "!!!!" at normal speed) or
  ``unsupported`` (start-up fails).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Final

from sglang_sentinel.sglang.launch_facts import DsaRow, dsa_defaults, dsa_verdicts
from sglang_sentinel.sglang.versions import parse_version
from sglang_sentinel_sim.launchflags import LaunchFlags
from sglang_sentinel_sim.profiles import Profile
from sglang_sentinel_sim.versions import has

__all__ = [
    "Backend",
    "Launch",
    "apply_launch",
    "capture_sizes",
    "effective_launch",
    "kv_bytes",
    "server_args_fields",
]


@dataclass(frozen=True, slots=True)
class Backend:
    #: Time factor on the part of a forward the backend runs (> 1 slower), vs. the baseline's.
    speed: float
    verdict: str = "ok"  # ok | garbage | unsupported
    garbage: str = ""  # the garbage style (generation.py): "nan", "bang"


_GARBAGE_NAN: Final = Backend(0.95, "garbage", "nan")
_UNSUPPORTED: Final = Backend(1.0, "unsupported")
# DSA (NSA) prefill/decode backends on SM120. trtllm: the deployment's launch (correct, measured).
# flashmla_*: SGLang's defaults there, NaN/garbage in the deployment (docs/sglang-versions.md;
# sglang_sentinel.sglang.launch_facts glm5.sm120.flashmla_garbage). Speeds other than 1.0: assumptions.
_DSA_SM120: Final[dict[str, Backend]] = {
    "trtllm": Backend(1.0),
    "flashmla_sparse": _GARBAGE_NAN,
    "flashmla_kv": _GARBAGE_NAN,
    "flashmla_auto": _GARBAGE_NAN,
    "flashmla_sparse_q8": _GARBAGE_NAN,
    "flashinfer_sparse_mla": Backend(1.05),
    "tilelang": Backend(1.15),
    "triton_sparse_mla": Backend(1.3),
    "triton": Backend(1.3),
    "fa3": _UNSUPPORTED,  # Hopper (SM90) kernels
    "aiter": _UNSUPPORTED,  # AMD
    "intel_xpu": _UNSUPPORTED,
}
# --attention-backend other than nsa/dsa on a DSA model: dense MLA over every KV token instead of
# DSA's selected ones (community SM120 images run flashinfer). Speeds: assumptions.
_DENSE_ON_DSA_SM120: Final[dict[str, Backend]] = {
    "flashinfer": Backend(1.6),
    "triton": Backend(2.0),
    "torch_native": Backend(6.0),
    "flex_attention": Backend(4.0),
}
# MoE runners for the NVFP4 experts on SM120. flashinfer_trtllm: "!!!!" output
# (github.com/sgl-project/sglang/issues/30989, GLM-5.2-NVFP4); deep_gemm: DeepGEMM has no SM120
# kernels (github.com/sgl-project/sglang/issues/26087). Speeds other
# than 1.0: assumptions; a runner not listed counts as auto.
_MOE_SM120: Final[dict[str, Backend]] = {
    "auto": Backend(1.0),
    "flashinfer_cutlass": Backend(1.0),
    "cutlass": Backend(1.0),
    "flashinfer_cutedsl": Backend(0.95),
    "triton": Backend(1.25),
    "triton_kernel": Backend(1.25),
    "flashinfer_trtllm": Backend(0.9, "garbage", "bang"),
    "deep_gemm": _UNSUPPORTED,
}
_OK: Final = Backend(1.0)
# KV bytes per token and layer row: DSA's fp8 row is 656 bytes (512 fp8 + scales + 64 bf16 rope,
# srt/layers/attention/nsa/quant_k_cache.py), bf16 (512 + 64) x 2; dense models: element size.
_DSA_KV_BYTES: Final = {"fp8_e4m3": 656.0, "bfloat16": 1152.0}
_DENSE_KV_BYTES: Final = {"bfloat16": 2.0, "fp8_e4m3": 1.0, "fp8_e5m2": 1.0, "mxfp8": 1.0}
# SGLang's graph-memory estimate per captured batch size (server_args.py mem_fraction_static).
_GRAPH_MB_PER_BS: Final = 2.0
# torch.compile compiles the sizes up to torch_compile_max_bs (default 32): extra start-up.
_TORCH_COMPILE_MAX_BS: Final = 32


@dataclass(frozen=True, slots=True)
class Launch:
    """The effective launch (SGLang's names), as /server_info reports it."""

    attention_backend: str
    prefill_attention_backend: str
    decode_attention_backend: str
    dsa_prefill_backend: str
    dsa_decode_backend: str
    moe_runner_backend: str
    mem_fraction_static: float
    kv_cache_dtype: str
    cuda_graph: bool
    cuda_graph_max_bs: int
    cuda_graph_sizes: int
    enable_torch_compile: bool


def capture_sizes(max_bs: int, spec: bool) -> list[int]:
    """SGLang's default capture list up to ``max_bs`` (0.5.9 _generate_cuda_graph_batch_sizes)."""
    if spec:
        sizes = [
            *range(1, 9),
            *range(10, 33, 2),
            *range(40, 65, 4),
            *range(72, 257, 8),
            *range(272, max_bs + 1, 16),
        ]
    else:
        sizes = [1, 2, 4, 8, 12, *range(16, 257, 8), *range(272, 512, 16), *range(512, max_bs + 1, 32)]
    return [bs for bs in sizes if bs <= max_bs]


def _dsa_model(p: Profile) -> bool:
    return bool(p.dsa_decode_backend)


def _kv_dtype(p: Profile, dtype: str) -> str:
    if dtype == "auto":
        # DSA on SM >= 10: fp8_e4m3 (0.5.9 _set_default_nsa_kv_cache_dtype; 0.5.23 overrides.py).
        return "fp8_e4m3" if _dsa_model(p) and p.sm_arch >= 100 else "bfloat16"
    return "bfloat16" if dtype == "bf16" else dtype


def _sglang_max_bs(p: Profile) -> int:
    """SGLang's cuda_graph_max_bs for the GPU's memory tier (server_args _handle_gpu_memory_settings)."""
    gb = p.gpu_mem_gb
    if gb >= 160:
        return 512
    if gb >= 60:
        return 256 if p.tp_size < 4 else 512
    return 32 if p.tp_size < 4 else 160


def _sglang_defaults(p: Profile, version: str) -> Launch:
    kv = _kv_dtype(p, "auto")
    if _dsa_model(p):
        # SGLang fills in "dsa" from the release of the daemon's cli.dsa_names row ("nsa" before).
        attention = "dsa" if has("cli.dsa_names", version) else "nsa"
        # The daemon's reading of SGLang's own pick, per release (the GLM SM12x rule from 0.5.17).
        glm = p.architecture == "GlmMoeDsaForCausalLM"
        dsa = dsa_defaults(parse_version(version), p.sm_arch, kv, glm=glm)
    else:
        attention, dsa = ("fa3" if p.sm_arch // 10 == 9 else "flashinfer"), ("", "")
    max_bs = _sglang_max_bs(p)
    # mem_fraction_static = (gpu - reserved) / gpu, reserved in MB (server_args.py, same rule 0.5.23).
    reserved = 512 + max(p.chunked_prefill_size, 2048) * 1.5 + max_bs * 2 + p.tp_size / 8 * 1024
    gpu_mb = p.gpu_mem_gb * 1024
    if gpu_mb > 60 * 1024:
        reserved = max(reserved, 10 * 1024)
    if p.mtp_accept_length > 1.0:
        reserved += 2 * 1024
    return Launch(
        attention, attention, attention, *dsa, "auto", round((gpu_mb - reserved) / gpu_mb, 3), kv, True,
        max_bs, len(capture_sizes(max_bs, p.mtp_accept_length > 1.0)), False,
    )  # fmt: skip


def _profile_launch(p: Profile) -> Launch:
    spec = p.mtp_accept_length > 1.0
    return Launch(
        p.attention_backend, p.attention_backend, p.attention_backend, p.dsa_prefill_backend,
        p.dsa_decode_backend, p.moe_runner_backend, p.mem_fraction_static, _kv_dtype(p, p.kv_cache_dtype),
        p.cuda_graph, p.cuda_graph_max_bs if p.cuda_graph else 0,
        len(capture_sizes(p.cuda_graph_max_bs, spec)) if p.cuda_graph else 0, p.enable_torch_compile,
    )  # fmt: skip


def effective_launch(p: Profile, f: LaunchFlags, version: str) -> Launch:
    """The launch ``f`` describes on profile ``p`` (flags not given: see ``--launch-defaults``)."""
    d = _profile_launch(p) if f.launch_defaults == "profile" else _sglang_defaults(p, version)
    graphs = d.cuda_graph
    if f.disable_cuda_graph is not None:
        graphs = not f.disable_cuda_graph
    elif f.launch_defaults == "profile" and (f.cuda_graph_max_bs or f.cuda_graph_bs):
        graphs = True  # a capture size names a launch without --disable-cuda-graph
    if f.cuda_graph_bs:
        max_bs = max(f.cuda_graph_bs)
    elif f.cuda_graph_max_bs:
        max_bs = f.cuda_graph_max_bs
    else:
        max_bs = d.cuda_graph_max_bs if d.cuda_graph else _sglang_max_bs(p)
    # Only sizes the request pool can hold are captured, plus the pool size (get_batch_sizes_to_capture).
    pool = p.max_running_requests
    if f.cuda_graph_bs:
        sizes = len({bs for bs in f.cuda_graph_bs if bs <= pool} | ({pool} if max_bs > pool else set()))
    else:
        sizes = len(capture_sizes(min(max_bs, pool), p.mtp_accept_length > 1.0))
    max_bs = min(max_bs, pool)
    attention = f.attention_backend or d.attention_backend
    return Launch(
        attention_backend=attention,
        prefill_attention_backend=f.prefill_attention_backend
        or f.attention_backend
        or d.prefill_attention_backend,
        decode_attention_backend=f.decode_attention_backend
        or f.attention_backend
        or d.decode_attention_backend,
        dsa_prefill_backend=(f.dsa_prefill_backend or d.dsa_prefill_backend) if _dsa_model(p) else "",
        dsa_decode_backend=(f.dsa_decode_backend or d.dsa_decode_backend) if _dsa_model(p) else "",
        moe_runner_backend=f.moe_runner_backend or d.moe_runner_backend,
        mem_fraction_static=f.mem_fraction_static
        if f.mem_fraction_static is not None
        else d.mem_fraction_static,
        kv_cache_dtype=_kv_dtype(p, f.kv_cache_dtype) if f.kv_cache_dtype else d.kv_cache_dtype,
        cuda_graph=graphs,
        cuda_graph_max_bs=max_bs if graphs else 0,
        cuda_graph_sizes=sizes if graphs else 0,
        enable_torch_compile=f.enable_torch_compile or d.enable_torch_compile,
    )


def _attention(p: Profile, phase_backend: str, dsa_backend: str) -> tuple[str, Backend]:
    """(name, table entry) of what runs one phase's attention."""
    if p.sm_arch // 10 != 12 or not _dsa_model(p):
        return phase_backend, _OK  # only the SM120 DSA findings are modelled
    if phase_backend in ("nsa", "dsa"):
        return dsa_backend, _DSA_SM120.get(dsa_backend, _OK)
    return phase_backend, _DENSE_ON_DSA_SM120.get(phase_backend, _UNSUPPORTED)


def _refusal_text(row: DsaRow, offending: list[str], eff: Launch, p: Profile) -> str:
    """SGLang 0.5.23's ValueError text for a refused row (flash_mla_sm120.py)."""
    if row.allowed:
        return (
            "GLM DSA with FP8 KV cache on NVIDIA SM120/SM121 supports only flashinfer_sparse_mla "
            f"(default) or triton_sparse_mla (prefill), but got {sorted(set(offending))}."
        )
    return (
        "flashinfer_sparse_mla supports only GLM DSA with FP8 KV cache on NVIDIA SM120/SM121; "
        f"got model_arch={p.architecture!r}, sm_major={p.sm_arch // 10}, "
        f"kv_cache_dtype=torch.{eff.kv_cache_dtype}, prefill_impl={eff.dsa_prefill_backend!r}, "
        f"decode_impl={eff.dsa_decode_backend!r}."
    )


def _refused(p: Profile, eff: Launch, version: str) -> str:
    """``refused:<SGLang's message>`` when SGLang's own start-up check rejects the DSA backends
    with this KV dtype: the ``effect="refused"`` rows of the launch table preflight judges by
    (``sglang_sentinel.sglang.launch_facts``), so the two agree. trtllm is exempt: the default profile is
    the deployment's trtllm launch in every version (its later failure on SM120 is not modelled)."""
    dsa_phases = {eff.prefill_attention_backend, eff.decode_attention_backend} & {"nsa", "dsa"}
    if not _dsa_model(p) or not dsa_phases:
        return ""
    prefill, decode = eff.dsa_prefill_backend, eff.dsa_decode_backend
    backends = [prefill, decode]
    glm = p.architecture == "GlmMoeDsaForCausalLM"
    verdicts = dsa_verdicts(version, p.sm_arch, prefill, decode, eff.kv_cache_dtype, glm=glm)
    for row in verdicts.bad:
        if row.effect != "refused":
            continue
        offending = [b for b in backends if (b not in row.allowed if row.allowed else b in row.backends)]
        if offending and set(offending) != {"trtllm"}:
            return "refused:" + _refusal_text(row, offending, eff, p)
    return ""


def _moe(p: Profile, name: str) -> Backend:
    if p.sm_arch // 10 != 12 or "Moe" not in p.architecture:
        return _OK
    return _MOE_SM120.get(name, _OK)


def kv_bytes(p: Profile, dtype: str) -> float:
    table = _DSA_KV_BYTES if _dsa_model(p) else _DENSE_KV_BYTES
    if dtype in table:
        return table[dtype]
    if not _dsa_model(p) and dtype in ("fp4_e2m1", "nvfp4", "fp4_mx_block16"):
        return 0.5
    raise ValueError(f"--kv-cache-dtype {dtype}: a DSA model ({p.architecture}) takes bf16 or fp8_e4m3")


def apply_launch(p: Profile, f: LaunchFlags, version: str, *, max_total_given: bool = False) -> Profile:
    """``p`` as launched with ``f`` (``max_total_given``: --max-total-tokens fixes the pool)."""
    if f.empty:
        return p
    base, eff = _profile_launch(p), effective_launch(p, f, version)
    if eff == base:
        return p
    spec = p.mtp_accept_length > 1.0
    changes: dict[str, object] = {
        "attention_backend": eff.attention_backend,
        "prefill_attention_backend": f.prefill_attention_backend or "",
        "decode_attention_backend": f.decode_attention_backend or "",
        "dsa_prefill_backend": eff.dsa_prefill_backend,
        "dsa_decode_backend": eff.dsa_decode_backend,
        "moe_runner_backend": eff.moe_runner_backend,
        "mem_fraction_static": eff.mem_fraction_static,
        "kv_cache_dtype": eff.kv_cache_dtype
        if eff.kv_cache_dtype != _kv_dtype(p, p.kv_cache_dtype)
        else p.kv_cache_dtype,
        "cuda_graph": eff.cuda_graph,
        "cuda_graph_max_bs": eff.cuda_graph_max_bs,
        "enable_torch_compile": eff.enable_torch_compile,
    }

    # Start-up: graph capture per size (and torch.compile of the small sizes), relative to the profile's.
    def capture(launch: Launch) -> float:
        if not launch.cuda_graph:
            return 0.0
        n = launch.cuda_graph_sizes
        if launch.enable_torch_compile:
            n += 2 * len(capture_sizes(min(_TORCH_COMPILE_MAX_BS, launch.cuda_graph_max_bs), spec))
        return n * p.graph_capture_s_per_bs

    changes["graph_capture_s"] = max(0.0, p.graph_capture_s + capture(eff) - capture(base))
    # KV pool: the fraction beyond the profile's goes to (or comes from) the pool.
    kv_gb = p.kv_mem_gb + p.gpu_mem_gb * (eff.mem_fraction_static - base.mem_fraction_static)
    failure = ""
    if not max_total_given and (
        eff.mem_fraction_static != base.mem_fraction_static or eff.kv_cache_dtype != base.kv_cache_dtype
    ):
        ratio = (kv_gb / p.kv_mem_gb) * kv_bytes(p, base.kv_cache_dtype) / kv_bytes(p, eff.kv_cache_dtype)
        tokens = int(p.max_total_num_tokens * ratio) // p.page_size * p.page_size
        changes["kv_mem_gb"] = max(0.0, kv_gb)
        changes["max_total_num_tokens"] = max(tokens, p.page_size)
        if tokens <= 0:
            failure = "kv_pool"
    # What is left outside weights + KV must hold the largest prefill's activations and the graphs.
    headroom_gb = p.gpu_mem_gb * (1 - eff.mem_fraction_static)
    need_gb = (
        p.static_overhead_gb
        + p.activation_mb_per_token * min(p.chunked_prefill_size, p.max_prefill_tokens) / 1024
    )
    if eff.cuda_graph:
        need_gb += _GRAPH_MB_PER_BS * eff.cuda_graph_max_bs / 1024
    if not failure and headroom_gb < need_gb:
        failure = "graph_oom" if eff.cuda_graph else "oom"
    # Backends: speed relative to the profile's launch, verdict of the effective one.
    pre_name, pre = _attention(p, eff.prefill_attention_backend, eff.dsa_prefill_backend)
    dec_name, dec = _attention(p, eff.decode_attention_backend, eff.dsa_decode_backend)
    moe = _moe(p, eff.moe_runner_backend)
    _, pre0 = _attention(p, base.prefill_attention_backend, base.dsa_prefill_backend)
    _, dec0 = _attention(p, base.decode_attention_backend, base.dsa_decode_backend)
    moe0 = _moe(p, base.moe_runner_backend)
    for name, b in ((pre_name, pre), (dec_name, dec), (eff.moe_runner_backend, moe)):
        if not failure and b.verdict == "unsupported":
            failure = f"unsupported:{name}"
    if not failure:
        failure = _refused(p, eff, version)
    changes["startup_failure"] = failure
    changes["output_garbage"] = next((b.garbage for b in (dec, pre, moe) if b.verdict == "garbage"), "")
    m, a_pre, a_dec = moe.speed / moe0.speed, pre.speed / pre0.speed, dec.speed / dec0.speed
    if (m, a_pre, a_dec) != (1.0, 1.0, 1.0):
        changes["prefill_tokens_per_s"] = p.prefill_tokens_per_s / (m * a_pre)
        changes["decode_base_s"] = p.decode_base_s * m
        changes["decode_graph_base_s"] = p.decode_graph_base_s * m
        changes["decode_per_req_s"] = p.decode_per_req_s * m
        changes["decode_per_kv_token_s"] = p.decode_per_kv_token_s * a_dec
        changes["decode_per_gen_token_s"] = p.decode_per_gen_token_s * a_dec
    return replace(p, **changes)  # type: ignore[arg-type]


def server_args_fields(p: Profile, version: str) -> dict[str, object]:
    """The launch as SGLang ``version`` reports it in /server_info (its server-args names: the
    dsa_* fields from the cli.dsa_names row, the -decode graph fields from
    cli.disable_cuda_graph_deprecated, as ``ServerArgs`` of those releases names them)."""
    graphs = p.cuda_graph
    out: dict[str, object] = {
        "prefill_attention_backend": p.prefill_attention_backend or None,
        "decode_attention_backend": p.decode_attention_backend or None,
        "moe_runner_backend": p.moe_runner_backend,
        "enable_torch_compile": p.enable_torch_compile,
    }
    dsa = (p.dsa_prefill_backend or None, p.dsa_decode_backend or None)
    sizes = capture_sizes(p.cuda_graph_max_bs, p.mtp_accept_length > 1.0) if graphs else None
    if has("cli.dsa_names", version):
        out |= {"dsa_prefill_backend": dsa[0], "dsa_decode_backend": dsa[1]}
    else:
        out |= {"nsa_prefill_backend": dsa[0], "nsa_decode_backend": dsa[1]}
    if not has("cli.disable_cuda_graph_deprecated", version):
        out |= {"cuda_graph_max_bs": p.cuda_graph_max_bs or None, "cuda_graph_bs": sizes}
    else:
        out |= {
            "cuda_graph_backend_decode": "full" if graphs else "disabled",
            "cuda_graph_max_bs_decode": p.cuda_graph_max_bs or None,
            "cuda_graph_bs_decode": sizes,
        }
    return out
