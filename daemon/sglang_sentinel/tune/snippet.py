"""The winning configuration as TOML that pastes into the config: ``[server.profiles.<name>]``.

An SGLang profile's own fields take the flags they render (``mem_fraction_static``,
``disable_cuda_graph``, ``attention_backend``, ``kv_cache_dtype``, ``dsa_*_backend``): a flag in
``extra_args`` as well would be rendered twice. Everything else goes to ``extra_args``, which
replaces the profile's list, so the snippet repeats the base's extra arguments with the
winning flags applied. A command profile (the simulator) takes every flag in ``extra_args``.
"""

from __future__ import annotations

import json

from sglang_sentinel.supervise.settings import LaunchProfile
from sglang_sentinel.tune.settings import FlagValue
from sglang_sentinel.tune.space import Flags, apply_flags

__all__ = ["winner_toml"]

_FIELDS = {
    "--mem-fraction-static": "mem_fraction_static",
    "--disable-cuda-graph": "disable_cuda_graph",
    "--attention-backend": "attention_backend",
    "--kv-cache-dtype": "kv_cache_dtype",
    "--nsa-prefill-backend": "dsa_prefill_backend",
    "--dsa-prefill-backend": "dsa_prefill_backend",
    "--nsa-decode-backend": "dsa_decode_backend",
    "--dsa-decode-backend": "dsa_decode_backend",
}


def _toml(value: FlagValue | list[str]) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return format(value, "g") if isinstance(value, float) else str(value)
    # A JSON string is a valid TOML basic string for the characters flags are made of.
    return json.dumps(value)


def winner_toml(profile_name: str, profile: LaunchProfile, flags: Flags) -> str:
    fields: dict[str, FlagValue] = {}
    rest: Flags = {}
    for flag, value in flags.items():
        name = _FIELDS.get(flag) if profile.kind == "sglang" else None
        if name is None:
            rest[flag] = value
        elif name == "disable_cuda_graph":
            fields[name] = bool(value)
        elif name == "mem_fraction_static":
            fields[name] = float(value)
        else:
            fields[name] = "" if value is False else str(value)
    lines = [f"[server.profiles.{json.dumps(profile_name) if '.' in profile_name else profile_name}]"]
    lines += [f"{k} = {_toml(v)}" for k, v in fields.items()]
    if rest or not flags:
        extra = apply_flags(list(profile.extra_args), rest)
        lines.append(f"extra_args = [{', '.join(json.dumps(a) for a in extra)}]")
    return "\n".join(lines) + "\n"
