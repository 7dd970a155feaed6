"""Named hardware/model profiles: the numbers that make a simulated server behave like a real one.

A profile is everything the simulator needs to know about one deployment: what the model
reports about itself, the KV-pool capacity, and the performance model of the scheduler in the
server's own (unsped) time. ``--speed`` divides every duration; a profile never knows about it.

Performance model (per forward pass, seconds):

- prefill batch:  ``prefill_base_s + new_tokens / prefill_tokens_per_s``
- decode step:    ``decode_base_s + decode_per_req_s * running + decode_per_kv_token_s * kv_tokens
  + decode_per_gen_token_s * generated_tokens_held``; while a captured CUDA graph replays
  (``running <= cuda_graph_max_bs``) ``decode_graph_base_s`` replaces ``decode_base_s``

A profile also records the launch it models (memory fraction, backends, CUDA graphs): the launch
flags given to ``sentinel sim`` are applied relative to it by :mod:`sglang_sentinel_sim.launchflags`.

The default profile's constants are fitted to the GLM-5-NVFP4 / 8x RTX PRO 6000 figures quoted in
docs/sim.md by ``benchmarks/sim_fidelity.py`` (which prints the comparison table).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

__all__ = ["DEFAULT_PROFILE", "PROFILES", "Profile", "get_profile"]


@dataclass(frozen=True, slots=True)
class Profile:
    name: str
    description: str
    # What the server says about itself.
    model_path: str
    served_model_name: str
    architecture: str
    model_type: str
    context_length: int
    tp_size: int
    page_size: int
    kv_cache_dtype: str
    # Reasoning parser the deployment runs with (None = thinking text lands in `content`).
    reasoning_parser: str | None
    # Scheduler limits (SGLang's server-args names).
    max_total_num_tokens: int
    max_running_requests: int
    chunked_prefill_size: int
    max_prefill_tokens: int
    cuda_graph: bool
    # Performance model, server time (see module docstring).
    prefill_base_s: float
    prefill_tokens_per_s: float
    decode_base_s: float
    decode_per_req_s: float
    decode_per_kv_token_s: float
    # The launch the profile models (SGLang's server-args names; see launchflags.py).
    attention_backend: str = "flashinfer"
    # Per-phase overrides of attention_backend ("" = none), as SGLang's server args report them.
    prefill_attention_backend: str = ""
    decode_attention_backend: str = ""
    # DSA (NSA) models only: the (prefill, decode) backends as launched; "" = not a DSA model.
    dsa_prefill_backend: str = ""
    dsa_decode_backend: str = ""
    moe_runner_backend: str = "auto"
    mem_fraction_static: float = 0.85
    # Largest captured decode batch (0 = CUDA graphs off) and the fixed step cost when one replays.
    cuda_graph_max_bs: int = 0
    decode_graph_base_s: float = 0.0
    # Server seconds to capture one decode graph batch size at start-up.
    graph_capture_s_per_bs: float = 0.3
    # Start-up seconds spent capturing graphs beyond the other phases (launchflags.py sets it).
    graph_capture_s: float = 0.0
    enable_torch_compile: bool = False
    # GPU memory outside weights + KV that a start-up needs besides activations and graphs (GB/GPU).
    static_overhead_gb: float = 2.0
    # Activation memory of a prefill batch per token (MB/GPU); graphs: 2 MB per captured bs.
    activation_mb_per_token: float = 0.75
    # What the launch does wrong, set by launchflags.py: "" (nothing), the garbage style of a
    # known-bad backend combination ("nan", "bang"), the start-up failure ("kv_pool", "graph_oom",
    # "oom", "unsupported").
    output_garbage: str = ""
    startup_failure: str = ""
    # Extra cost per generated (not prompt) token held by the running batch.
    decode_per_gen_token_s: float = 0.0
    # Multi-token prediction: mean tokens accepted per decode step (1.0 = off) and draft length.
    mtp_accept_length: float = 1.0
    mtp_draft_tokens: int = 0
    # Start-up phases, server time (seconds): weight load, KV allocation, warm-up.
    load_weights_s: float = 2.0
    kv_alloc_s: float = 0.5
    warmup_s: float = 0.5
    # Memory figures shown in the start-up log and /server_info (GB per GPU).
    gpu_mem_gb: float = 95.0
    weight_mem_gb: float = 57.0
    kv_mem_gb: float = 23.5
    # Typical length of the hidden reasoning before a chat answer, in tokens.
    thinking_tokens: int = 48
    # torch's device name (0.5.23 /v1/loads "accelerator").
    gpu_name: str = "NVIDIA RTX PRO 6000 Blackwell Server Edition"
    # Compute capability (120 = SM120): which backend findings apply (launchmodel.py).
    sm_arch: int = 120

    def with_overrides(self, **changes: object) -> Profile:
        return replace(self, **changes)  # type: ignore[arg-type]


_GLM5 = Profile(
    name="glm5-nvfp4-8x-rtxpro6000",
    description="GLM-5-NVFP4 (744B MoE) TP=8 on 8x RTX PRO 6000 Blackwell over PCIe, CUDA graphs off",
    model_path="/models/GLM-5-NVFP4",
    served_model_name="glm-5",
    architecture="GlmMoeDsaForCausalLM",
    model_type="glm_moe_dsa",
    context_length=202752,
    tp_size=8,
    page_size=64,
    kv_cache_dtype="fp8_e4m3",
    reasoning_parser="glm45",
    max_total_num_tokens=524288,
    max_running_requests=2048,
    chunked_prefill_size=8192,
    max_prefill_tokens=16384,
    cuda_graph=False,
    # The seed deployment's launch line (docs/sglang-versions.md): trtllm NSA backends,
    # --mem-fraction-static 0.85, --disable-cuda-graph; KV dtype auto = fp8_e4m3 on SM120.
    attention_backend="nsa",
    dsa_prefill_backend="trtllm",
    dsa_decode_backend="trtllm",
    # With graphs: 20 ms less fixed cost per decode step (an assumption, docs/sim.md).
    decode_graph_base_s=0.0577,
    graph_capture_s_per_bs=0.35,
    # Fitted (benchmarks/sim_fidelity.py, the virtual engine replaying the measured requests):
    # a decode step is mostly fixed cost (weights over PCIe, no CUDA graphs), plus a part that
    # follows the KV tokens in the batch (DSA indexer/attention), plus an extra part per generated
    # token held -- the empirical term that makes the 32-at-once run's tail as slow as measured.
    prefill_base_s=0.001,
    prefill_tokens_per_s=1900.0,
    decode_base_s=0.0777,
    decode_per_req_s=0.0000016,
    decode_per_kv_token_s=0.00000525,
    decode_per_gen_token_s=0.0000073,
)

_GLM5_MTP = _GLM5.with_overrides(
    name="glm5-nvfp4-8x-rtxpro6000-mtp",
    description="as glm5-nvfp4-8x-rtxpro6000 with MTP (EAGLE, 3 draft tokens, accept length ~2.4)",
    decode_base_s=0.092,
    decode_graph_base_s=0.072,
    decode_per_req_s=0.00005,
    decode_per_kv_token_s=0.0000062,
    decode_per_gen_token_s=0.0000086,
    mtp_accept_length=2.4,
    mtp_draft_tokens=3,
)

_TINY = Profile(
    name="tiny-llama-1x-h200",
    description="a small dense model on one H200: fast steps, small KV pool (for tests of KV pressure)",
    model_path="/models/Llama-3.2-1B-Instruct",
    served_model_name="llama-3.2-1b",
    architecture="LlamaForCausalLM",
    model_type="llama",
    context_length=131072,
    tp_size=1,
    gpu_name="NVIDIA H200",
    sm_arch=90,
    page_size=1,
    kv_cache_dtype="bfloat16",
    reasoning_parser=None,
    max_total_num_tokens=65536,
    max_running_requests=256,
    chunked_prefill_size=8192,
    max_prefill_tokens=16384,
    cuda_graph=True,
    # SGLang's default for a 90-160 GB GPU at TP < 4 (server_args.py _handle_gpu_memory_settings).
    cuda_graph_max_bs=256,
    decode_graph_base_s=0.0045,
    graph_capture_s_per_bs=0.02,
    static_overhead_gb=1.0,
    activation_mb_per_token=0.1,
    prefill_base_s=0.004,
    prefill_tokens_per_s=60000.0,
    # Eager step: 2 ms more than a replayed graph (an assumption, docs/sim.md).
    decode_base_s=0.0065,
    decode_per_req_s=0.00004,
    decode_per_kv_token_s=0.00000002,
    load_weights_s=1.0,
    gpu_mem_gb=140.0,
    weight_mem_gb=2.5,
    kv_mem_gb=8.0,
    thinking_tokens=0,
)

PROFILES: dict[str, Profile] = {p.name: p for p in (_GLM5, _GLM5_MTP, _TINY)}
DEFAULT_PROFILE = _GLM5.name


def get_profile(name: str) -> Profile:
    try:
        return PROFILES[name]
    except KeyError:
        known = ", ".join(sorted(PROFILES))
        raise ValueError(f"unknown simulator profile {name!r} (known: {known})") from None
