"""The documented token-count rule and the deterministic scripts."""

from __future__ import annotations

import pytest

from sglang_sentinel_sim.requests import BadRequest, chat_prompt, parse_generate, stop_position
from sglang_sentinel_sim.text import THINK_END, count_tokens, make_script, split_tokens


@pytest.mark.parametrize(
    ("text", "n"),
    [
        ("", 0),
        ("   ", 0),
        ("What is 2+2?", 6),
        ("hello world", 2),
        ("a,b", 3),
        ("  x\n\ty ", 2),
        ("naïve café", 2),
    ],
)
def test_token_rule(text: str, n: int) -> None:
    assert count_tokens(text) == n


def test_pieces_reassemble_and_recount() -> None:
    script = make_script("tell me about caching", thinking=False, thinking_tokens=0)
    pieces = list(script.pieces(300))
    text = "".join(pieces)
    assert count_tokens(text) == 300
    assert split_tokens(text) == pieces


def test_scripts_are_deterministic_and_prompt_dependent() -> None:
    a = make_script("prompt one", thinking=False, thinking_tokens=0)
    b = make_script("prompt one", thinking=False, thinking_tokens=0)
    c = make_script("prompt two", thinking=False, thinking_tokens=0)
    assert list(a.pieces(200)) == list(b.pieces(200))
    assert a.natural_len == b.natural_len
    assert list(a.pieces(200)) != list(c.pieces(200))
    assert 24 <= a.natural_len <= 280


def test_known_answers() -> None:
    four = make_script("What is 2+2?", thinking=False, thinking_tokens=0)
    assert "".join(four.pieces(four.natural_len)) == "2 + 2 = 4."
    prime = make_script("Please write an is_prime function in Python", thinking=False, thinking_tokens=0)
    code = "".join(prime.pieces(prime.natural_len))
    assert "def is_prime(n: int) -> bool:" in code
    namespace: dict[str, object] = {}
    exec(code.strip("`").removeprefix("python\n"), namespace)  # the canary answer is real code
    is_prime = namespace["is_prime"]
    assert [n for n in range(20) if is_prime(n)] == [2, 3, 5, 7, 11, 13, 17, 19]  # type: ignore[operator]


def test_thinking_precedes_answer() -> None:
    script = make_script("What is 2+2?", thinking=True, thinking_tokens=48)
    pieces = list(script.pieces(script.natural_len))
    assert pieces[script.answer_start - 1] == THINK_END
    assert script.answer_start >= 48
    assert "".join(pieces[script.answer_start :]) == "2 + 2 = 4."


def test_chat_prompt_rule() -> None:
    _, n, last = chat_prompt(
        [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"}]
    )
    assert n == 3 + (1 + 3) + (1 + 6)
    assert last == "What is 2+2?"
    _, n_null, _ = chat_prompt([{"role": "user", "content": None}])
    assert n_null == 4


def test_stop_position() -> None:
    pieces = split_tokens("one two three four")
    assert stop_position(pieces, ["three"], 10) == (3, "three")
    assert stop_position(pieces, ["nope"], 10) is None
    assert stop_position(pieces, ["four"], 3) is None


def test_generate_validation_messages() -> None:
    with pytest.raises(BadRequest, match="Either text, input_ids"):
        parse_generate({}, context_len=100, default_stream_interval=1)
    with pytest.raises(BadRequest, match="max_new_tokens must be at least 0"):
        parse_generate(
            {"text": "x", "sampling_params": {"max_new_tokens": -1}},
            context_len=100,
            default_stream_interval=1,
        )
    with pytest.raises(BadRequest, match="maximum context length of 100 tokens"):
        parse_generate(
            {"input_ids": [1] * 60, "sampling_params": {"max_new_tokens": 50}},
            context_len=100,
            default_stream_interval=1,
        )
    with pytest.raises(BadRequest, match="longer than the model's context length"):
        parse_generate({"input_ids": [1] * 100}, context_len=100, default_stream_interval=1)
    with pytest.raises(BadRequest, match="temperature must be non-negative"):
        parse_generate(
            {"text": "x", "sampling_params": {"temperature": -1}}, context_len=100, default_stream_interval=1
        )
    (gp,) = parse_generate({"input_ids": [5, 6, 7]}, context_len=1000, default_stream_interval=1)
    assert gp.prompt_tokens == 3
    assert gp.max_new_tokens == 128
