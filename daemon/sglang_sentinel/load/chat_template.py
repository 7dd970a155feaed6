"""The model's chat template, for bench_serving's `--apply-chat-template`: local files only.

bench_serving renders the prompt with ``tokenizer.apply_chat_template([{"role": "user",
"content": prompt}], add_generation_prompt=True, tokenize=False)`` and strips the BOS token
from the result (sharegpt and custom datasets). A chat template is a Jinja program that the
model ships, in ``chat_template.jinja`` or as ``chat_template`` in ``tokenizer_config.json``
beside the ``tokenizer.json`` that `--tokenizer` names; transformers renders it with jinja2's
immutable sandbox, ``trim_blocks`` and ``lstrip_blocks``, the loop controls, its own ``tojson``,
``raise_exception`` and ``strftime_now``, and the special tokens (``bos_token``...) as variables.
So do we, with jinja2 (the ``tokenizer`` extra) instead of transformers.
"""

from __future__ import annotations

import functools
import json
from datetime import datetime
from pathlib import Path
from typing import Any

from sglang_sentinel.load.spec import SpecError

__all__ = ["ChatTemplate", "chat_template_if_any", "load_chat_template"]

_INSTALL_HINT = "pip install 'sglang-sentinel[tokenizer]' (jinja2)"
# transformers' SPECIAL_TOKENS_ATTRIBUTES: what a template may read besides the messages.
_SPECIAL = ("bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token")


def _token(value: Any) -> str | None:
    # tokenizer_config.json holds a token as a string or as an AddedToken dict ({"content": ...}).
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _source(tokenizer: Path) -> tuple[str, dict[str, str], Path]:
    directory = tokenizer if tokenizer.is_dir() else tokenizer.parent
    config: dict[str, Any] = {}
    config_file = directory / "tokenizer_config.json"
    if config_file.is_file():
        try:
            loaded = json.loads(config_file.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
            raise SpecError(f"--apply-chat-template: cannot read {config_file}: {exc}") from None
        config = loaded if isinstance(loaded, dict) else {}
    specials = {k: tok for k in _SPECIAL if (tok := _token(config.get(k))) is not None}
    jinja_file = directory / "chat_template.jinja"
    if jinja_file.is_file():  # what transformers writes since 4.47, and prefers when loading
        return jinja_file.read_text(encoding="utf-8"), specials, jinja_file
    template = config.get("chat_template")
    if isinstance(template, list):  # named templates: transformers' default is "default"
        named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
        template = named.get("default")
    if not isinstance(template, str) or not template:
        raise SpecError(
            f"--apply-chat-template: no chat template in {directory} (neither chat_template.jinja nor "
            "'chat_template' in tokenizer_config.json)"
        )
    return template, specials, config_file


class ChatTemplate:
    """A compiled chat template and the special tokens it is rendered with."""

    def __init__(self, tokenizer: Path) -> None:
        text, self.specials, self.path = _source(tokenizer)
        try:
            import jinja2
            import jinja2.ext
            from jinja2.sandbox import ImmutableSandboxedEnvironment
        except ImportError:
            raise SpecError(f"--apply-chat-template needs the jinja2 library: {_INSTALL_HINT}") from None

        def raise_exception(message: str) -> None:
            raise jinja2.TemplateError(message)

        def tojson(
            x: Any,
            ensure_ascii: bool = False,
            indent: Any = None,
            separators: Any = None,
            sort_keys: bool = False,
        ) -> str:
            return json.dumps(
                x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys
            )

        env = ImmutableSandboxedEnvironment(
            trim_blocks=True,
            lstrip_blocks=True,
            extensions=[_generation_extension(jinja2), jinja2.ext.loopcontrols],
        )
        env.filters["tojson"] = tojson
        env.globals["raise_exception"] = raise_exception
        env.globals["strftime_now"] = lambda fmt: datetime.now().strftime(fmt)
        self._errors: tuple[type[Exception], ...] = (jinja2.TemplateError,)
        try:
            self._template = env.from_string(text)
        except jinja2.TemplateSyntaxError as exc:
            raise SpecError(f"--apply-chat-template: {self.path}: bad template ({exc})") from None

    def render(self, messages: list[dict[str, Any]]) -> str:
        """The prompt text with the generation prompt, as transformers' apply_chat_template."""
        try:
            return str(
                self._template.render(
                    messages=messages, add_generation_prompt=True, tools=None, **self.specials
                )
            )
        except self._errors as exc:
            raise SpecError(f"--apply-chat-template: {self.path}: {exc}") from None

    def user_prompt(self, text: str) -> str:
        """bench_serving's: the text as one user message, rendered, the BOS token removed."""
        prompt = self.render([{"role": "user", "content": text}])
        bos = self.specials.get("bos_token")
        return prompt.replace(bos, "") if bos else prompt


def _generation_extension(jinja2: Any) -> Any:
    """transformers' ``{% generation %}...{% endgeneration %}`` tags (they mark the assistant's
    tokens for training masks); rendering keeps the body as it is."""

    class Generation(jinja2.ext.Extension):  # type: ignore[misc]
        tags = frozenset({"generation"})

        def parse(self, parser: Any) -> Any:
            lineno = next(parser.stream).lineno
            body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
            return jinja2.nodes.Scope(body, lineno=lineno)

    return Generation


@functools.lru_cache(maxsize=4)
def load_chat_template(tokenizer: Path) -> ChatTemplate:
    """One per path per process: the spec check and the prompts share it."""
    return ChatTemplate(tokenizer)


def chat_template_if_any(tokenizer: Path) -> ChatTemplate | None:
    """The template where bench_serving would use one if it can (mooncake prompts), else None:
    no template, a bad one, or no jinja2 (`sentinel bench` warns of that one)."""
    try:
        return load_chat_template(tokenizer)
    except SpecError:
        return None
