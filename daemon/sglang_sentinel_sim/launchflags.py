"""The SGLang launch flags ``sentinel sim`` accepts for its performance model: names, choices, versions.

Names and choices are SGLang's own (0.5.9 ``srt/server_args.py``; 0.5.23
``srt/arg_groups/fields/exec_.py``, ``model.py``, ``schedule.py`` and ``arg_groups/choices.py``).
argparse takes the union of both versions' choices, so a value neither knows is argparse's own
error (exit 2); a spelling or value the simulated version does not know is refused by
:func:`check_version` with argparse's wording (exit 2 too), as that SGLang would refuse it:
0.5.9 has ``--nsa-*-backend`` and ``--cuda-graph-max-bs``/``--cuda-graph-bs``; 0.5.23 has
``--dsa-*-backend``, ``--cuda-graph-max-bs-decode``/``--cuda-graph-bs-decode`` and
``--cuda-graph-backend-decode`` and only a deprecated ``--disable-cuda-graph``.

What each flag does to the simulated server: :mod:`sglang_sentinel_sim.launchmodel`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Final

__all__ = [
    "LAUNCH_DEFAULTS",
    "LaunchFlags",
    "add_launch_arguments",
    "check_version",
    "deprecation_warnings",
    "launch_flags_from",
]

# fmt: off
_ATTENTION_059: Final = (
    "triton", "torch_native", "flex_attention", "nsa", "cutlass_mla", "fa3", "fa4", "flashinfer",
    "flashmla", "trtllm_mla", "trtllm_mha", "dual_chunk_flash_attn", "aiter", "wave", "intel_amx",
    "ascend", "intel_xpu",
)
_ATTENTION_023: Final = (
    "triton", "torch_native", "flex_attention", "dsa", "nsa", "qsa", "dsv4", "compressed", "fa3", "fa4",
    "flashinfer", "llada2_cfg_flashinfer", "flashmla", "trtllm_mla", "cutedsl_mla", "tokenspeed_mla",
    "trtllm_mha", "hpc_ops", "minicpm_flashattn", "minicpm_flashinfer", "aiter", "wave", "intel_amx",
    "ascend", "intel_xpu",
)
_NSA_059: Final = ("flashmla_sparse", "flashmla_kv", "flashmla_auto", "fa3", "tilelang", "aiter", "trtllm")
_DSA_DECODE_023: Final = (
    "flashmla_sparse", "flashmla_sparse_q8", "flashmla_kv", "flashmla_auto", "flashinfer_sparse_mla", "fa3",
    "tilelang", "triton", "aiter", "trtllm", "intel_xpu",
)
_DSA_PREFILL_023: Final = (*_DSA_DECODE_023[:5], "triton_sparse_mla", *_DSA_DECODE_023[5:])
_MOE_059: Final = (
    "auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "flashinfer_cutlass",
    "flashinfer_mxfp4", "flashinfer_cutedsl", "cutlass",
)
_MOE_023: Final = (
    "auto", "deep_gemm", "triton", "triton_kernel", "flashinfer_trtllm", "experimental_sgl_trtllm",
    "flashinfer_trtllm_routed", "flashinfer_cutlass", "flashinfer_mxfp4", "flashinfer_cutedsl",
    "flashinfer_megamoe", "cutlass", "aiter", "marlin", "humming", "experimental_sgl_marlin", "lora_cutedsl",
    "lora_triton", "lora_marlin", "hpc_ops", "megamoe", "intel_xpu",
)
_KV_059: Final = ("auto", "fp8_e5m2", "fp8_e4m3", "bf16", "bfloat16", "fp4_e2m1")
_KV_023: Final = ("auto", "fp8_e5m2", "fp8_e4m3", "mxfp8", "bf16", "bfloat16", "nvfp4", "fp4_mx_block16")
_GRAPH_BACKENDS: Final = ("full", "breakable", "disabled")
# fmt: on

#: ``--launch-defaults``: where a flag that is not given takes its value from.
LAUNCH_DEFAULTS: Final = ("profile", "sglang")

# dest -> (flag, choices per version); a version absent from the mapping has no such flag.
_CHOICES: Final[dict[str, tuple[str, dict[str, tuple[str, ...]]]]] = {
    "kv_cache_dtype": ("--kv-cache-dtype", {"0.5.9": _KV_059, "0.5.23": _KV_023}),
    "attention_backend": ("--attention-backend", {"0.5.9": _ATTENTION_059, "0.5.23": _ATTENTION_023}),
    "prefill_attention_backend": (
        "--prefill-attention-backend",
        {"0.5.9": _ATTENTION_059, "0.5.23": _ATTENTION_023},
    ),
    "decode_attention_backend": (
        "--decode-attention-backend",
        {"0.5.9": _ATTENTION_059, "0.5.23": _ATTENTION_023},
    ),
    "nsa_prefill_backend": ("--nsa-prefill-backend", {"0.5.9": _NSA_059}),
    "nsa_decode_backend": ("--nsa-decode-backend", {"0.5.9": _NSA_059}),
    "dsa_prefill_backend": ("--dsa-prefill-backend", {"0.5.23": _DSA_PREFILL_023}),
    "dsa_decode_backend": ("--dsa-decode-backend", {"0.5.23": _DSA_DECODE_023}),
    "moe_runner_backend": ("--moe-runner-backend", {"0.5.9": _MOE_059, "0.5.23": _MOE_023}),
    "cuda_graph_backend_decode": ("--cuda-graph-backend-decode", {"0.5.23": _GRAPH_BACKENDS}),
    # Accepted (sentinel's 0.5.23 launch passes both); prefill graphs are not modelled.
    "cuda_graph_backend_prefill": ("--cuda-graph-backend-prefill", {"0.5.23": _GRAPH_BACKENDS}),
}
# Flags without choices that only one version has.
_ONLY: Final[dict[str, tuple[str, str]]] = {
    "cuda_graph_max_bs": ("--cuda-graph-max-bs", "0.5.9"),
    "cuda_graph_bs": ("--cuda-graph-bs", "0.5.9"),
    "cuda_graph_max_bs_decode": ("--cuda-graph-max-bs-decode", "0.5.23"),
    "cuda_graph_bs_decode": ("--cuda-graph-bs-decode", "0.5.23"),
    "disable_decode_cuda_graph": ("--disable-decode-cuda-graph", "0.5.23"),
}


def _union(dest: str) -> list[str]:
    out: list[str] = []
    for values in _CHOICES[dest][1].values():
        out.extend(v for v in values if v not in out)
    return out


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """The launch flags, in their own help group (SGLang's names; effects: docs/sim.md)."""
    g = parser.add_argument_group(
        "launch flags the performance model reacts to (SGLang's names; docs/sim.md)"
    )
    g.add_argument(
        "--mem-fraction-static", type=float, default=None, help="weights + KV pool share of GPU memory"
    )
    for dest, (flag, _) in _CHOICES.items():
        g.add_argument(flag, dest=dest, default=None, choices=_union(dest))
    g.add_argument("--disable-cuda-graph", action="store_true", help="0.5.23: deprecated spelling")
    g.add_argument("--disable-decode-cuda-graph", action="store_true", help="0.5.23 only")
    g.add_argument("--cuda-graph-max-bs", type=int, default=None, help="0.5.9 only")
    g.add_argument("--cuda-graph-bs", type=int, nargs="+", default=None, help="0.5.9 only")
    g.add_argument("--cuda-graph-max-bs-decode", type=int, default=None, help="0.5.23 only")
    g.add_argument("--cuda-graph-bs-decode", type=int, nargs="+", default=None, help="0.5.23 only")
    g.add_argument("--enable-torch-compile", action="store_true")
    g.add_argument(
        "--launch-defaults",
        choices=LAUNCH_DEFAULTS,
        default="profile",
        help="a flag not given: the profile's recorded launch (default; no flags = the fitted profile) "
        "or SGLang's own default for this model and GPU",
    )


@dataclass(frozen=True, slots=True)
class LaunchFlags:
    """What the command line said (None / False: not given), version-neutral."""

    mem_fraction_static: float | None = None
    kv_cache_dtype: str | None = None
    attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    decode_attention_backend: str | None = None
    dsa_prefill_backend: str | None = None
    dsa_decode_backend: str | None = None
    moe_runner_backend: str | None = None
    # True: graphs off; False: explicitly on (0.5.23 --cuda-graph-backend-decode full); None: not said.
    disable_cuda_graph: bool | None = None
    cuda_graph_max_bs: int | None = None
    cuda_graph_bs: tuple[int, ...] | None = None
    enable_torch_compile: bool = False
    launch_defaults: str = "profile"
    # dest -> the value as given, for check_version (which spelling, which choice).
    given: tuple[tuple[str, Any], ...] = field(default=(), compare=False)

    @property
    def empty(self) -> bool:
        return self == LaunchFlags()


def launch_flags_from(args: argparse.Namespace) -> LaunchFlags:
    """Fold the parsed options (both versions' spellings) into one :class:`LaunchFlags`."""
    given: list[tuple[str, Any]] = []
    for dest in (*_CHOICES, *_ONLY, "disable_cuda_graph", "mem_fraction_static", "enable_torch_compile"):
        value = getattr(args, dest, None)
        if value not in (None, False):
            given.append((dest, value))
    backend = args.cuda_graph_backend_decode
    disable: bool | None = None
    if args.disable_cuda_graph or args.disable_decode_cuda_graph or backend == "disabled":
        disable = True
    elif backend in ("full", "breakable"):
        disable = False
    bs = args.cuda_graph_bs or args.cuda_graph_bs_decode
    return LaunchFlags(
        mem_fraction_static=args.mem_fraction_static,
        kv_cache_dtype=args.kv_cache_dtype,
        attention_backend=args.attention_backend,
        prefill_attention_backend=args.prefill_attention_backend,
        decode_attention_backend=args.decode_attention_backend,
        dsa_prefill_backend=args.dsa_prefill_backend or args.nsa_prefill_backend,
        dsa_decode_backend=args.dsa_decode_backend or args.nsa_decode_backend,
        moe_runner_backend=args.moe_runner_backend,
        disable_cuda_graph=disable,
        cuda_graph_max_bs=args.cuda_graph_max_bs
        if args.cuda_graph_max_bs is not None
        else args.cuda_graph_max_bs_decode,
        cuda_graph_bs=tuple(bs) if bs else None,
        enable_torch_compile=bool(args.enable_torch_compile),
        launch_defaults=args.launch_defaults,
        given=tuple(given),
    )


def check_version(flags: LaunchFlags, version: str) -> None:
    """Raise ValueError (argparse's wording) for what SGLang ``version`` would refuse."""
    for dest, value in flags.given:
        if dest in _ONLY:
            flag, only = _ONLY[dest]
            if version != only:
                raise ValueError(f"unrecognized arguments: {flag} (SGLang {version} has no such option)")
        elif dest in _CHOICES:
            flag, per_version = _CHOICES[dest]
            choices = per_version.get(version)
            if choices is None:
                raise ValueError(f"unrecognized arguments: {flag} (SGLang {version} has no such option)")
            if value not in choices:
                shown = ", ".join(repr(c) for c in choices)
                raise ValueError(
                    f"argument {flag}: invalid choice: {value!r} (SGLang {version}: choose from {shown})"
                )
    f = flags.mem_fraction_static
    if f is not None and not 0 < f < 1:
        raise ValueError(f"--mem-fraction-static must be between 0 and 1, got {f}")
    for name, v in (("--cuda-graph-max-bs", flags.cuda_graph_max_bs),):
        if v is not None and v < 1:
            raise ValueError(f"{name} must be at least 1, got {v}")
    if flags.cuda_graph_bs is not None and min(flags.cuda_graph_bs) < 1:
        raise ValueError(f"--cuda-graph-bs sizes must be at least 1, got {list(flags.cuda_graph_bs)}")


def deprecation_warnings(flags: LaunchFlags, version: str) -> list[str]:
    """The warnings SGLang ``version``'s argparse prints for ``flags`` (0.5.23
    ``arg_groups/argparse_actions.py`` DeprecatedStoreTrueAction, in print_deprecated_warning's
    yellow)."""
    if version == "0.5.9" or not any(dest == "disable_cuda_graph" for dest, _ in flags.given):
        return []
    return [
        "\033[1;33m'--disable-cuda-graph' is deprecated and will be removed in a future release. "
        "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead.\033[0m"
    ]
