"""What `sentinel bench` says about its dataset before the run: the chosen registry entry's lines.

The datasets themselves (flags, checks, specs) are their modules' entries in
`sglang_sentinel.load.dataset_registry`; this prints nothing and builds nothing, it only asks
the entry for its lines, in bench_serving's wording.
"""

from __future__ import annotations

import argparse

from sglang_sentinel.load.dataset_registry import DATASETS

__all__ = ["dataset_notes", "dataset_warnings"]


def dataset_notes(args: argparse.Namespace) -> list[str]:
    """What bench_serving prints about the dataset it loaded (agentic-trace), same wording."""
    return DATASETS.entry(args.dataset_name).notes(args)


def dataset_warnings(args: argparse.Namespace) -> list[str]:
    """What bench_serving ignores and sentinel bench too, or does otherwise, said on stderr."""
    return DATASETS.entry(args.dataset_name).warnings(args)
