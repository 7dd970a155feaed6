"""Parsing of the generation routes' request bodies into engine requests.

Field names, defaults and validation messages are SGLang v0.5.9's (``GenerateReqInput``,
``SamplingParams.verify``, ``TokenizerManager._validate_one_request``, ``ChatCompletionRequest``)
so that a client sees the same 400s from the simulator as from a real server.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Any

from sglang_sentinel_sim.text import count_tokens, split_tokens

__all__ = [
    "BadRequest",
    "GenParams",
    "chat_prompt",
    "parse_chat",
    "parse_completion",
    "parse_generate",
]


class BadRequest(ValueError):
    """A request the real server answers with HTTP 400 (message as SGLang words it)."""


@dataclass(slots=True)
class GenParams:
    rid: str
    prompt: str
    prompt_ids: list[int]
    prompt_tokens: int
    max_new_tokens: int
    min_new_tokens: int = 0
    ignore_eos: bool = False
    stop: list[str] = field(default_factory=list)
    stream: bool = False
    stream_interval: int = 1
    log_metrics: bool = True
    # SGLang's request `priority` (used under --enable-priority-scheduling); None when not given.
    priority: int | None = None
    thinking: bool = False
    # OpenAI extras
    model: str = ""
    include_usage: bool = False
    continuous_usage: bool = False
    separate_reasoning: bool = True
    echo: bool = False


def _num(value: object, name: str, *, integer: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise BadRequest(f"{name} must be a number, got {value!r}")
    if integer and not float(value).is_integer():
        raise BadRequest(f"{name} must be an integer, got {value!r}")
    return float(value)


def _stop_list(value: object) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list) and all(isinstance(s, str) for s in value):
        return [s for s in value if s]
    raise BadRequest(f"stop must be a string or a list of strings, got {value!r}")


def _verify_sampling(
    sp: dict[str, Any], max_new_default: int | None
) -> tuple[int | None, int, bool, list[str], int]:
    """SamplingParams.verify of v0.5.9; returns (max_new, min_new, ignore_eos, stop, stream_interval)."""
    if not isinstance(sp, dict):
        raise BadRequest(f"sampling_params must be an object, got {type(sp).__name__}")
    temperature = _num(sp.get("temperature", 1.0), "temperature")
    if temperature < 0.0:
        raise BadRequest(f"temperature must be non-negative, got {temperature}.")
    top_p = _num(sp.get("top_p", 1.0), "top_p")
    if not 0.0 < top_p <= 1.0:
        raise BadRequest(f"top_p must be in (0, 1], got {top_p}.")
    top_k = _num(sp.get("top_k", -1), "top_k", integer=True)
    if top_k < -1 or top_k == 0:
        raise BadRequest(f"top_k must be -1 (disable) or at least 1, got {int(top_k)}.")
    max_new: int | None
    raw_max = sp.get("max_new_tokens", max_new_default)
    if raw_max is None:
        max_new = None
    else:
        max_new = int(_num(raw_max, "max_new_tokens", integer=True))
        if max_new < 0:
            raise BadRequest(f"max_new_tokens must be at least 0, got {max_new}.")
    min_new = int(_num(sp.get("min_new_tokens", 0), "min_new_tokens", integer=True))
    if min_new < 0 or (max_new is not None and min_new > max_new):
        raise BadRequest(f"min_new_tokens must be in [0, max_new_tokens({max_new})], got {min_new}.")
    ignore_eos = bool(sp.get("ignore_eos", False))
    stop = _stop_list(sp.get("stop"))
    interval_raw = sp.get("stream_interval")
    interval = 0 if interval_raw is None else int(_num(interval_raw, "stream_interval", integer=True))
    return max_new, min_new, ignore_eos, stop, interval


def _check_context(prompt_tokens: int, max_new: int | None, context_len: int) -> int:
    if prompt_tokens >= context_len:
        raise BadRequest(
            f"The input ({prompt_tokens} tokens) is longer than the model's context length "
            f"({context_len} tokens)."
        )
    if max_new is None:
        return context_len - prompt_tokens
    if max_new + prompt_tokens >= context_len:
        raise BadRequest(
            f"Requested token count exceeds the model's maximum context length of {context_len} tokens. "
            f"You requested a total of {max_new + prompt_tokens} tokens: {prompt_tokens} tokens from "
            f"the input messages and {max_new} tokens for the completion. Please reduce the number of "
            "tokens in the input messages or the completion to fit within the limit."
        )
    return max_new


def parse_generate(body: object, *, context_len: int, default_stream_interval: int) -> list[GenParams]:
    """``POST /generate``: one entry per prompt (a list input is a batch)."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    text = body.get("text")
    ids = body.get("input_ids")
    if text is None and ids is None:
        raise BadRequest("Either text, input_ids or input_embeds should be provided.")
    if text is not None and ids is not None:
        raise BadRequest("Either text, input_ids or input_embeds should be provided.")
    prompts: list[tuple[str, list[int]]]
    batch = False
    if text is not None:
        if isinstance(text, str):
            prompts = [(text, [])]
        elif isinstance(text, list) and text and all(isinstance(t, str) for t in text):
            prompts = [(t, []) for t in text]
            batch = True
        else:
            raise BadRequest("text must be a string or a non-empty list of strings")
    else:
        if isinstance(ids, list) and ids and all(isinstance(i, int) and not isinstance(i, bool) for i in ids):
            prompts = [("", list(ids))]
        elif isinstance(ids, list) and ids and all(isinstance(x, list) and x for x in ids):
            for x in ids:
                if not all(isinstance(i, int) and not isinstance(i, bool) for i in x):
                    raise BadRequest("input_ids must be a list of integers or a list of lists of integers")
            prompts = [("", list(x)) for x in ids]
            batch = True
        else:
            raise BadRequest("input_ids must be a non-empty list of integers or of lists of integers")
    sp_raw = body.get("sampling_params") or {}
    sps: list[dict[str, Any]]
    if isinstance(sp_raw, list):
        if len(sp_raw) != len(prompts):
            raise BadRequest("The length of sampling_params does not match the batch size.")
        sps = sp_raw
    else:
        sps = [sp_raw] * len(prompts)
    stream = bool(body.get("stream", False))
    log_metrics = bool(body.get("log_metrics", True))
    rid_raw = body.get("rid")
    rids: list[str]
    if rid_raw is None:
        rids = [uuid.uuid4().hex for _ in prompts]
    elif isinstance(rid_raw, str) and not batch:
        rids = [rid_raw]
    elif (
        isinstance(rid_raw, list)
        and len(rid_raw) == len(prompts)
        and all(isinstance(r, str) for r in rid_raw)
    ):
        rids = list(rid_raw)
    else:
        raise BadRequest("rid must be a string (or a list of strings matching the batch)")
    out: list[GenParams] = []
    for (prompt, pids), sp, rid in zip(prompts, sps, rids, strict=True):
        max_new, min_new, ignore_eos, stop, interval = _verify_sampling(sp, 128)
        n_prompt = len(pids) if pids else count_tokens(prompt)
        if n_prompt == 0:
            raise BadRequest("The input is empty.")
        max_new_i = _check_context(n_prompt, max_new, context_len)
        out.append(
            GenParams(
                rid=rid,
                prompt=prompt,
                prompt_ids=pids,
                prompt_tokens=n_prompt,
                max_new_tokens=max_new_i,
                min_new_tokens=min_new,
                ignore_eos=ignore_eos,
                stop=stop,
                stream=stream,
                stream_interval=interval or default_stream_interval,
                log_metrics=log_metrics,
                priority=_priority(body),
            )
        )
    return out


def _priority(body: dict[str, Any]) -> int | None:
    value = body.get("priority")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise BadRequest("priority must be an integer")
    return value


def _message_text(content: object) -> str:
    if content is None:
        return ""  # v0.5.9 turns null content into "" before templating
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts: list[str] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(part["text"])
            elif isinstance(part, dict) and "type" in part:
                continue  # images/audio: no vision tower in the simulator, ignored
            else:
                raise BadRequest("message content parts must be objects with a type")
        return "\n".join(parts)
    raise BadRequest(
        f"message content must be a string, a list of parts or null, got {type(content).__name__}"
    )


def chat_prompt(messages: list[dict[str, Any]]) -> tuple[str, int, str]:
    """Render the chat prompt; return (text, token count, last user message).

    Token rule for chat: 3 template tokens (``[gMASK]<sop>`` and the final ``<|assistant|>``)
    plus, per message, 1 role token and ``count_tokens(content)``.
    """
    tokens = 3
    rendered: list[str] = []
    last_user = ""
    for msg in messages:
        role = msg.get("role")
        if not isinstance(role, str):
            raise BadRequest("every message needs a string role")
        text = _message_text(msg.get("content"))
        tokens += 1 + count_tokens(text)
        rendered.append(f"<|{role}|>\n{text}")
        if role == "user":
            last_user = text
    return "".join(rendered), tokens, last_user


def _openai_common(
    body: dict[str, Any], context_len: int, prompt_tokens: int
) -> tuple[int, int, bool, list[str]]:
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None:
        max_tokens = int(_num(max_tokens, "max_tokens", integer=True))
        if max_tokens < 0:
            raise BadRequest(f"max_new_tokens must be at least 0, got {max_tokens}.")
    temperature = body.get("temperature")
    if temperature is not None and _num(temperature, "temperature") < 0:
        raise BadRequest(f"temperature must be non-negative, got {temperature}.")
    n = body.get("n", 1)
    if n not in (None, 1):
        raise BadRequest("n > 1 is not supported by the simulator")
    min_new = int(_num(body.get("min_tokens", 0) or 0, "min_tokens", integer=True))
    max_new = _check_context(prompt_tokens, max_tokens, context_len)
    return max_new, min_new, bool(body.get("ignore_eos", False)), _stop_list(body.get("stop"))


def _stream_options(body: dict[str, Any]) -> tuple[bool, bool]:
    so = body.get("stream_options")
    if so is None:
        return False, False
    if not isinstance(so, dict):
        raise BadRequest("stream_options must be an object")
    return bool(so.get("include_usage", False)), bool(so.get("continuous_usage_stats", False))


def parse_chat(
    body: object, *, context_len: int, reasoning: bool, default_stream_interval: int
) -> tuple[GenParams, str]:
    """``POST /v1/chat/completions``; returns the params and the text the script keys on."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        raise BadRequest("Messages cannot be empty.")
    if not all(isinstance(m, dict) for m in messages):
        raise BadRequest("every message must be an object")
    rendered, n_prompt, last_user = chat_prompt(messages)
    max_new, min_new, ignore_eos, stop = _openai_common(body, context_len, n_prompt)
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise BadRequest("chat_template_kwargs must be an object")
    thinking = reasoning and kwargs.get("enable_thinking", True) is not False
    include_usage, continuous = _stream_options(body)
    rid = body.get("rid")
    params = GenParams(
        rid=rid if isinstance(rid, str) else f"chatcmpl-{uuid.uuid4().hex}",
        prompt=rendered,
        prompt_ids=[],
        prompt_tokens=n_prompt,
        max_new_tokens=max_new,
        min_new_tokens=min_new,
        ignore_eos=ignore_eos,
        stop=stop,
        stream=bool(body.get("stream", False)),
        priority=_priority(body),
        stream_interval=default_stream_interval,
        thinking=thinking,
        model=str(body.get("model") or "default"),
        include_usage=include_usage,
        continuous_usage=continuous,
        separate_reasoning=bool(body.get("separate_reasoning", True)),
    )
    return params, last_user or rendered


def parse_completion(body: object, *, context_len: int, default_stream_interval: int) -> GenParams:
    """``POST /v1/completions`` (a single prompt: text or token ids)."""
    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    prompt = body.get("prompt")
    text = ""
    ids: list[int] = []
    if isinstance(prompt, str):
        text = prompt
    elif isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
        text = prompt[0]
    elif (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(i, int) and not isinstance(i, bool) for i in prompt)
    ):
        ids = list(prompt)
    else:
        raise BadRequest(
            "prompt must be a string or a list of token ids (batches are not supported by the simulator)"
        )
    n_prompt = len(ids) if ids else count_tokens(text)
    if n_prompt == 0:
        raise BadRequest("The input is empty.")
    if body.get("max_tokens") is None:
        body = {**body, "max_tokens": 16}  # OpenAI completions default
    max_new, min_new, ignore_eos, stop = _openai_common(body, context_len, n_prompt)
    include_usage, continuous = _stream_options(body)
    rid = body.get("rid")
    return GenParams(
        rid=rid if isinstance(rid, str) else f"cmpl-{uuid.uuid4().hex}",
        prompt=text,
        prompt_ids=ids,
        prompt_tokens=n_prompt,
        max_new_tokens=max_new,
        min_new_tokens=min_new,
        ignore_eos=ignore_eos,
        stop=stop,
        stream=bool(body.get("stream", False)),
        priority=_priority(body),
        stream_interval=default_stream_interval,
        model=str(body.get("model") or "default"),
        include_usage=include_usage,
        continuous_usage=continuous,
        echo=bool(body.get("echo", False)),
    )


def stop_position(pieces: list[str], stops: list[str], limit: int) -> tuple[int, str] | None:
    """Token index (1-based count) at which the first stop string is complete, within ``limit``."""
    if not stops:
        return None
    text = ""
    for i, piece in enumerate(pieces[:limit]):
        text += piece
        for s in stops:
            if s in text[-(len(s) + len(piece)) :]:
                return i + 1, s
    return None


# Re-exported for the API module (keeps its imports in one place).
__all__ += ["split_tokens", "stop_position"]
