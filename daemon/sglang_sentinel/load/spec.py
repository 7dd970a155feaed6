"""What a load run is: backend, dataset, arrival process, bounds. Immutable and validated.

A `LoadSpec` is everything needed to reproduce a run (with its `seed`), so the daemon can keep
one per scheduled reference load and the calibration sweep can derive new ones with
`dataclasses.replace`.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from types import MappingProxyType
from typing import Any

__all__ = [
    "GOODPUT_METRICS",
    "AgenticTraceDataset",
    "ArrivalProcess",
    "Backend",
    "DatasetSpec",
    "JsonlDataset",
    "LoadSpec",
    "MooncakeDataset",
    "RandomDataset",
    "ShareGPTDataset",
    "SharedPrefixDataset",
    "SpecError",
    "json_object_line",
]


class SpecError(ValueError):
    """A spec that cannot describe a valid run (bad length, rate, bound...)."""


def json_object_line(line: str, where: str) -> dict[str, Any]:
    """One line of a JSONL dataset or trace as an object; ``where`` (``file:line``) names it."""
    try:
        obj = json.loads(line)
    except json.JSONDecodeError as exc:
        raise SpecError(f"{where}: not JSON ({exc.msg})") from None
    if not isinstance(obj, dict):
        raise SpecError(f"{where}: expected a JSON object")
    return obj


# bench_serving's goodput SLO keys (sglang.benchmark.goodput, 0.5.23).
GOODPUT_METRICS = ("ttft", "tpot", "e2el")


class Backend(StrEnum):
    """Request protocol. Values are bench_serving's `--backend` names, so both tools agree."""

    SGLANG = "sglang"  # native POST /generate
    OPENAI_CHAT = "sglang-oai-chat"  # POST /v1/chat/completions
    OPENAI_COMPLETIONS = "sglang-oai"  # POST /v1/completions

    @classmethod
    def parse(cls, name: str) -> Backend:
        """Accept bench_serving's names and its aliases (`sglang-native`, `vllm`, `vllm-chat`...)."""
        aliases = {
            "sglang": cls.SGLANG,
            "sglang-native": cls.SGLANG,
            "native": cls.SGLANG,
            "sglang-oai-chat": cls.OPENAI_CHAT,
            "vllm-chat": cls.OPENAI_CHAT,
            "lmdeploy-chat": cls.OPENAI_CHAT,
            "chat": cls.OPENAI_CHAT,
            "sglang-oai": cls.OPENAI_COMPLETIONS,
            "vllm": cls.OPENAI_COMPLETIONS,
            "lmdeploy": cls.OPENAI_COMPLETIONS,
            "completions": cls.OPENAI_COMPLETIONS,
        }
        refused = {
            "sglang-embedding": "embeddings stream no tokens; sentinel bench measures generation",
            "vllm-embedding": "embeddings stream no tokens; sentinel bench measures generation",
            "trt": "TensorRT-LLM's own route is not an SGLang or OpenAI server",
            "gserver": "gserver's protocol is not an SGLang or OpenAI server",
            "truss": "Truss's protocol is not an SGLang or OpenAI server",
        }
        if name.strip().lower() in refused:
            raise SpecError(f"backend {name!r} is not supported: {refused[name.strip().lower()]}")
        try:
            return aliases[name.strip().lower()]
        except KeyError:
            known = ", ".join(sorted(aliases))
            raise SpecError(f"unknown backend {name!r}; known: {known}") from None

    @property
    def path(self) -> str:
        return {
            Backend.SGLANG: "/generate",
            Backend.OPENAI_CHAT: "/v1/chat/completions",
            Backend.OPENAI_COMPLETIONS: "/v1/completions",
        }[self]


class ArrivalProcess(StrEnum):
    """How send times are planned. All are planned against one absolute start (no drift)."""

    POISSON = "poisson"  # exponential gaps with mean 1/rate, seeded
    CONSTANT = "constant"  # gaps of exactly 1/rate
    BURST = "burst"  # everything at t=0 (bench_serving's --request-rate inf)
    CLOSED = "closed"  # closed loop: max_concurrency requests always in flight
    TRACE = "trace"  # the dataset's own timestamps (MooncakeDataset), not a rate


def _check_len(name: str, value: int) -> None:
    if value < 1:
        raise SpecError(f"{name} must be >= 1, got {value}")


class DatasetSpec:
    """What every dataset's spec is: an immutable, validated value (a frozen dataclass).

    Each `sentinel bench` dataset's spec type derives from it; how a run loads one and how its
    result names it is its registry entry's (sglang_sentinel.load.dataset_registry)."""

    __slots__ = ()


@dataclass(frozen=True, slots=True)
class RandomDataset(DatasetSpec):
    """Random token lengths with bench_serving's semantics.

    Each request's input and output lengths are drawn independently and uniformly from
    ``[max(int(L * range_ratio), 1), L]``: range_ratio 0 (bench_serving's default) gives
    ``[1, L]``, 1 gives exactly L.
    """

    input_len: int = 1024
    output_len: int = 1024
    range_ratio: float = 0.0

    def __post_init__(self) -> None:
        _check_len("input_len", self.input_len)
        _check_len("output_len", self.output_len)
        if not 0.0 <= self.range_ratio <= 1.0:
            raise SpecError(f"range_ratio must be within [0, 1], got {self.range_ratio}")


@dataclass(frozen=True, slots=True)
class JsonlDataset(DatasetSpec):
    """Prompts from a JSONL file, one object per line.

    Accepted keys per line: ``prompt`` (str) or ``text`` (str) or ``messages`` (OpenAI chat list)
    or ``input_ids`` (list[int], native backend only); optional ``output_len`` /
    ``max_tokens`` (int). Lines without an output length use `output_len`. The file is read in
    order and cycled when the run needs more requests than it has lines.
    """

    path: Path
    output_len: int = 256
    # bench_serving's `openai` dataset: a line's other fields (tools, temperature...) go into
    # its request body (over --extra-request-body), except messages, max_tokens,
    # max_completion_tokens and model; `fixed_output_len` (--sharegpt-output-len) overrides
    # every line's max_tokens.
    passthrough: bool = False
    fixed_output_len: int | None = None
    # bench_serving's --prompt-suffix and --apply-chat-template, on text prompts (see ShareGPTDataset).
    prompt_suffix: str = ""
    chat_template: bool = False

    def __post_init__(self) -> None:
        _check_len("output_len", self.output_len)
        if self.fixed_output_len is not None:
            _check_len("fixed_output_len", self.fixed_output_len)


@dataclass(frozen=True, slots=True)
class ShareGPTDataset(DatasetSpec):
    """bench_serving's `sharegpt`: a JSON list of ``{"conversations": [{"from", "value"}...]}``.

    As bench_serving: conversations with at least two turns, shuffled with the seed; the first
    turn is the prompt, the second the reference completion, whose length is the request's
    output length unless `output_len` fixes it. Without a client tokenizer that length is
    estimated as one token per 4 characters (bench_serving counts with the model's tokenizer;
    pass `output_len`, --sharegpt-output-len, for an exact one), and completions estimated
    or prompts under 2 tokens are dropped as bench_serving drops them. The input figures use the server's
    own prompt_tokens. Cycled when the run needs more requests than the file has.
    """

    path: Path
    output_len: int | None = None
    # bench_serving's --sharegpt-context-len: drop pairs whose prompt + output tokens exceed it.
    # Counting needs the client tokenizer (LoadSpec.tokenizer); checked there.
    context_len: int | None = None
    # bench_serving's --prompt-suffix: the prompt, less a trailing "Assistant:", then the suffix,
    # then "Assistant:". --apply-chat-template: then the model's chat template around it as one
    # user message (sglang_sentinel.load.chat_template; needs LoadSpec.tokenizer, checked there).
    prompt_suffix: str = ""
    chat_template: bool = False

    def __post_init__(self) -> None:
        if self.context_len is not None:
            _check_len("context_len", self.context_len)
        if self.output_len is not None and self.output_len < 4:
            # bench_serving's own check (sample_sharegpt_requests: "output_len too small").
            raise SpecError(f"sharegpt output_len must be >= 4, got {self.output_len}")


@dataclass(frozen=True, slots=True)
class SharedPrefixDataset(DatasetSpec):
    """Prompts sharing a prefix, sized so a warm prefix cache serves `cache_hit_ratio` of input.

    Each prompt is `input_len` tokens: ``round(input_len * cache_hit_ratio)`` tokens of one of
    `num_groups` shared prefixes, then a unique suffix. Requests cycle through the groups. The
    first request of each group cannot hit the cache, so the expected ratio over N requests is
    ``cache_hit_ratio * (1 - num_groups / N)`` unless the prefixes were cached earlier (the
    warm-up sends one request per group for that reason). The achieved ratio is measured from
    the server's ``cached_tokens`` and reported beside the target.
    """

    input_len: int = 1024
    output_len: int = 256
    cache_hit_ratio: float = 0.5
    num_groups: int = 1
    # bench_serving's --gsp-num-turns: each request is a conversation of this many turns on a
    # chat backend; turn 1 is the prefix and a question, each later turn one more question of
    # the same length after the history so far (the real assistant replies), sent when the
    # previous turn has finished (sglang_sentinel.load.turns).
    num_turns: int = 1
    # bench_serving's --gsp-prompts-per-group: a finite plan of num_groups x prompts_per_group
    # requests (conversations), shuffled with the seed unless `ordered` (group by group, as
    # bench_serving's --gsp-ordered); None: an endless round-robin over the groups.
    prompts_per_group: int | None = None
    ordered: bool = False
    # --gsp-range-ratio: each group's prefix, each question and each output length drawn
    # uniformly from [max(int(L * range_ratio), 1), L]; 1 (bench_serving's default): exactly L.
    range_ratio: float = 1.0
    # --gsp-group-distribution zipf --gsp-zipf-alpha: each request's group drawn with
    # p(rank) proportional to rank**-alpha (group 0 hottest); None: uniform.
    zipf_alpha: float | None = None
    # --gsp-send-routing-key: an X-SMG-Routing-Key header per group ("<run>_<time>_<group>").
    routing_key: bool = False

    def __post_init__(self) -> None:
        _check_len("input_len", self.input_len)
        _check_len("output_len", self.output_len)
        _check_len("num_groups", self.num_groups)
        _check_len("num_turns", self.num_turns)
        if not 0.0 <= self.cache_hit_ratio < 1.0:
            raise SpecError(f"cache_hit_ratio must be within [0, 1), got {self.cache_hit_ratio}")
        if self.prompts_per_group is not None:
            _check_len("prompts_per_group", self.prompts_per_group)
        if not 0.0 <= self.range_ratio <= 1.0:
            raise SpecError(f"range_ratio must be within [0, 1], got {self.range_ratio}")
        if self.zipf_alpha is not None and not (self.zipf_alpha > 0 and math.isfinite(self.zipf_alpha)):
            raise SpecError(f"zipf_alpha must be a finite number > 0, got {self.zipf_alpha}")

    @property
    def prefix_len(self) -> int:
        # At least one unique token, so no two prompts are identical.
        return min(round(self.input_len * self.cache_hit_ratio), self.input_len - 1)


@dataclass(frozen=True, slots=True)
class MooncakeDataset(DatasetSpec):
    """bench_serving's `mooncake` trace replay: JSONL of ``{timestamp, hash_ids, output_length}``.

    As bench_serving 0.5.23 (`datasets/mooncake.py`): the first `max_sessions` lines
    (--num-prompts), sorted by ``timestamp`` (ms); session k starts at
    ``(timestamp_k - timestamp_0) / 1000 * slowdown_factor`` seconds; its `num_rounds` rounds go
    out together at that instant, round r's prompt holding the previous rounds with a
    placeholder assistant reply each. Each ``hash_ids`` entry is one prompt block
    (``"<id>" + "hi" x 128``), so lines sharing leading ids share a prompt prefix;
    ``input_length`` is read but, as in bench_serving, not used. Loaded by `sglang_sentinel.load.trace`.
    """

    path: Path
    max_sessions: int | None = None
    slowdown_factor: float = 1.0
    num_rounds: int = 1

    def __post_init__(self) -> None:
        _check_len("num_rounds", self.num_rounds)
        if self.max_sessions is not None:
            _check_len("max_sessions", self.max_sessions)
        if not (self.slowdown_factor >= 0 and math.isfinite(self.slowdown_factor)):
            raise SpecError(f"slowdown_factor must be a number >= 0, got {self.slowdown_factor}")


@dataclass(frozen=True, slots=True)
class AgenticTraceDataset(DatasetSpec):
    """bench_serving's `agentic-trace`: multi-turn conversations replayed round by round.

    As bench_serving 0.5.23 (`datasets/agentic_trace.py`): a JSON object whose
    ``conversations`` is a list of conversations, each a list of turns
    ``{"messages": [{role, content}...], "prompt_tokens": n}`` holding only that turn's new
    messages. The list is rotated by `offset` (``offset % len``), then the first
    `max_conversations` with a message are kept (None: all), each capped at `max_turns` rounds.
    Every round goes out when the previous one has finished, with the whole history and the
    server's real replies (sglang_sentinel.load.turns), `output_len` tokens each. Loaded by
    `sglang_sentinel.load.agentic`; chat backend only (checked in LoadSpec).
    """

    path: Path
    max_conversations: int | None = None
    output_len: int = 220  # bench_serving's DEFAULT_AGENTIC_OUTPUT_LEN
    offset: int = 0
    max_turns: int | None = None

    def __post_init__(self) -> None:
        _check_len("output_len", self.output_len)
        if self.max_conversations is not None:
            _check_len("max_conversations", self.max_conversations)
        if self.max_turns is not None:
            _check_len("max_turns", self.max_turns)


def _frozen_mapping(value: Mapping[str, Any]) -> Mapping[str, Any]:
    return MappingProxyType(dict(value))


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """One load run.

    Bounds: `num_requests` and/or `duration_s` (whichever is reached first stops sending; at
    least one is required, and CLOSED/POISSON/CONSTANT without `num_requests` need
    `duration_s`). Requests still in flight when sending stops are awaited for up to
    `drain_timeout_s` (None: until their own `request_timeout_s`), then cancelled.

    `warmup_requests` are sent first (concurrently, output capped at 32 tokens, as
    bench_serving does) and excluded from every figure.

    `max_concurrency` caps requests in flight (a client-side admission gate: time spent
    waiting for it is reported as ``queue_wait`` and, as in bench_serving, is not part of
    TTFT/E2E). For CLOSED it is the fixed concurrency.
    """

    base_url: str = "http://127.0.0.1:30000"
    backend: Backend = Backend.SGLANG
    dataset: DatasetSpec = field(default_factory=RandomDataset)
    arrival: ArrivalProcess = ArrivalProcess.BURST
    request_rate: float = math.inf  # req/s for POISSON/CONSTANT
    max_concurrency: int | None = None
    num_requests: int | None = 1000
    duration_s: float | None = None
    drain_timeout_s: float | None = None
    warmup_requests: int = 1
    seed: int = 1
    # POISSON with num_requests: rescale the drawn gaps so that the planned sends average
    # exactly request_rate (see arrivals). Off by default, as bench_serving draws free gaps.
    exact_rate: bool = False
    model: str | None = None  # OpenAI backends; None: first id of GET /v1/models, else "default"
    api_key: str | None = field(default=None, repr=False)  # sent as "Authorization: Bearer ..."
    headers: Mapping[str, str] = field(default_factory=dict)
    extra_body: Mapping[str, Any] = field(default_factory=dict)  # merged last into every body
    ignore_eos: bool = True
    stream: bool = True
    temperature: float = 0.0
    top_p: float = 1.0  # sent only when < 1, as bench_serving
    # bench_serving's --goodput: SLOs in milliseconds for "ttft", "tpot", "e2el".
    goodput_slos_ms: Mapping[str, float] = field(default_factory=dict)
    # bench_serving's --lora-name / --lora-request-distribution / --lora-zipf-alpha: each
    # measured request names one adapter (uniform: seeded random choice; distinct: round robin;
    # skewed: Zipf weights alpha**-rank); the warm-up uses the first, as bench_serving.
    lora_names: tuple[str, ...] = ()
    lora_distribution: str = "uniform"
    lora_zipf_alpha: float = 1.5
    # Wait this long for GET /v1/models (native: /health) to answer 200 before the run; 0: not.
    ready_timeout_s: float = 0.0
    request_timeout_s: float = 900.0
    keep_text: bool = False  # keep generated text per request (for --output-details)
    print_requests: bool = False  # bench_serving's --print-requests (sglang_sentinel.load.print_requests)
    # bench_serving's --tokenizer: a local tokenizer.json (or a directory holding one) counting
    # the generated text client-side ("retokenized") and trace prompts; see sglang_sentinel.load.tokenizer.
    tokenizer: Path | None = None
    # Client self-check (`figures`, "client_bound"): a run whose p99 send delay (the client
    # holding a sendable request while not sending another) exceeds max_schedule_lag_s, or,
    # with user-space read stamps only, whose p99 event-loop lag exceeds max_loop_lag_s, is
    # marked client_bound: the client delayed work. Defaults leave room for a shared, noisy
    # host; bench_serving has no such check.
    max_schedule_lag_s: float = 0.010
    max_loop_lag_s: float = 0.020
    steady_state_fraction: float = 0.9

    def __post_init__(self) -> None:
        object.__setattr__(self, "base_url", self.base_url.rstrip("/"))
        object.__setattr__(self, "headers", _frozen_mapping(self.headers))
        object.__setattr__(self, "extra_body", _frozen_mapping(self.extra_body))
        object.__setattr__(self, "goodput_slos_ms", _frozen_mapping(self.goodput_slos_ms))
        for key, slo in self.goodput_slos_ms.items():
            if key not in GOODPUT_METRICS:
                raise SpecError(f"goodput SLO {key!r}: expected one of {', '.join(GOODPUT_METRICS)}")
            if not (isinstance(slo, int | float) and slo > 0 and math.isfinite(slo)):
                raise SpecError(f"goodput SLO {key}: expected a positive number of ms, got {slo!r}")
        object.__setattr__(self, "lora_names", tuple(self.lora_names))
        if any(not isinstance(n, str) or not n.strip() for n in self.lora_names):
            raise SpecError("lora_names must be non-empty adapter names")
        if self.lora_distribution not in ("uniform", "distinct", "skewed"):
            raise SpecError(
                f"lora_distribution must be uniform, distinct or skewed, got {self.lora_distribution!r}"
            )
        if not (self.lora_zipf_alpha > 0 and math.isfinite(self.lora_zipf_alpha)):
            raise SpecError(f"lora_zipf_alpha must be a positive number, got {self.lora_zipf_alpha}")
        if not 0.0 < self.top_p <= 1.0:
            raise SpecError(f"top_p must be within (0, 1], got {self.top_p}")
        if not (self.ready_timeout_s >= 0 and math.isfinite(self.ready_timeout_s)):
            raise SpecError(f"ready_timeout_s must be >= 0, got {self.ready_timeout_s}")
        if not self.base_url.startswith(("http://", "https://")):
            raise SpecError(f"base_url must start with http:// or https://, got {self.base_url!r}")
        for key, value in self.headers.items():
            if not key.strip() or any(c in key + value for c in "\r\n"):
                raise SpecError(f"invalid header {key!r}: empty name or a line break")
        if self.num_requests is None and self.duration_s is None:
            raise SpecError("a run needs a bound: num_requests and/or duration_s")
        if self.num_requests is not None and self.num_requests < 1:
            raise SpecError(f"num_requests must be >= 1, got {self.num_requests}")
        if self.duration_s is not None and not (self.duration_s > 0 and math.isfinite(self.duration_s)):
            raise SpecError(f"duration_s must be a positive number, got {self.duration_s}")
        if self.max_concurrency is not None and self.max_concurrency < 1:
            raise SpecError(f"max_concurrency must be >= 1, got {self.max_concurrency}")
        open_loop = self.arrival in (ArrivalProcess.POISSON, ArrivalProcess.CONSTANT)
        if open_loop and not (self.request_rate > 0 and math.isfinite(self.request_rate)):
            raise SpecError(f"{self.arrival} arrivals need a finite request_rate > 0")
        if self.arrival is ArrivalProcess.CLOSED and self.max_concurrency is None:
            raise SpecError("closed-loop arrivals need max_concurrency (the fixed concurrency)")
        trace = isinstance(self.dataset, MooncakeDataset)
        if trace != (self.arrival is ArrivalProcess.TRACE):
            raise SpecError("trace arrivals go with a trace dataset (mooncake), and only with it")
        if self.arrival is ArrivalProcess.BURST and self.num_requests is None:
            raise SpecError("burst arrivals need num_requests")
        if self.warmup_requests < 0:
            raise SpecError(f"warmup_requests must be >= 0, got {self.warmup_requests}")
        if not self.request_timeout_s > 0:
            raise SpecError(f"request_timeout_s must be > 0, got {self.request_timeout_s}")
        if self.drain_timeout_s is not None and self.drain_timeout_s < 0:
            raise SpecError(f"drain_timeout_s must be >= 0, got {self.drain_timeout_s}")
        if not 0.0 < self.steady_state_fraction <= 1.0:
            raise SpecError("steady_state_fraction must be within (0, 1]")
        templated = isinstance(self.dataset, ShareGPTDataset | JsonlDataset) and self.dataset.chat_template
        if templated and self.tokenizer is None:
            raise SpecError(
                "the chat template (--apply-chat-template) is the tokenizer's: it needs --tokenizer, a local "
                "directory with tokenizer_config.json or chat_template.jinja"
            )
        if isinstance(self.dataset, ShareGPTDataset) and self.dataset.context_len and self.tokenizer is None:
            raise SpecError(
                "sharegpt context_len (--sharegpt-context-len) needs a client tokenizer (--tokenizer)"
            )
        if self.multi_turn and self.backend is not Backend.OPENAI_CHAT:
            # bench_serving asserts the same (MULTI_TURN_BACKENDS): a history is chat messages.
            raise SpecError(
                "multi-turn conversations (num_turns > 1, agentic-trace) "
                "need the chat backend (sglang-oai-chat)"
            )
        # A file dataset names its file `path` (every built-in one, and any added the same way).
        path = getattr(self.dataset, "path", None)
        if isinstance(path, Path) and not path.is_file():
            raise SpecError(f"dataset file not found: {path}")

    @property
    def url(self) -> str:
        return self.base_url + self.backend.path

    @property
    def multi_turn(self) -> bool:
        """Whether an arrival is a conversation (turns sent one after another, sglang_sentinel.load.turns)."""
        if isinstance(self.dataset, AgenticTraceDataset):
            return True
        return isinstance(self.dataset, SharedPrefixDataset) and self.dataset.num_turns > 1

    @property
    def target_concurrency(self) -> int | None:
        """The in-flight level the run aims at, when it has one (for steady-state detection)."""
        if self.max_concurrency is not None:
            return self.max_concurrency
        if self.arrival is ArrivalProcess.BURST:
            return self.num_requests
        return None
