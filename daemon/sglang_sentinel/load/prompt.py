"""One request's input (`Prompt`), what every prompt source yields, and what the dataset modules
share to make them: the whole-file JSON reader (ShareGPT, agentic trace), random words and token
ids (random, generated-shared-prefix), --prompt-suffix and --apply-chat-template (sharegpt,
custom), the client tokenizer's count (sharegpt, mooncake). Below every dataset loader, importing none.

Lengths are exact on the native backend, which sends token ids (`input_ids`), as
bench_serving's `--tokenize-prompt` does. The OpenAI routes take text, and we deliberately carry
no tokenizer (it would need model files or hub access on a production host), so generated text
is built from common English words that BPE vocabularies hold as one token each (with the
leading space): the length is then close to the target, and the figures use the server's
reported `prompt_tokens`, which is exact.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_sentinel.load.spec import SpecError

__all__ = [
    "Prompt",
    "drawn_len",
    "prompt_counter",
    "random_ids",
    "random_words",
    "read_json_file",
    "suffixed",
    "text_shaper",
]

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

_ASSISTANT_SUFFIX = "Assistant:"  # bench_serving's ASSISTANT_SUFFIX


@dataclass(frozen=True, slots=True)
class Prompt:
    """One request's input: token ids, text, or chat messages; and its lengths."""

    content: str | list[int] | list[dict[str, Any]]
    prompt_len: int  # planned input tokens; 0 when unknown (free text from a file)
    output_len: int
    group: int | None = None  # shared-prefix group
    extra: Mapping[str, Any] | None = None  # merged into this request's body (openai dataset)
    # Multi-turn: what turns 2.. add to the history (`content` is turn 1's messages): a user
    # message's text (shared prefixes), or a round's messages (agentic traces).
    turns: tuple[str | list[dict[str, Any]], ...] = ()
    # bench_serving's --gsp-send-routing-key: the X-SMG-Routing-Key header of this request.
    routing_key: str | None = None


def read_json_file(path: Path) -> Any:
    """A whole-file JSON dataset (ShareGPT, agentic trace); `SpecError` naming the file otherwise."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError) as exc:
        raise SpecError(f"cannot read dataset {path}: {exc}") from None
    except json.JSONDecodeError as exc:
        raise SpecError(f"{path}: not JSON ({exc.msg} at line {exc.lineno})") from None


def random_ids(rng: random.Random, n: int) -> list[int]:
    """`n` token ids drawn from ids every current vocabulary holds."""
    return rng.choices(_ID_POPULATION, k=n)


def random_words(rng: random.Random, n: int) -> str:
    """`n` common English words, about one BPE token each."""
    return " ".join(rng.choices(_WORDS, k=n))


def drawn_len(rng: random.Random, full: int, ratio: float) -> int:
    """bench_serving's compute_random_lens: uniform in [max(int(full * ratio), 1), full]; no
    draw at ratio 1 (exactly full), so the default leaves the seeded stream as it was."""
    if ratio >= 1.0 or full <= 0:
        return max(full, 0)
    return rng.randint(max(int(full * ratio), 1), full)


def suffixed(prompt: str, suffix: str) -> str:
    """bench_serving's --prompt-suffix: a trailing "Assistant:" moves after the suffix."""
    if not suffix:
        return prompt
    if prompt.endswith(_ASSISTANT_SUFFIX):
        prompt = prompt[: -len(_ASSISTANT_SUFFIX)]
    return prompt + suffix + _ASSISTANT_SUFFIX


def text_shaper(suffix: str, chat_template: bool, tokenizer: Path | None) -> Callable[[str], str] | None:
    """--prompt-suffix, then --apply-chat-template, as bench_serving applies them; None: neither."""
    if not suffix and not chat_template:
        return None
    render = None
    if chat_template and tokenizer is not None:
        from sglang_sentinel.load.chat_template import load_chat_template

        render = load_chat_template(tokenizer).user_prompt

    def shape(text: str) -> str:
        text = suffixed(text, suffix)
        return text if render is None else render(text)

    return shape


def prompt_counter(tokenizer: Path | None) -> Callable[[str], int]:
    """Prompt lengths with the client tokenizer (bench_serving's prompt_len), else 0: unknown."""
    if tokenizer is None:
        return lambda _text: 0
    from sglang_sentinel.load.tokenizer import load_tokenizer

    return load_tokenizer(tokenizer).count_prompt
