"""The optional client-side tokenizer (`--tokenizer`): local files only, never a download.

bench_serving loads a Hugging Face tokenizer for every run (hub name or path) and counts with
it: "Total generated tokens (retokenized)" re-encodes each request's generated text, and trace
prompts are measured with it. sentinel bench reports the server's own token counts and does not
need one; given one, it adds the same cross-checks. It reads a ``tokenizer.json`` (a file, or a
directory holding one: what `save_pretrained` writes) with the `tokenizers` library, an optional
install (``pip install 'sglang-sentinel[tokenizer]'``): transformers would pull in far more for
the one call used here, and a hub name would mean network access from a production host, which
sentinel never does.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any

from sglang_sentinel.load.spec import SpecError

__all__ = ["ClientTokenizer", "load_tokenizer", "tokenizer_file"]

INSTALL_HINT = "pip install 'sglang-sentinel[tokenizer]' (the tokenizers library)"


def tokenizer_file(path: Path) -> Path:
    """The tokenizer.json that `path` names; `SpecError` when there is none (hub names included)."""
    candidate = path / "tokenizer.json" if path.is_dir() else path
    if not candidate.is_file():
        raise SpecError(
            f"--tokenizer {path}: no such file or directory with a tokenizer.json "
            "(sentinel bench reads local tokenizer files only; it downloads nothing)"
        )
    return candidate


class ClientTokenizer:
    """Counts tokens of text, without special tokens (bench_serving's ``add_special_tokens=False``)."""

    def __init__(self, path: Path) -> None:
        file = tokenizer_file(path)
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise SpecError(f"--tokenizer needs the tokenizers library: {INSTALL_HINT}") from None
        try:
            self._tok: Any = Tokenizer.from_file(str(file))
        except Exception as exc:  # the library raises a bare Exception for a bad file
            raise SpecError(f"--tokenizer {file}: not a tokenizers file ({exc})") from None
        self.path = file

    def count(self, text: str, *, special: bool = False) -> int:
        """Tokens in `text`; `special`: with the tokenizer's added tokens (BOS...), as
        bench_serving's ``tokenizer.encode(prompt)`` counts prompt lengths."""
        if not text and not special:
            return 0
        return len(self._tok.encode(text, add_special_tokens=special).ids)

    def count_prompt(self, text: str) -> int:
        return self.count(text, special=True)

    def count_many(self, texts: list[str]) -> list[int]:
        """Counts for many texts in one call (the library batches them in native threads)."""
        encodings = self._tok.encode_batch(texts, add_special_tokens=False) if texts else []
        return [len(e.ids) for e in encodings]


@functools.lru_cache(maxsize=4)
def load_tokenizer(path: Path) -> ClientTokenizer:
    """One instance per path per process: checking the spec, the prompts and the figures share it."""
    return ClientTokenizer(path)
