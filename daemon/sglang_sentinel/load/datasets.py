"""Prompt sources: random lengths, a JSONL file, shared prefixes. Deterministic for a seed.

Lengths are exact on the native backend, which sends token ids (`input_ids`), as
bench_serving's `--tokenize-prompt` does. The OpenAI routes take text, and we deliberately carry
no tokenizer (it would need model files or hub access on a production host), so generated text
is built from common English words that BPE vocabularies hold as one token each (with the
leading space): the length is then close to the target, and the figures use the server's
reported `prompt_tokens`, which is exact.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import Callable, Iterator
from datetime import datetime
from typing import Any

from sglang_sentinel.load.agentic import load_agentic
from sglang_sentinel.load.prompt import Prompt, read_json_file
from sglang_sentinel.load.spec import (
    AgenticTraceDataset,
    Backend,
    JsonlDataset,
    LoadSpec,
    MooncakeDataset,
    RandomDataset,
    SharedPrefixDataset,
    ShareGPTDataset,
    SpecError,
    json_object_line,
)

__all__ = ["Prompt", "PromptSource", "load_jsonl", "load_sharegpt", "read_json_file"]

# Token ids well inside every current vocabulary (>= 32k entries) and above the low ids where
# tokenizers keep their special and control tokens.
_ID_LOW, _ID_HIGH = 1000, 30000
_ID_POPULATION = range(_ID_LOW, _ID_HIGH)

# One string split at import: a list literal of 180 words would drown the module.
_WORDS = tuple(
    """
    the of and to in is that for it as was with be by on not he this are or his from at which but
    have an they you were her she there been one all we their has would when if so no will more can
    out up who them some time about into only other new could its than then two may any first like
    now these over such our man me even most made after also did many before must through back years
    where much your way well down should because each just those people how too little state good
    very make world still own see men work long get here between both life being under never day
    same another know while last might great old year off come since against go came right used take
    three place small found part house water light music river city green paper table window garden
    letter number market story question morning money power
    """.split()  # noqa: SIM905
)


def _drawn(rng: random.Random, full: int, ratio: float) -> int:
    """bench_serving's compute_random_lens: uniform in [max(int(full * ratio), 1), full]; no
    draw at ratio 1 (exactly full), so the default leaves the seeded stream as it was."""
    if ratio >= 1.0 or full <= 0:
        return max(full, 0)
    return rng.randint(max(int(full * ratio), 1), full)


class GroupPicker:
    """Which shared-prefix group each request uses (bench_serving's gsp assignment), and its key."""

    def __init__(self, ds: SharedPrefixDataset, seed: int) -> None:
        self._ds = ds
        self._rng = random.Random(seed ^ 0x6A0F)  # its own stream: prompts do not depend on it
        g = ds.num_groups
        self._weights = [(rank + 1) ** -ds.zipf_alpha for rank in range(g)] if ds.zipf_alpha else None
        self._plan: list[int] = []
        if ds.prompts_per_group is not None:
            total = g * ds.prompts_per_group
            if self._weights is None:
                self._plan = [k for k in range(g) for _ in range(ds.prompts_per_group)]
            else:
                self._plan = self._rng.choices(range(g), weights=self._weights, k=total)
            if not ds.ordered:
                self._rng.shuffle(self._plan)
        # As bench_serving: per run, so a router does not keep one run's routes for the next.
        stamp = f"{uuid.uuid4().hex[:8]}_{datetime.now().strftime('%Y%m%d%H%M%S')}"
        self._keys = [f"{stamp}_{k}" for k in range(g)] if ds.routing_key else None

    def group(self, i: int) -> int:
        if self._plan:
            return self._plan[i % len(self._plan)]
        if self._weights is not None:
            return self._rng.choices(range(self._ds.num_groups), weights=self._weights)[0]
        return i % self._ds.num_groups

    def routing_key(self, group: int) -> str | None:
        return None if self._keys is None else self._keys[group]


def _ids(rng: random.Random, n: int) -> list[int]:
    return rng.choices(_ID_POPULATION, k=n)


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(_WORDS, k=n))


# bench_serving's openai dataset keeps these out of the per-request body (openai_dataset.py).
_NOT_PASSED = frozenset({"messages", "max_tokens", "max_completion_tokens", "model"})


_ASSISTANT_SUFFIX = "Assistant:"  # bench_serving's ASSISTANT_SUFFIX


def suffixed(prompt: str, suffix: str) -> str:
    """bench_serving's --prompt-suffix: a trailing "Assistant:" moves after the suffix."""
    if not suffix:
        return prompt
    if prompt.endswith(_ASSISTANT_SUFFIX):
        prompt = prompt[: -len(_ASSISTANT_SUFFIX)]
    return prompt + suffix + _ASSISTANT_SUFFIX


def load_jsonl(
    dataset: JsonlDataset, backend: Backend, shape: Callable[[str], str] | None = None
) -> list[Prompt]:
    """Read and validate the whole file; errors name the line. `shape`: what --prompt-suffix and
    --apply-chat-template make of a text prompt."""
    prompts: list[Prompt] = []
    try:
        lines = dataset.path.read_text(encoding="utf-8").splitlines()
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read dataset {dataset.path}: {exc}") from None
    for lineno, line in enumerate(lines, 1):
        if not line.strip():
            continue
        where = f"{dataset.path}:{lineno}"
        obj = json_object_line(line, where)
        out = obj.get("output_len", obj.get("max_tokens", dataset.output_len))
        if dataset.fixed_output_len is not None:
            out = dataset.fixed_output_len
        if not isinstance(out, int) or isinstance(out, bool) or out < 1:
            raise SpecError(f"{where}: output_len must be a positive integer")
        content: str | list[int] | list[dict[str, Any]]
        if isinstance(obj.get("input_ids"), list):
            ids = obj["input_ids"]
            if not ids or not all(isinstance(i, int) and not isinstance(i, bool) and i >= 0 for i in ids):
                raise SpecError(f"{where}: input_ids must be a non-empty list of token ids")
            if backend is not Backend.SGLANG:
                raise SpecError(f"{where}: input_ids need the native backend (sglang)")
            content, plen = list(ids), len(ids)
        elif isinstance(obj.get("messages"), list):
            msgs = obj["messages"]
            if not msgs or not all(isinstance(m, dict) and "role" in m for m in msgs):
                raise SpecError(f"{where}: messages must be a non-empty list of {{role, content}}")
            if backend is not Backend.OPENAI_CHAT:
                raise SpecError(f"{where}: messages need the chat backend (sglang-oai-chat)")
            content, plen = list(msgs), 0
        else:
            text = obj.get("prompt", obj.get("text"))
            if not isinstance(text, str) or not text:
                raise SpecError(f"{where}: needs a non-empty 'prompt', 'text', 'messages' or 'input_ids'")
            content, plen = (text if shape is None else shape(text)), 0
        if shape is not None and not isinstance(content, str):
            raise SpecError(
                f"{where}: --prompt-suffix and --apply-chat-template apply to 'prompt' / 'text' lines"
            )
        extra = {k: v for k, v in obj.items() if k not in _NOT_PASSED} if dataset.passthrough else None
        prompts.append(Prompt(content, plen, out, extra=extra or None))
    if not prompts:
        raise SpecError(f"dataset {dataset.path} has no prompts")
    return prompts


def load_sharegpt(
    dataset: ShareGPTDataset,
    backend: Backend,
    seed: int,
    count: Callable[[str], int] | None = None,
    shape: Callable[[str], str] | None = None,
) -> list[Prompt]:
    """bench_serving's ShareGPT sampling (see `ShareGPTDataset`); errors name the entry.

    `count`: the client tokenizer's prompt count (--tokenizer). With it, lengths are counted as
    bench_serving counts them (prompt and reference completion), and `context_len` prunes."""
    data = read_json_file(dataset.path)
    if not isinstance(data, list):
        raise SpecError(f"{dataset.path}: expected a JSON list of conversations")
    pairs: list[tuple[str, str]] = []
    for k, entry in enumerate(data):
        turns = entry.get("conversations", entry.get("conversation")) if isinstance(entry, dict) else None
        if not isinstance(turns, list):
            raise SpecError(f"{dataset.path}[{k}]: expected an object with a 'conversations' list")
        if len(turns) < 2:
            continue  # bench_serving keeps conversations of two turns or more
        values = [t.get("value") if isinstance(t, dict) else None for t in turns[:2]]
        if not all(isinstance(v, str) for v in values):
            raise SpecError(f"{dataset.path}[{k}]: turns need a string 'value'")
        pairs.append((str(values[0]), str(values[1])))
    random.Random(seed).shuffle(pairs)
    prompts: list[Prompt] = []
    for prompt, completion in pairs:
        if shape is not None:
            prompt = shape(prompt)
        if count is not None:  # exact, as bench_serving: the tokenizer's counts, 0 = unknown below
            plen = count(prompt)
            out = dataset.output_len if dataset.output_len is not None else count(completion)
            est_plen = plen
        else:  # estimated; the figures use the server's prompt_tokens
            plen, est_plen = 0, -(-len(prompt) // _CHARS_PER_TOKEN)
            out = dataset.output_len or -(-len(completion) // _CHARS_PER_TOKEN)
        if est_plen < 2 or out < 2:
            continue  # bench_serving prunes sequences under 2 tokens
        if dataset.context_len and plen + out > dataset.context_len:
            continue  # and, with --sharegpt-context-len, those too long for the model
        content: str | list[dict[str, Any]] = prompt
        if backend is Backend.OPENAI_CHAT:
            content = [{"role": "user", "content": prompt}]
        prompts.append(Prompt(content, plen, out))
    if not prompts:
        raise SpecError(f"dataset {dataset.path} has no usable conversation")
    return prompts


# English BPE text: about 4 characters per token; only for ShareGPT's reference completions.
_CHARS_PER_TOKEN = 4


class PromptSource:
    """An endless, seeded stream of prompts for one spec (a JSONL file is cycled)."""

    def __init__(self, spec: LoadSpec, *, stream_seed: int | None = None) -> None:
        self._spec = spec
        self._rng = random.Random(spec.seed if stream_seed is None else stream_seed)
        self._text = spec.backend is not Backend.SGLANG
        self._file: list[Prompt] | None = None
        self._prefixes: list[str | list[int]] = []
        # Trace datasets: each prompt's planned send offset (the engine's schedule), in order.
        self.trace_offsets: list[float] = []
        self._trace_warmup: Prompt | None = None
        ds = spec.dataset
        if isinstance(ds, MooncakeDataset):
            self._file = self._load_trace(ds)
        elif isinstance(ds, AgenticTraceDataset):
            self._file = load_agentic(ds)[0]
        elif isinstance(ds, JsonlDataset):
            self._file = load_jsonl(ds, spec.backend, self._shape(ds))
        elif isinstance(ds, ShareGPTDataset):
            count = self._counter() if spec.tokenizer is not None else None
            self._file = load_sharegpt(ds, spec.backend, spec.seed, count, self._shape(ds))
        elif isinstance(ds, SharedPrefixDataset):
            # Prefixes come from their own generator so they do not depend on the run length.
            prng = random.Random(spec.seed ^ 0x5EED)
            self._prefix_lens = [_drawn(prng, ds.prefix_len, ds.range_ratio) for _ in range(ds.num_groups)]
            self._prefixes = [_words(prng, n) if self._text else _ids(prng, n) for n in self._prefix_lens]
            self._groups = GroupPicker(ds, spec.seed)
        self._i = 0

    def _load_trace(self, ds: MooncakeDataset) -> list[Prompt]:
        from sglang_sentinel.load.trace import load_mooncake, mooncake_prompts, warmup_text

        sessions = load_mooncake(ds)
        count = self._counter()
        render = None
        if self._spec.tokenizer is not None:
            from sglang_sentinel.load.chat_template import chat_template_if_any

            template = chat_template_if_any(self._spec.tokenizer)
            render = template.render if template is not None else None
        prompts: list[Prompt] = []
        for s in sessions:
            for text in mooncake_prompts(s, ds.num_rounds, render):
                prompts.append(Prompt(text, count(text), s.output_len))
                self.trace_offsets.append(s.offset)
        text = warmup_text(sessions[0])
        self._trace_warmup = Prompt(text, count(text), min(sessions[0].output_len, 32))
        return prompts

    def _shape(self, ds: JsonlDataset | ShareGPTDataset) -> Callable[[str], str] | None:
        """--prompt-suffix, then --apply-chat-template, as bench_serving applies them."""
        if not ds.prompt_suffix and not ds.chat_template:
            return None
        render = None
        if ds.chat_template and self._spec.tokenizer is not None:
            from sglang_sentinel.load.chat_template import load_chat_template

            render = load_chat_template(self._spec.tokenizer).user_prompt

        def shape(text: str) -> str:
            text = suffixed(text, ds.prompt_suffix)
            return text if render is None else render(text)

        return shape

    def _counter(self) -> Callable[[str], int]:
        """Prompt lengths with the client tokenizer (bench_serving's prompt_len), else 0: unknown."""
        if self._spec.tokenizer is None:
            return lambda _text: 0
        from sglang_sentinel.load.tokenizer import load_tokenizer

        return load_tokenizer(self._spec.tokenizer).count_prompt

    def planned_requests(self, arrivals: int) -> int:
        """Requests that many arrivals make: a conversation is one arrival and one request per turn."""
        if self._file is not None:
            n = len(self._file)
            return sum(1 + len(self._file[k % n].turns) for k in range(arrivals))
        ds = self._spec.dataset
        return arrivals * (ds.num_turns if isinstance(ds, SharedPrefixDataset) else 1)

    def __iter__(self) -> Iterator[Prompt]:
        return self

    def __next__(self) -> Prompt:
        i = self._i
        self._i += 1
        ds = self._spec.dataset
        if self._file is not None:
            return self._file[i % len(self._file)]
        if isinstance(ds, RandomDataset):
            lo_in = max(int(ds.input_len * ds.range_ratio), 1)
            lo_out = max(int(ds.output_len * ds.range_ratio), 1)
            n_in = self._rng.randint(lo_in, ds.input_len)
            n_out = self._rng.randint(lo_out, ds.output_len)
            content: str | list[int] = _words(self._rng, n_in) if self._text else _ids(self._rng, n_in)
            return Prompt(content, n_in, n_out)
        assert isinstance(ds, SharedPrefixDataset)
        return self._shared_prefix(ds, self._groups.group(i))

    def _shared_prefix(self, ds: SharedPrefixDataset, group: int) -> Prompt:
        rng, ratio = self._rng, ds.range_ratio
        n_suffix = ds.input_len - ds.prefix_len
        prefix = self._prefixes[group]
        out = _drawn(rng, ds.output_len, ratio)
        key = self._groups.routing_key(group)
        if isinstance(prefix, str) and ds.num_turns > 1:
            # bench_serving's multi-turn shape: "<system prompt>\n\n<question 1>", then questions.
            questions = [_words(rng, _drawn(rng, n_suffix, ratio)) for _ in range(ds.num_turns)]
            first = [{"role": "user", "content": f"{prefix}\n\n{questions[0]}"}]
            return Prompt(first, 0, out, group, turns=tuple(questions[1:]), routing_key=key)
        n_q = _drawn(rng, n_suffix, ratio)
        if isinstance(prefix, str):
            suffix = _words(rng, n_q)
            text = f"{prefix} {suffix}" if prefix else suffix
            return Prompt(text, self._prefix_lens[group] + n_q, out, group, routing_key=key)
        return Prompt(prefix + _ids(rng, n_q), len(prefix) + n_q, out, group, routing_key=key)

    def warmup(self, n: int) -> list[Prompt]:
        """Warm-up prompts, output capped at 32 tokens as in bench_serving.

        Unlike bench_serving (copies of the first measured prompt, which then hits the prefix
        cache), they come from a separate random stream: the measured prompts are the same with
        or without warm-up and none is pre-cached. With shared prefixes they cycle through the
        groups, so every prefix is cached before the measured phase."""
        if self._trace_warmup is not None:
            # bench_serving's: copies of one prompt built from the first session's blocks.
            return [self._trace_warmup] * n
        probe = PromptSource(self._spec, stream_seed=self._spec.seed + 1_000_003)
        ds = self._spec.dataset
        if isinstance(ds, SharedPrefixDataset):
            # One per group whatever the groups' order or weights (a shuffled or Zipf plan),
            # with this run's routing keys.
            probe._groups = self._groups
            first = [probe._shared_prefix(ds, g) for g in range(ds.num_groups)]
        else:
            first = [next(probe)]
        out: list[Prompt] = []
        for k in range(n):
            p = first[k % len(first)]
            # The routing key goes too: the warm-up caches each prefix where its requests will go.
            short = min(p.output_len, 32)
            out.append(Prompt(p.content, p.prompt_len, short, p.group, routing_key=p.routing_key))
        return out
