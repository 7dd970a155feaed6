"""The exact byte shape of SGLang's OpenAI stream chunks, recognised without decoding JSON.

At one token per event, `json.loads` and walking the decoded dicts was the largest part of the
client's CPU on the chat and completions routes (a cProfile of `sentinel bench` against
`sentinel sim --stream-interval 1`: about half of the read path), where the native route's
parser already reads its events with byte searches. These patterns match, in full, the chunks
SGLang v0.5.9 and v0.5.23 write (`model_dump_json()` of `ChatCompletionStreamResponse` /
`CompletionStreamResponse`: compact, fields in declaration order, `delta` with every field,
one choice, usage null or `UsageInfo`), and capture what the parser needs.

Why a match is as good as the full decode: the pattern is a strict subset of JSON (fixed keys
in a fixed order, so no duplicates; integers in JSON's own grammar; strings without a
backslash, a quote or a control character, so their bytes ARE the decoded value's UTF-8). A
chunk outside that subset (escapes in the text, an error object, extra or missing fields,
several choices, whitespace, another server's shape such as vLLM's) does not match and is
decoded in full by `backends.OpenAIParser`. UTF-8 validity, which the full decode checks, is
checked by the caller for non-ASCII chunks.
"""

from __future__ import annotations

import re

__all__ = ["CHAT_CHUNK", "CHAT_HEAD", "CHAT_REST", "COMPLETION_CHUNK", "COMPLETION_HEAD", "COMPLETION_REST"]

_STR = rb'"[^"\\\x00-\x1f]*"'  # a JSON string without escapes (its value not needed)
_TEXT = rb'"([^"\\\x00-\x1f]*)"'  # the same, captured: its bytes are the value's UTF-8
_INT = rb"(?:0|[1-9][0-9]*)"  # a non-negative JSON integer
_CINT = rb"(0|[1-9][0-9]*)"
# finish_reason: SGLang's literals ("stop", "length", "abort", ...); matched_stop must be null
# (it is set on the finish chunk only, which is rare enough to decode in full otherwise).
_TAIL = rb',"logprobs":null,"finish_reason":(?:null|"([a-z_]+)"),"matched_stop":null\}\],'
# Groups: prompt, completion, cached (or None), reasoning tokens, completion_tokens_details'
# reasoning tokens (or None); all None when usage is null.
_USAGE = (
    rb'"usage":(?:null|\{"prompt_tokens":' + _CINT + rb',"total_tokens":' + _INT
    + rb',"completion_tokens":' + _CINT
    + rb',"prompt_tokens_details":(?:null|\{"cached_tokens":' + _CINT + rb"\})"
    + rb',"reasoning_tokens":' + _CINT
    # 0.5.23 adds OpenAI's location of the reasoning count, which the parser reads first.
    + rb'(?:,"completion_tokens_details":(?:null|\{"reasoning_tokens":' + _CINT + rb"\}))?\})\}"
)  # fmt: skip
_HEAD = rb'\{"id":' + _STR + rb',"object":"%s","created":' + _INT + rb',"model":' + _STR

# Each pattern is HEAD + REST, HEAD without groups and ending at a fixed literal: a chunk is
# matched in full when its bytes up to HEAD's end equal those of a chunk of the same stream that
# matched in full (id, object, created and model do not change within a stream) and the rest
# matches REST, which has the same groups. That skips re-scanning a third of every chunk.
_CHOICE = rb',"choices":\[\{"index":0,'
_CHAT_HEAD = _HEAD % rb"chat\.completion\.chunk" + _CHOICE
# Groups: content, reasoning_content, finish_reason, then _USAGE's five.
_CHAT_REST = (
    rb'"delta":\{"role":(?:null|' + _STR + rb"),"
    + rb'"content":(?:null|' + _TEXT + rb'),"reasoning_content":(?:null|' + _TEXT + rb'),"tool_calls":null\}'
    + _TAIL + _USAGE
)  # fmt: skip
_COMPLETION_HEAD = _HEAD % rb"text_completion" + _CHOICE
# Groups: text, finish_reason, then _USAGE's five.
_COMPLETION_REST = rb'"text":' + _TEXT + _TAIL + _USAGE

CHAT_CHUNK = re.compile(_CHAT_HEAD + _CHAT_REST)
CHAT_HEAD = re.compile(_CHAT_HEAD)
CHAT_REST = re.compile(_CHAT_REST)
COMPLETION_CHUNK = re.compile(_COMPLETION_HEAD + _COMPLETION_REST)
COMPLETION_HEAD = re.compile(_COMPLETION_HEAD)
COMPLETION_REST = re.compile(_COMPLETION_REST)
