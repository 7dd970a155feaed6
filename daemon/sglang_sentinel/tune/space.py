"""The configurations of a tune: the cartesian product of the varied flags, baseline first.

A configuration is a flag -> value mapping applied to the base argv (:func:`apply_flags`): every
occurrence of the flag in the base is removed first, then ``true`` adds the bare flag, ``false``
nothing, any other value ``FLAG VALUE``. Products larger than ``max_configs`` are refused (or
sampled, seeded, when ``sample`` is set): a tune that would take days must be a decision, not
an accident.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Mapping, Sequence

from sglang_sentinel.tune.settings import FlagValue, RangeSpec, TuneSettings, check_flag_name

__all__ = [
    "Flags",
    "SpaceError",
    "apply_flags",
    "expand",
    "flag_label",
    "merge_vary",
    "parse_value",
    "parse_vary",
    "space_values",
]

Flags = dict[str, FlagValue]


class SpaceError(ValueError):
    """A search space that cannot be expanded (too large, contradictory); the message says why."""


def parse_value(text: str) -> FlagValue:
    """``--vary`` values: true/false, integers, decimals, else the text itself."""
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    for kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            continue
    return text.strip()


def parse_vary(text: str) -> tuple[str, tuple[FlagValue, ...]]:
    """``FLAG=V1,V2,...`` -> (flag, values). ValueError naming the problem."""
    flag, sep, values = text.partition("=")
    if not sep or not values.strip():
        raise ValueError(f"--vary {text!r}: expected FLAG=V1,V2,...")
    try:
        check_flag_name(flag.strip())
    except ValueError as exc:
        raise ValueError(f"--vary {text!r}: {exc}") from None
    parsed = tuple(parse_value(v) for v in values.split(",") if v.strip())
    if len(set(map(repr, parsed))) != len(parsed):
        raise ValueError(f"--vary {text!r}: repeated values")
    return flag.strip(), parsed


def merge_vary(settings: TuneSettings, vary: Sequence[str]) -> TuneSettings:
    """The ``[tune]`` space with the command line's ``--vary`` flags added (or replacing)."""
    space = dict(settings.space)
    for item in vary:
        flag, values = parse_vary(item)
        space[flag] = values
    return settings.model_copy(update={"space": space})


def space_values(settings: TuneSettings) -> dict[str, list[FlagValue]]:
    """flag -> the list of its values (ranges expanded): the document's ``space``."""
    out: dict[str, list[FlagValue]] = {}
    for flag, values in settings.space.items():
        out[flag] = list(values.values()) if isinstance(values, RangeSpec) else list(values)
    return out


def _key(flags: Mapping[str, FlagValue]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, repr(v)) for k, v in flags.items()))


def expand(settings: TuneSettings) -> list[Flags]:
    """Every configuration to try, the baseline first; SpaceError when the product is too large."""
    space = space_values(settings)
    names = list(space)
    product = [dict(zip(names, combo, strict=True)) for combo in itertools.product(*space.values())]
    if not names:
        product = []
    baseline: Flags = dict(settings.baseline)
    rest = [c for c in product if _key(c) != _key(baseline)]
    total = len(rest) + 1
    if total > settings.max_configs and settings.sample is None:
        raise SpaceError(
            f"the search space has {total} configurations (baseline included), more than "
            f"[tune] max_configs = {settings.max_configs}; narrow it, raise max_configs, or set "
            "[tune] sample = N to measure N of them drawn at random"
        )
    if settings.sample is not None and total > settings.sample:
        # Seeded and order-preserving: the same config samples the same configurations on resume.
        picked = sorted(random.Random(settings.seed).sample(range(len(rest)), settings.sample - 1))
        rest = [rest[i] for i in picked]
    return [baseline, *rest]


def flag_label(flags: Mapping[str, FlagValue]) -> str:
    """A short human name: ``--disable-cuda-graph --mem-fraction-static=0.85`` ("(base)" if empty)."""
    parts = []
    for flag, value in flags.items():
        if value is True:
            parts.append(flag)
        elif value is False:
            parts.append(f"no {flag}")
        else:
            parts.append(f"{flag}={_text(value)}")
    return " ".join(parts) or "(base launch)"


def _text(value: FlagValue) -> str:
    return format(value, "g") if isinstance(value, float) else str(value)


def _strip(argv: list[str], spellings: Sequence[str]) -> list[str]:
    """argv without the flag (any of ``spellings``), its ``=value`` form, and its separate value."""
    out: list[str] = []
    skip = False
    for i, arg in enumerate(argv):
        if skip:
            skip = False
            continue
        bare = arg.split("=", 1)[0]
        if bare in spellings or arg in spellings:
            nxt = argv[i + 1] if i + 1 < len(argv) else None
            # A separate value follows unless the next token is another flag (negative numbers
            # are values: "--x -1").
            if "=" not in arg and nxt is not None and (not nxt.startswith("--")):
                skip = True
            continue
        out.append(arg)
    return out


def apply_flags(
    argv: Sequence[str],
    flags: Mapping[str, FlagValue],
    aliases: Mapping[str, tuple[tuple[str, ...], tuple[str, ...]]] | None = None,
) -> list[str]:
    """``argv`` with ``flags`` applied (see the module docstring).

    ``aliases`` maps a flag to (spellings to remove, tokens that mean ``true``) for flags the
    SGLang version renders differently: ``--disable-cuda-graph`` is two ``--cuda-graph-backend-*``
    flags from 0.5.20, ``--nsa-*`` became ``--dsa-*``.
    """
    out = list(argv)
    extra: list[str] = []
    for flag, value in flags.items():
        spellings, true_tokens = (aliases or {}).get(flag, ((flag,), (flag,)))
        out = _strip(out, (flag, *spellings))
        if value is True:
            extra += list(true_tokens)
        elif value is False:
            continue
        else:
            name = true_tokens[0] if len(true_tokens) == 1 and not true_tokens[0].count("=") else flag
            extra += [name, _text(value)]
    return [*out, *extra]
