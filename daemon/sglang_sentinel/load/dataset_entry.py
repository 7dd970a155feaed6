"""What one `sentinel bench` dataset is: the `DatasetEntry` a dataset's module declares.

An entry says everything about its dataset that sits anywhere else: its `--dataset-name`, its
spec type, the flags it adds to the parser and how it builds its spec from them, the prompts
it gives a run (`Prompts`) and its keys in the result JSON. `sglang_sentinel.load.dataset_registry`
holds one line per entry and everything else (the CLI's choices, `build_spec`, `PromptSource`,
`RunResult.to_dict`) reads them from there. SGLang's bench_serving has the same shape
(`DATASET_MAPPING` in `sglang/benchmark/datasets/__init__.py`: a name, a class with `from_args`
and `load`); entries here also carry the flags and result keys that bench_serving keeps elsewhere.

Entries are plain functions over `argparse.Namespace` and the spec: no CLI import, so the load
layer stays below the CLI. A bad flag value is a `SpecError` whose message starts with the flag
(``--dataset-name sharegpt needs --dataset-path``); the CLI prints it and exits 2.
"""

from __future__ import annotations

import argparse
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from sglang_sentinel.load.prompt import Prompt
from sglang_sentinel.load.spec import DatasetSpec

if TYPE_CHECKING:
    from sglang_sentinel.load.spec import ArrivalProcess, Backend, LoadSpec

__all__ = ["Built", "DatasetEntry", "FilePrompts", "Prompts"]

D = TypeVar("D", bound=DatasetSpec)


@dataclass(frozen=True, slots=True)
class Built:
    """What an entry's `from_args` makes of the flags: the dataset, and what it decides of the run.

    `requests`: the run's request count when the dataset fixes it (a trace's sessions x rounds,
    a file's conversations); None: --num-prompts (or --duration) decides. `arrival`: the arrival
    process when the dataset dictates it (a trace's timestamps); None: the flags decide."""

    dataset: DatasetSpec
    requests: int | None = None
    arrival: ArrivalProcess | None = None


class Prompts:
    """One run's prompts of one dataset, what `PromptSource` serves; a loader returns one.

    `prompt(i, rng)` is the i-th measured prompt; `rng` is the run's seeded stream (generated
    datasets draw from it, file datasets ignore it). `warmup_prompts(rng)` are what the warm-up
    cycles through, drawn from a stream of their own, so the measured prompts are the same with
    or without a warm-up. `trace_offsets`: a trace's planned send offsets (s), one per prompt."""

    trace_offsets: Sequence[float] = ()

    def prompt(self, i: int, rng: random.Random) -> Prompt:
        raise NotImplementedError

    def requests(self, arrivals: int) -> int:
        """Requests that many arrivals make (a conversation is one arrival, one request per turn)."""
        return arrivals

    def warmup_prompts(self, rng: random.Random) -> list[Prompt]:
        return [self.prompt(0, rng)]

    @property
    def file(self) -> list[Prompt] | None:
        """A file dataset's prompts, all of them; None for a generated one."""
        return None


class FilePrompts(Prompts):
    """A file's prompts, in order, cycled when the run needs more than it has."""

    def __init__(
        self, prompts: list[Prompt], *, offsets: Sequence[float] = (), warmup: Prompt | None = None
    ) -> None:
        self._prompts = prompts
        self.trace_offsets = tuple(offsets)
        self._warmup = warmup

    def prompt(self, i: int, rng: random.Random) -> Prompt:
        return self._prompts[i % len(self._prompts)]

    def requests(self, arrivals: int) -> int:
        n = len(self._prompts)
        return sum(1 + len(self._prompts[k % n].turns) for k in range(arrivals))

    def warmup_prompts(self, rng: random.Random) -> list[Prompt]:
        return [self._prompts[0] if self._warmup is None else self._warmup]

    @property
    def file(self) -> list[Prompt]:
        return self._prompts


def _no_flags(parser: argparse._ArgumentGroup) -> None:
    """An entry without flags of its own (it reads the shared ones, --dataset-path...)."""


def _no_lines(args: argparse.Namespace) -> list[str]:
    return []


def _no_check(args: argparse.Namespace) -> None:
    return None


@dataclass(frozen=True, slots=True)
class DatasetEntry(Generic[D]):
    """One `--dataset-name`: how the CLI builds it, how a run loads it, how its result names it.

    Several names may share a spec type (bench_serving's random and random-ids, custom and
    openai); they then share `load` and `result_keys`, which the registry checks, because a
    spec alone must say how it is loaded and reported (the daemon builds specs without a name).

    - `add_flags(group)`: the dataset's own flags, on an argument group the registry titles
      with the names sharing the function. Every entry's flags are on the parser whichever
      dataset is chosen (argparse must know them all); a dataset may read another's
      (agentic-trace reads --sharegpt-output-len, as bench_serving).
    - `check_args(args)`: run for every command line, whatever the dataset: refuses the
      entry's flags given with a dataset that would ignore them (exit 2, not a silent no-op).
    - `from_args(args, backend)`: the spec and what it fixes of the run (`Built`).
    - `load(dataset, spec)`: the run's `Prompts`; errors are `SpecError` naming the place.
    - `result_keys(dataset, spec)`: its keys in `--output-file` (bench_serving's names).
    - `warnings(args)` / `notes(args)`: lines for stderr / stdout before the run, for the
      chosen dataset only (what bench_serving ignores; what it prints after loading).
    """

    name: str
    spec_type: type[D]
    from_args: Callable[[argparse.Namespace, Backend], Built]
    load: Callable[[D, LoadSpec], Prompts]
    result_keys: Callable[[D, LoadSpec], Mapping[str, Any]]
    add_flags: Callable[[argparse._ArgumentGroup], None] = field(default=_no_flags)
    check_args: Callable[[argparse.Namespace], None] = field(default=_no_check)
    warnings: Callable[[argparse.Namespace], list[str]] = field(default=_no_lines)
    notes: Callable[[argparse.Namespace], list[str]] = field(default=_no_lines)
