"""Named hardware/model profiles: the numbers that make a simulated server behave like a real one.

A profile is everything the simulator needs to know about one deployment: what the model
reports about itself, the KV-pool capacity, and the performance model of the scheduler in the
server's own (unsped) time. ``--speed`` divides every duration; a profile never knows about it.

Performance model (per forward pass, seconds):

- prefill batch:  ``prefill_base_s + new_tokens / prefill_tokens_per_s``
- decode step:    ``decode_base_s + decode_per_req_s * running + decode_per_kv_token_s * kv_tokens
  + decode_per_gen_token_s * generated_tokens_held``

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
    page_size=1,
    kv_cache_dtype="bfloat16",
    reasoning_parser=None,
    max_total_num_tokens=65536,
    max_running_requests=256,
    chunked_prefill_size=8192,
    max_prefill_tokens=16384,
    cuda_graph=True,
    prefill_base_s=0.004,
    prefill_tokens_per_s=60000.0,
    decode_base_s=0.0045,
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
