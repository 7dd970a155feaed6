"""`PromptSource`: the seeded stream of prompts a run sends, whatever its dataset.

What the prompts are is the dataset's (its module, found through
`sglang_sentinel.load.dataset_registry` by the spec's type); this is the part every dataset
shares: one seeded stream for the measured prompts, another for the warm-up, and the count of
requests a number of arrivals makes. Deterministic for a seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator

from sglang_sentinel.load.dataset_registry import DATASETS, DatasetRegistry
from sglang_sentinel.load.jsonl import load_jsonl
from sglang_sentinel.load.prompt import Prompt, read_json_file, suffixed
from sglang_sentinel.load.sharegpt import load_sharegpt
from sglang_sentinel.load.spec import LoadSpec

__all__ = ["Prompt", "PromptSource", "load_jsonl", "load_sharegpt", "read_json_file", "suffixed"]

# The warm-up's stream: apart from the measured one, so the measured prompts are the same with or
# without a warm-up.
_WARMUP_STREAM = 1_000_003


class PromptSource:
    """An endless, seeded stream of prompts for one spec (a file's prompts are cycled)."""

    def __init__(self, spec: LoadSpec, *, datasets: DatasetRegistry = DATASETS) -> None:
        self._spec = spec
        self._rng = random.Random(spec.seed)
        self._prompts = datasets.entry_for(spec.dataset).load(spec.dataset, spec)
        # A file dataset's prompts (None for a generated one).
        self._file = self._prompts.file
        # Trace datasets: each prompt's planned send offset (the engine's schedule), in order.
        self.trace_offsets = list(self._prompts.trace_offsets)
        self._i = 0

    def planned_requests(self, arrivals: int) -> int:
        """Requests that many arrivals make: a conversation is one arrival and one request per turn."""
        return self._prompts.requests(arrivals)

    def __iter__(self) -> Iterator[Prompt]:
        return self

    def __next__(self) -> Prompt:
        i = self._i
        self._i += 1
        return self._prompts.prompt(i, self._rng)

    def warmup(self, n: int) -> list[Prompt]:
        """Warm-up prompts, output capped at 32 tokens as in bench_serving.

        Unlike bench_serving (copies of the first measured prompt, which then hits the prefix
        cache), they come from a separate random stream: the measured prompts are the same with
        or without warm-up and none is pre-cached. With shared prefixes they cycle through the
        groups, so every prefix is cached before the measured phase; a trace's is bench_serving's
        own (copies of one prompt built from the first session's blocks)."""
        first = self._prompts.warmup_prompts(random.Random(self._spec.seed + _WARMUP_STREAM))
        out: list[Prompt] = []
        for k in range(n):
            p = first[k % len(first)]
            # The routing key goes too: the warm-up caches each prefix where its requests will go.
            short = min(p.output_len, 32)
            out.append(Prompt(p.content, p.prompt_len, short, p.group, routing_key=p.routing_key))
        return out
