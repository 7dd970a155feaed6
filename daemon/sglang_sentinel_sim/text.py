"""Deterministic "tokenizer" and generated text of the simulator.

Token-count rule (documented in docs/sim.md, relied on by other packages' tests): a text is
split into tokens by the regular expression ``\\s*(?:\\w+|[^\\w\\s])`` -- every run of word
characters is one token, every other non-space character is one token, and whitespace is folded
into the token that follows it. ``count_tokens("What is 2+2?") == 6``. An empty text counts 0.

Generated text obeys the same rule: every output token is one piece (``" word"``, ``","``,
``"\\n    return"``...), so re-counting a response gives exactly ``completion_tokens``.

What a request generates is a *script*: an optional thinking part (chat with reasoning on), an
answer, then end-of-sequence. Known-answer prompts get a fixed, correct answer (health canaries);
every other prompt gets deterministic filler whose length derives from a hash of the prompt.
``ignore_eos`` runs past the script with more filler.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Sequence
from typing import Final

__all__ = [
    "EOS_TOKEN_ID",
    "THINK_END",
    "Script",
    "count_tokens",
    "make_script",
    "split_tokens",
    "token_id",
]

_TOKEN_RE = re.compile(r"\s*(?:\w+|[^\w\s])")
# GLM-5's <|endoftext|> id; what `finish_reason.matched` carries for a natural stop.
EOS_TOKEN_ID = 154820
THINK_END = "</think>"

# fmt: off
_WORDS: Final = (
    "the", "model", "server", "batch", "token", "request", "latency", "cache", "memory", "queue",
    "decode", "prefill", "stream", "throughput", "answer", "system", "value", "result", "compute",
    "kernel", "layer", "expert", "router", "weight", "tensor", "shard", "rank", "signal", "health",
    "metric", "sample", "window", "budget", "trace", "event", "record", "number", "simple", "first",
    "second", "third", "final", "steady", "careful", "quick", "clear", "short", "long", "small",
    "large", "fast", "slow", "because", "therefore", "however", "while", "when", "where", "which",
    "that", "this", "these", "those", "every", "each", "some", "is", "are", "was", "be", "can", "will",
    "should", "may", "must", "has", "have", "had", "does", "do", "not", "also", "then", "so", "and",
    "or", "of", "to", "in", "on", "at", "by", "for", "with", "from", "into", "over", "under", "about",
    "between", "after", "before", "during", "within",
)
# fmt: on

_KNOWN: tuple[tuple[re.Pattern[str], str, str], ...] = (
    (
        re.compile(r"\bwhat\s+is\s+2\s*\+\s*2\b", re.IGNORECASE),
        "The user asks for a simple sum. 2 plus 2 equals 4.",
        "2 + 2 = 4.",
    ),
    (
        re.compile(r"\bis_prime\b|\bprime\b.*\bfunction\b|\bfunction\b.*\bprime\b", re.IGNORECASE),
        "I need a primality test: handle n below 2, then trial division up to the square root.",
        "```python\n"
        "def is_prime(n: int) -> bool:\n"
        "    if n < 2:\n"
        "        return False\n"
        "    i = 2\n"
        "    while i * i <= n:\n"
        "        if n % i == 0:\n"
        "            return False\n"
        "        i += 1\n"
        "    return True\n"
        "```",
    ),
    (
        re.compile(r"capital\s+(?:city\s+)?of\s+france", re.IGNORECASE),
        "The capital of France is Paris.",
        " Paris.",
    ),
)


_VOCAB_SIZE = 151_000
_IDS: dict[str, int] = {}


def token_id(piece: str) -> int:
    """A stable id for a piece (cached: generated text reuses a small vocabulary)."""
    tid = _IDS.get(piece)
    if tid is None:
        tid = 100 + _digest(piece) % _VOCAB_SIZE
        if len(_IDS) < 65536:
            _IDS[piece] = tid
    return tid


def split_tokens(text: str) -> list[str]:
    """Split ``text`` into token pieces by the documented rule (trailing whitespace dropped)."""
    return _TOKEN_RE.findall(text)


def count_tokens(text: str) -> int:
    return len(_TOKEN_RE.findall(text))


def _digest(text: str) -> int:
    return int.from_bytes(
        hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=8).digest(), "big"
    )


def _filler_cycle(length: int) -> tuple[str, ...]:
    """A fixed pseudo-random sequence of filler pieces; scripts read it from an offset."""
    x = 0x9E3779B97F4A7C15
    out: list[str] = []
    for i in range(length):
        # xorshift64
        x ^= (x << 13) & 0xFFFFFFFFFFFFFFFF
        x ^= x >> 7
        x ^= (x << 17) & 0xFFFFFFFFFFFFFFFF
        out.append("." if i % 12 == 11 else " " + _WORDS[x % len(_WORDS)])
    return tuple(out)


# Long enough that no two requests visibly repeat each other; built once at import (~1 ms).
_CYCLE: Final = _filler_cycle(8191)


class Script:
    """The token pieces one request generates: an explicit part (thinking, known answers) and
    then filler read from a shared cycle at a per-prompt offset -- no per-token generation work.

    ``answer_start`` is the first piece after ``</think>`` (0 without thinking); ``natural_len``
    is where the model would emit EOS. Beyond the script, filler continues indefinitely.
    """

    __slots__ = ("_explicit", "_offset", "answer_start", "natural_len")

    def __init__(
        self, explicit: list[str], answer_start: int, seed: int, natural_len: int | None = None
    ) -> None:
        self._explicit = explicit
        self._offset = seed % len(_CYCLE)
        self.answer_start = answer_start
        self.natural_len = len(explicit) if natural_len is None else natural_len

    def slice(self, start: int, end: int) -> list[str]:
        """Pieces ``start`` (inclusive) to ``end`` (exclusive)."""
        explicit = self._explicit
        n_exp = len(explicit)
        if end <= n_exp:
            return explicit[start:end]
        out = explicit[start:] if start < n_exp else []
        i = max(start, n_exp)
        size = len(_CYCLE)
        while i < end:
            pos = (self._offset + i) % size
            take = min(end - i, size - pos)
            out.extend(_CYCLE[pos : pos + take])
            i += take
        return out

    def piece(self, i: int) -> str:
        """Piece ``i`` (``slice(i, i + 1)[0]`` without the list: one token per event)."""
        explicit = self._explicit
        if i < len(explicit):
            return explicit[i]
        return _CYCLE[(self._offset + i) % len(_CYCLE)]

    def pieces(self, n: int) -> list[str]:
        """The first ``n`` pieces."""
        return self.slice(0, n)


def make_script(
    prompt: str, *, thinking: bool, thinking_tokens: int, prompt_ids: Sequence[int] = ()
) -> Script:
    """Build the deterministic script for a prompt (``prompt_ids`` when the request sent ids)."""
    key = prompt if prompt else ",".join(map(str, prompt_ids[:64]))
    seed = _digest(key)
    think_text = ""
    answer = ""
    for pattern, known_thought, known_answer in _KNOWN:
        if prompt and pattern.search(prompt):
            think_text, answer = known_thought, known_answer
            break
    pieces: list[str] = []
    answer_start = 0
    if thinking:
        if not think_text:
            think_text = "Let me think about this request step by step."
        pieces.extend(split_tokens(think_text))
        # Pad hidden reasoning towards the profile's typical length, deterministically.
        want = max(thinking_tokens, len(pieces))
        if want > len(pieces):
            pieces.extend(Script([], 0, seed ^ 0x9E3779B97F4A7C15).pieces(want - len(pieces)))
        pieces.append(THINK_END)
        answer_start = len(pieces)
    if answer:
        pieces.extend(split_tokens(answer))
        return Script(pieces, answer_start, seed)
    # Unknown prompt: " Sure" and then 23..278 tokens of filler (from the cycle) before EOS.
    pieces.append(" Sure")
    return Script(pieces, answer_start, seed, natural_len=len(pieces) - 1 + 24 + seed % 256)
