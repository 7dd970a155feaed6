"""One request's input (`Prompt`), what every prompt source yields, and the whole-file JSON reader
the file datasets share (ShareGPT, agentic trace). Below every dataset loader, importing none.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sglang_sentinel.load.spec import SpecError

__all__ = ["Prompt", "read_json_file"]


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
