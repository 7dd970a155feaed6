"""bench_serving 0.5.23's flags that `sentinel bench` does not take, each with the reason.

`sentinel bench` accepts every flag of SGLang 0.5.23's `python -m sglang.bench_serving`
(`sglang.benchmark.serving`) that means something for an SGLang or OpenAI-compatible server,
under the same name and meaning (docs/bench.md has the whole table). The rest are parsed (so
that their values do not read as stray arguments) and refused with exit status 2 and this
reason, instead of argparse's bare "unrecognized arguments".
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

__all__ = ["REJECTED", "REJECTED_DATASETS", "add_rejected_options", "rejected_messages"]

_MULTIMODAL = "image datasets are multimodal; sentinel bench sends text and token-id prompts only"

# --dataset-name values bench_serving 0.5.23 has and sentinel bench refuses.
REJECTED_DATASETS: dict[str, str] = {
    "mmmu": _MULTIMODAL,
    "image": _MULTIMODAL,
    "longbench_v2": "longbench_v2 is not implemented (a Hugging Face download)",
    "speed-bench": "the speed-bench dataset is not implemented (it is a Hugging Face download)",
}

REJECTED: dict[str, str] = {
    "--speed-bench-category": "the speed-bench dataset is not implemented (it is a Hugging Face download)",
    "--speed-bench-output-len": "the speed-bench dataset is not implemented (it is a Hugging Face download)",
    "--image-count": _MULTIMODAL,
    "--image-resolution": _MULTIMODAL,
    "--random-image-count": _MULTIMODAL,
    "--image-format": _MULTIMODAL,
    "--image-content": _MULTIMODAL,
    "--rust-client": "bench_serving's optional Rust HTTP client; sentinel bench always uses its own",
    "--rust-worker-threads": "bench_serving's optional Rust HTTP client; sentinel bench always uses its own",
}


class _Rejected(argparse.Action):
    """Takes any values the flag had in bench_serving and remembers that it was given."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        given: list[str] = list(getattr(namespace, "bench_serving_rejected", None) or [])
        given.append(self.option_strings[0])
        namespace.bench_serving_rejected = given


def add_rejected_options(parser: argparse.ArgumentParser) -> None:
    group = parser.add_argument_group("bench_serving flags that sentinel bench refuses (see docs/bench.md)")
    for flag in REJECTED:
        dest = "rejected_" + flag[2:].replace("-", "_")  # never one of the accepted flags' dests
        group.add_argument(flag, nargs="*", action=_Rejected, dest=dest, default=None, help=argparse.SUPPRESS)
    parser.set_defaults(bench_serving_rejected=None)


def rejected_messages(args: argparse.Namespace) -> list[str]:
    """One line per refused flag that was given: the flag and why."""
    return [f"{flag}: {REJECTED[flag]}" for flag in dict.fromkeys(args.bench_serving_rejected or [])]
