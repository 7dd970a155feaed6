"""Every `sentinel bench` dataset, one line each: the one place that names them.

Everything else reads this map: `--dataset-name`'s choices and the datasets' flags
(`DatasetRegistry.add_flags`), building the spec from the flags (`entry(name).from_args`), the
prompts of a run (`PromptSource`, through `entry_for(spec.dataset).load`) and the dataset's keys
in the result JSON (`RunResult.to_dict`). Adding a dataset is its module (its spec type and its
`DatasetEntry`, sglang_sentinel.load.dataset_entry) and its line below; docs/bench.md
("Adding a dataset") shows one. bench_serving has the same map (`DATASET_MAPPING`,
`sglang/benchmark/datasets/__init__.py`); the order here is the order of the CLI's choices.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator, Mapping
from typing import Any

from sglang_sentinel.load import (
    agentic,
    jsonl,
    random_prompts,
    shared_prefix,
    sharegpt,
    trace,
)
from sglang_sentinel.load.dataset_entry import DatasetEntry
from sglang_sentinel.load.spec import DatasetSpec, LoadSpec, SpecError

__all__ = ["DATASETS", "DatasetRegistry"]


class DatasetRegistry:
    """Dataset entries by `--dataset-name`, immutable; `plus` makes a larger one."""

    def __init__(self, *entries: DatasetEntry[Any]) -> None:
        by_name: dict[str, DatasetEntry[Any]] = {}
        by_type: dict[type[DatasetSpec], DatasetEntry[Any]] = {}
        for e in entries:
            if e.name in by_name:
                raise ValueError(f"dataset {e.name!r} registered twice")
            first = by_type.setdefault(e.spec_type, e)
            # A spec alone says how it loads and reports (the daemon's specs have no name).
            if (first.load, first.result_keys) != (e.load, e.result_keys):
                raise ValueError(
                    f"datasets {first.name!r} and {e.name!r} share {e.spec_type.__name__}: "
                    "they must share its loader and result keys"
                )
            by_name[e.name] = e
        self._by_name: Mapping[str, DatasetEntry[Any]] = by_name
        self._by_type: Mapping[type[DatasetSpec], DatasetEntry[Any]] = by_type

    def plus(self, *entries: DatasetEntry[Any]) -> DatasetRegistry:
        return DatasetRegistry(*self._by_name.values(), *entries)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(self._by_name)

    def __iter__(self) -> Iterator[DatasetEntry[Any]]:
        return iter(self._by_name.values())

    def entry(self, name: str) -> DatasetEntry[Any]:
        try:
            return self._by_name[name]
        except KeyError:
            raise SpecError(f"unknown dataset {name!r}; known: {', '.join(self._by_name)}") from None

    def entry_for(self, dataset: DatasetSpec) -> DatasetEntry[Any]:
        """The entry a spec's dataset is loaded and reported by (the first of its type)."""
        try:
            return self._by_type[type(dataset)]
        except KeyError:
            raise SpecError(f"no dataset registered for {type(dataset).__name__}") from None

    def add_flags(self, parser: argparse.ArgumentParser) -> None:
        """Each entry's flags, once per function, on a group titled with the names sharing it."""
        owners: dict[Any, list[str]] = {}
        for e in self:
            owners.setdefault(e.add_flags, []).append(e.name)
        for add, names in owners.items():
            title = "dataset " + ", ".join(names)
            add(parser.add_argument_group(title))

    def check_args(self, args: argparse.Namespace) -> None:
        """Every entry's check, once per function: its flags given with another dataset."""
        for check in dict.fromkeys(e.check_args for e in self):
            check(args)

    def result_keys(self, spec: LoadSpec) -> Mapping[str, Any]:
        return self.entry_for(spec.dataset).result_keys(spec.dataset, spec)


DATASETS = DatasetRegistry(
    random_prompts.RANDOM,
    random_prompts.RANDOM_IDS,
    sharegpt.SHAREGPT,
    jsonl.OPENAI,
    shared_prefix.SHARED_PREFIX,
    jsonl.JSONL,
    jsonl.CUSTOM,
    trace.MOONCAKE,
    agentic.AGENTIC_TRACE,
)
