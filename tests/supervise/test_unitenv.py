"""The unit's launch flags as systemd reads them from EnvironmentFile= (supervise/unitenv.py), and
the fallback file sentinel writes: read back as exactly the flags written."""

from __future__ import annotations

from pathlib import Path

import pytest

from sglang_sentinel.supervise.unitenv import (
    UnitEnvError,
    parse_env_file,
    read_args,
    render_args_file,
    split_words,
    write_args_file,
)

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def test_the_shipped_launch_env_reads_as_its_flags() -> None:
    env = parse_env_file((DEPLOY / "sglang-launch.env").read_text())
    args = split_words(env["SGLANG_ARGS"])
    assert args[:4] == ("--model-path", "/models/GLM-5-NVFP4", "--served-model-name", "glm-5")
    assert args[-2:] == ("--port", "30000")
    assert all(a.strip() == a and a for a in args)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("A=1\n", {"A": "1"}),
        ("  A = 1  \n", {"A": "1"}),  # unquoted: trimmed
        ('A=" 1 "\n', {"A": " 1 "}),  # quoted: kept
        ("A='x \"y\" $z'\n", {"A": 'x "y" $z'}),  # single quotes: literal
        ('A="a \\"b\\" \\\\ \\$c \\x"\n', {"A": 'a "b" \\ $c \\x'}),  # the double-quote escapes
        ('A="one \\\n   two"\n', {"A": "one    two"}),  # backslash-newline joins
        ("A=one \\\ntwo\n", {"A": "one two"}),
        ("# A=1\n; B=2\nC=3\n", {"C": "3"}),  # comments
        ("#x \\\nA=1\nB=2\n", {"B": "2"}),  # a comment continued by a backslash
        ("NOEQUALS\nA=1\nA=2\n", {"A": "2"}),  # a line without "=" is ignored; later wins
        ("A=\n", {"A": ""}),
    ],
)
def test_systemd_environment_file_syntax(text: str, expected: dict[str, str]) -> None:
    assert parse_env_file(text) == expected


def test_the_later_file_wins_and_a_missing_optional_one_is_skipped(tmp_path: Path) -> None:
    launch, fallback = tmp_path / "launch.env", tmp_path / "fallback.env"
    launch.write_text('SGLANG_ARGS="--a 1 --b"\nOTHER=x\n')
    assert read_args([launch, fallback], "SGLANG_ARGS") == ("--a", "1", "--b")
    fallback.write_text('SGLANG_ARGS="--a 2"\n')
    assert read_args([launch, fallback], "SGLANG_ARGS") == ("--a", "2")
    assert read_args([launch], "MISSING") is None
    assert read_args([tmp_path / "none.env"], "SGLANG_ARGS") is None
    launch.write_text('SGLANG_ARGS="--a \'unbalanced"\n')
    with pytest.raises(UnitEnvError):
        read_args([launch], "SGLANG_ARGS")


def test_the_fallback_file_reads_back_as_the_flags_written(tmp_path: Path) -> None:
    args = ("--model-path", "/models/m", "--chat-template", "a b", "--x", "$HOME", "--json", "{k:1}")
    path = tmp_path / "sub" / "fallback.env"
    assert write_args_file(path, "SGLANG_ARGS", args, "line one\nline two")
    assert read_args([path], "SGLANG_ARGS") == args
    assert path.read_text().startswith("# line one\n# line two\nSGLANG_ARGS=")
    assert path.stat().st_mode & 0o777 == 0o600  # it may carry the API key
    assert not write_args_file(path, "SGLANG_ARGS", args, "line one\nline two")  # unchanged
    for bad in ("it's", 'say "x"', "a\\b", "tab\there", ""):
        with pytest.raises(UnitEnvError):
            render_args_file("SGLANG_ARGS", ["--x", bad], "")
