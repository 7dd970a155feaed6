"""The SGLang launch flags ``sentinel sim`` accepts for its performance model: names, choices, releases.

Names are SGLang's own. Which release has which flag, and which choices each release's parser
gives it, is the daemon's generated table (``sglang_sentinel.sglang.versions``: ``options.json``,
read from every release's ``srt/server_args.py`` and ``srt/arg_groups/`` by scripts/sglang-options).
argparse takes the union over every release read, so a value none knows is argparse's own error
(exit 2); a spelling or value the simulated release does not know is refused by
:func:`check_version` with argparse's wording (exit 2 too), as that SGLang would refuse it: e.g.
``--nsa-*-backend`` through 0.5.19, ``--dsa-*-backend`` from 0.5.13, ``--cuda-graph-max-bs``/
``--cuda-graph-bs`` through 0.5.19, their ``-decode`` spellings, ``--cuda-graph-backend-decode`` and
``--disable-decode-cuda-graph`` from 0.5.14 (where ``--disable-cuda-graph`` becomes deprecated).

What each flag does to the simulated server: :mod:`sglang_sentinel_sim.launchmodel`.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from typing import Any, Final

from sglang_sentinel.sglang.versions import RELEASES_READ, accepted_choices, accepted_options, parse_version
from sglang_sentinel_sim.versions import has

__all__ = [
    "LAUNCH_DEFAULTS",
    "LaunchFlags",
    "add_launch_arguments",
    "check_version",
    "deprecation_warnings",
    "has_option",
    "launch_flags_from",
    "releases_with",
]

#: ``--launch-defaults``: where a flag that is not given takes its value from.
LAUNCH_DEFAULTS: Final = ("profile", "sglang")

# dest -> flag, for the flags with choices (each release's own, from options.json).
_CHOICES: Final[dict[str, str]] = {
    "kv_cache_dtype": "--kv-cache-dtype",
    "attention_backend": "--attention-backend",
    "prefill_attention_backend": "--prefill-attention-backend",
    "decode_attention_backend": "--decode-attention-backend",
    "nsa_prefill_backend": "--nsa-prefill-backend",
    "nsa_decode_backend": "--nsa-decode-backend",
    "dsa_prefill_backend": "--dsa-prefill-backend",
    "dsa_decode_backend": "--dsa-decode-backend",
    "moe_runner_backend": "--moe-runner-backend",
    "cuda_graph_backend_decode": "--cuda-graph-backend-decode",
    # Accepted; prefill graphs are not modelled.
    "cuda_graph_backend_prefill": "--cuda-graph-backend-prefill",
}
# dest -> flag, for the flags without choices (some only in some releases).
_PLAIN: Final[dict[str, str]] = {
    "mem_fraction_static": "--mem-fraction-static",
    "disable_cuda_graph": "--disable-cuda-graph",
    "disable_decode_cuda_graph": "--disable-decode-cuda-graph",
    "cuda_graph_max_bs": "--cuda-graph-max-bs",
    "cuda_graph_bs": "--cuda-graph-bs",
    "cuda_graph_max_bs_decode": "--cuda-graph-max-bs-decode",
    "cuda_graph_bs_decode": "--cuda-graph-bs-decode",
    "enable_torch_compile": "--enable-torch-compile",
}
# Graph backends that capture (``disabled`` turns graphs off).
_GRAPHS_ON: Final = ("full", "breakable", "tc_piecewise")
# DeprecatedAliasStoreAction of the releases that still accept the old spelling (srt/server_args.py
# of 0.5.13 – 0.5.19): old flag -> (its new name, the behaviour row from which it is an alias).
_ALIASES: Final[dict[str, tuple[str, str]]] = {
    "--nsa-prefill-backend": ("--dsa-prefill-backend", "cli.dsa_names"),
    "--nsa-decode-backend": ("--dsa-decode-backend", "cli.dsa_names"),
    "--cuda-graph-max-bs": ("--cuda-graph-max-bs-decode", "cli.disable_cuda_graph_deprecated"),
    "--cuda-graph-bs": ("--cuda-graph-bs-decode", "cli.disable_cuda_graph_deprecated"),
}


def has_option(version: str, flag: str) -> bool:
    """Whether SGLang ``version``'s argument parser registers ``flag`` (options.json)."""
    return flag in accepted_options(parse_version(version))


def releases_with(flag: str) -> str:
    """The span of releases read whose parser registers ``flag``: ``0.5.13 – 0.5.23``."""
    having = [str(r) for r in RELEASES_READ if flag in accepted_options(r)]
    if not having:
        return "no release read"
    return having[0] if len(having) == 1 else f"{having[0]} – {having[-1]}"


def _union(flag: str) -> list[str]:
    """Every choice any release read gives ``flag``, in release order."""
    out: list[str] = []
    for release in RELEASES_READ:
        out.extend(c for c in accepted_choices(release, flag) or () if c not in out)
    return out


def add_launch_arguments(parser: argparse.ArgumentParser) -> None:
    """The launch flags, in their own help group (SGLang's names; effects: docs/sim.md)."""
    g = parser.add_argument_group(
        "launch flags the performance model reacts to (SGLang's names; docs/sim.md)"
    )
    g.add_argument(
        "--mem-fraction-static", type=float, default=None, help="weights + KV pool share of GPU memory"
    )
    for dest, flag in _CHOICES.items():
        g.add_argument(flag, dest=dest, default=None, choices=_union(flag))
    g.add_argument("--disable-cuda-graph", action="store_true", help="deprecated from 0.5.14")
    g.add_argument("--disable-decode-cuda-graph", action="store_true", help="from 0.5.14")
    g.add_argument("--cuda-graph-max-bs", type=int, default=None, help="through 0.5.19")
    g.add_argument("--cuda-graph-bs", type=int, nargs="+", default=None, help="through 0.5.19")
    g.add_argument("--cuda-graph-max-bs-decode", type=int, default=None, help="from 0.5.14")
    g.add_argument("--cuda-graph-bs-decode", type=int, nargs="+", default=None, help="from 0.5.14")
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
    """What the command line said (None / False: not given), release-neutral."""

    mem_fraction_static: float | None = None
    kv_cache_dtype: str | None = None
    attention_backend: str | None = None
    prefill_attention_backend: str | None = None
    decode_attention_backend: str | None = None
    dsa_prefill_backend: str | None = None
    dsa_decode_backend: str | None = None
    moe_runner_backend: str | None = None
    # True: graphs off; False: explicitly on (--cuda-graph-backend-decode full); None: not said.
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
    """Fold the parsed options (every release's spellings) into one :class:`LaunchFlags`."""
    given: list[tuple[str, Any]] = []
    for dest in (*_CHOICES, *_PLAIN):
        value = getattr(args, dest, None)
        if value not in (None, False):
            given.append((dest, value))
    backend = args.cuda_graph_backend_decode
    disable: bool | None = None
    if args.disable_cuda_graph or args.disable_decode_cuda_graph or backend == "disabled":
        disable = True
    elif backend in _GRAPHS_ON:
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
    release = parse_version(version)
    accepted = accepted_options(release)
    for dest, value in flags.given:
        flag = _CHOICES.get(dest) or _PLAIN[dest]
        if flag not in accepted:
            raise ValueError(
                f"unrecognized arguments: {flag} (SGLang {version} has no such option; "
                f"{releases_with(flag)} have it)"
            )
        choices = accepted_choices(release, flag) if dest in _CHOICES else None
        if choices is not None and value not in choices:
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


def _yellow(message: str) -> str:
    # print_deprecated_warning (srt/arg_groups/argparse_actions.py, 0.5.13 and later): bold yellow.
    return f"\033[1;33m{message}\033[0m"


def deprecation_warnings(flags: LaunchFlags, version: str) -> list[str]:
    """The warnings SGLang ``version``'s argparse prints for ``flags``: ``--disable-cuda-graph``
    (a DeprecatedStoreTrueAction from 0.5.14) and the old spellings that are DeprecatedAliasStoreActions
    while still accepted (``arg_groups/argparse_actions.py``)."""
    out: list[str] = []
    for dest, _ in flags.given:
        flag = _CHOICES.get(dest) or _PLAIN[dest]
        if dest == "disable_cuda_graph" and has("cli.disable_cuda_graph_deprecated", version):
            out.append(
                _yellow(
                    "'--disable-cuda-graph' is deprecated and will be removed in a future release. "
                    "Use '--cuda-graph-backend-{decode,prefill}=disabled' instead."
                )
            )
        elif flag in _ALIASES and has(_ALIASES[flag][1], version):
            out.append(
                _yellow(
                    f"'{flag}' is deprecated and will be removed in a future release. "
                    f"Use '{_ALIASES[flag][0]}' instead."
                )
            )
    return out
