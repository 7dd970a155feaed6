"""Known-good records on disk and the fallback's choice, without a server: a bad file is set aside
and counted, never a crash; the launch table's known_good row is a candidate for the GLM-5 profile."""

from __future__ import annotations

import json
from pathlib import Path

from sglang_sentinel.supervise.fallback import Fallback
from sglang_sentinel.supervise.knowngood import KNOWN_GOOD_FILE, KnownGoodStore, diff_flags, split_argv
from sglang_sentinel.supervise.launch import render_command
from sglang_sentinel.supervise.settings import FallbackSettings, ServerSettings


def test_a_malformed_file_is_set_aside_and_counted(tmp_path: Path) -> None:
    path = tmp_path / KNOWN_GOOD_FILE
    path.write_text("{not json")
    store = KnownGoodStore(path)
    store.load()
    assert store.records == {}
    assert store.unreadable == 1
    assert (tmp_path / (KNOWN_GOOD_FILE + ".bad")).read_text() == "{not json"
    store.mark_good(
        "h1", ["py", "--a", "1"], sglang_version="0.5.9", driver_version=None, gpu_model=None, profile="p"
    )
    again = KnownGoodStore(path)
    again.load()
    assert list(again.records) == ["h1"]


def test_a_malformed_record_is_skipped_the_others_kept(tmp_path: Path) -> None:
    path = tmp_path / KNOWN_GOOD_FILE
    good = {"argv_hash": "h2", "flags": [["--a", ["1"]]], "argv": ["py", "--a", "1"],
            "sglang_version": "0.5.9", "driver_version": None, "gpu_model": None,
            "first_good": 1.0, "last_good": 2.0}  # fmt: skip
    path.write_text(json.dumps({"records": [{"argv_hash": "h1"}, good]}))
    store = KnownGoodStore(path)
    store.load()
    assert list(store.records) == ["h2"]
    assert store.unreadable == 1


def test_flags_split_and_differences() -> None:
    prefix, flags = split_argv(
        ["py", "-m", "x", "--tp-size", "8", "--trust-remote-code", "--a=b", "--bs", "1", "2"]
    )
    assert prefix == ("py", "-m", "x")
    assert flags == (
        ("--tp-size", ("8",)),
        ("--trust-remote-code", ()),
        ("--a", ("b",)),
        ("--bs", ("1", "2")),
    )
    old = (("--x", ("flashmla_kv",)), ("--gone", ()), ("--port", ("1",)))
    new = (("--x", ("trtllm",)), ("--new", ("1",)), ("--port", ("2",)))
    assert diff_flags(old, new) == ["--x flashmla_kv → trtllm", "--gone (on) → removed", "--new added: 1"]


def test_the_table_row_is_the_fallback_of_a_known_bad_glm5_launch(tmp_path: Path) -> None:
    settings = ServerSettings.model_validate(
        {
            "profile": "glm5-nvfp4-rtxpro6000",
            "api_key": "s3cret-key",
            "profiles": {
                "glm5-nvfp4-rtxpro6000": {
                    "sglang_version": "0.5.9",
                    "dsa_prefill_backend": "flashmla_sparse",
                    "dsa_decode_backend": "flashmla_kv",
                }
            },
        }
    )
    configured = render_command(settings)
    fb = Fallback(FallbackSettings(enabled=True), tmp_path)
    fb.begin(configured)
    found = fb.candidate()
    assert not isinstance(found, str), found
    cmd, origin = found
    assert origin == "table: glm5.sm120.trtllm_bf16"
    argv = list(cmd.argv)
    assert argv[argv.index("--nsa-decode-backend") + 1] == "trtllm"
    assert argv[argv.index("--kv-cache-dtype") + 1] == "bf16"
    assert argv[argv.index("--api-key") + 1] == "s3cret-key"  # the configured key, never a record's
    assert "s3cret-key" not in " ".join(cmd.redacted_argv())
    assert cmd.argv[:3] == configured.argv[:3]  # interpreter and entrypoint unchanged
    # Decided: saved without the key, restored by the next sentinel for the same configured launch.
    assert fb.decide("garbage") is not None
    saved = (tmp_path / "supervisor-fallback.json").read_text()
    assert "s3cret-key" not in saved
    again = Fallback(FallbackSettings(enabled=True), tmp_path)
    assert again.begin(configured).argv == cmd.argv
    assert again.active
