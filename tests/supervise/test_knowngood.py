"""Known-good records on disk and the fallback's choice, without a server: a bad file is set aside
and counted, never a crash; the launch table's known_good row is a candidate for the GLM-5 profile;
only a record of the same launch profile and model is a candidate (this GPU and driver first); a
saved decision is kept only for the SGLang version it was made for."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

from structlog.testing import capture_logs

from sglang_sentinel.sglang.versions import Version
from sglang_sentinel.supervise.fallback import Fallback
from sglang_sentinel.supervise.knowngood import KNOWN_GOOD_FILE, KnownGoodStore, diff_flags, split_argv
from sglang_sentinel.supervise.launch import LaunchCommand, launch_version, render_command
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


def _glm5(*, backends: tuple[str, str], model: str = "/models/GLM-5-NVFP4") -> ServerSettings:
    return ServerSettings.model_validate(
        {
            "profile": "glm5-nvfp4-rtxpro6000",
            "profiles": {
                "glm5-nvfp4-rtxpro6000": {
                    "sglang_version": "0.5.9",
                    "model_path": model,
                    "dsa_prefill_backend": backends[0],
                    "dsa_decode_backend": backends[1],
                }
            },
            "fallback": {"enabled": True, "sources": ["history"]},
        }
    )


def _record(store: KnownGoodStore, argv: list[str], profile: str, *, at: float, **facts: str) -> str:
    h = f"h{len(store.records)}"
    store.mark_good(
        h,
        argv,
        sglang_version="0.5.9",
        driver_version=facts.get("driver"),
        gpu_model=facts.get("gpu"),
        profile=profile,
        now=at,
    )
    return h


def test_a_record_of_another_profile_or_model_is_never_a_candidate(tmp_path: Path) -> None:
    """A record's flags replace the configured ones: one of another launch profile (the simulator's)
    or of another model (path or served name) would make the fallback serve something else."""
    bad = render_command(_glm5(backends=("flashmla_sparse", "flashmla_kv")))
    good = render_command(_glm5(backends=("trtllm", "trtllm"))).argv
    other_model = render_command(_glm5(backends=("trtllm", "trtllm"), model="/models/Other")).argv
    store = KnownGoodStore(tmp_path / KNOWN_GOOD_FILE)
    sim = ["python", "-m", "sglang_sentinel_sim", "--sglang-version", "0.5.9", "--speed", "100"]
    _record(store, sim, "sim", at=100.0)
    _record(store, list(good), "glm5-other", at=101.0)  # same flags, another profile
    _record(store, list(other_model), "glm5-nvfp4-rtxpro6000", at=102.0)
    renamed = [*good[: good.index("--served-model-name") + 1], "glm-5-b", *good[good.index("glm-5") + 1 :]]
    _record(store, renamed, "glm5-nvfp4-rtxpro6000", at=103.0)
    fb = Fallback(FallbackSettings(enabled=True, sources=("history",)), tmp_path)
    fb.begin(bad)
    found = fb.candidate()
    assert isinstance(found, str), found
    assert "4 record(s) on this host, 0 of profile glm5-nvfp4-rtxpro6000 and this model" in found, found
    # The same profile and model, other backends: that one, and only launch flags change.
    _record(store, list(good), "glm5-nvfp4-rtxpro6000", at=50.0)
    fb = Fallback(FallbackSettings(enabled=True, sources=("history",)), tmp_path)
    fb.begin(bad)
    found = fb.candidate()
    assert not isinstance(found, str), found
    cmd, origin = found
    assert origin == "history"
    assert cmd.argv == good
    preview = Fallback(FallbackSettings(enabled=True), tmp_path).preview(bad)
    assert not any("--model-path" in line or "--served-model-name" in line for line in preview["differences"])


def test_this_gpu_model_and_driver_come_before_a_more_recent_record(tmp_path: Path) -> None:
    store = KnownGoodStore(tmp_path / KNOWN_GOOD_FILE)
    base = ["py", "--model-path", "/m", "--x", "1"]
    mine = _record(store, [*base[:3], "--x", "2"], "p", at=10.0, gpu="RTX PRO 6000", driver="580.65")
    newer = _record(store, [*base[:3], "--x", "3"], "p", at=20.0, gpu="H200", driver="580.65")
    same_gpu_other_driver = _record(store, [*base[:3], "--x", "4"], "p", at=15.0, gpu="RTX PRO 6000")
    order = [
        r.argv_hash
        for r in store.candidates(
            "0.5.9", (), profile="p", model=("/m", None), gpu_model="RTX PRO 6000", driver_version="580.65"
        )
    ]
    assert order == [mine, same_gpu_other_driver, newer]
    # Host facts unknown: the most recently good first.
    assert store.candidates("0.5.9", (), profile="p", model=("/m", None))[0].argv_hash == newer
    assert store.candidates("0.5.9", (), profile="p", model=("/other", None)) == []
    assert store.candidates("0.5.10", (), profile="p", model=("/m", None)) == []


def test_a_record_from_before_the_model_was_kept_reads_it_from_its_flags(tmp_path: Path) -> None:
    path = tmp_path / KNOWN_GOOD_FILE
    old = {"argv_hash": "h1", "flags": [["--model-path", ["/m"]], ["--x", ["1"]]],
           "argv": ["py", "--model-path", "/m", "--x", "1"], "sglang_version": "0.5.9",
           "driver_version": None, "gpu_model": None, "first_good": 1.0, "last_good": 2.0,
           "profile": "p"}  # fmt: skip
    no_profile = {**old, "argv_hash": "h2", "profile": None}
    del no_profile["profile"]
    path.write_text(json.dumps({"records": [old, no_profile]}))
    store = KnownGoodStore(path)
    store.load()
    assert store.records["h1"].model == ("/m", None)
    # Which launch a record without a profile was is not known: never a candidate.
    assert [r.argv_hash for r in store.candidates("0.5.9", (), profile="p", model=("/m", None))] == ["h1"]
    # Saved again, the model is written out.
    store.save()
    saved = json.loads(path.read_text())["records"][0]
    assert (saved["model_path"], saved["served_model_name"]) == ("/m", None)


def _decided(tmp_path: Path) -> tuple[Fallback, LaunchCommand]:
    settings = _glm5(backends=("flashmla_sparse", "flashmla_kv"))
    configured = render_command(settings)
    good = render_command(_glm5(backends=("trtllm", "trtllm")))
    store = KnownGoodStore(tmp_path / KNOWN_GOOD_FILE)
    _record(store, list(good.argv), "glm5-nvfp4-rtxpro6000", at=1.0)
    fb = Fallback(FallbackSettings(enabled=True, sources=("history",)), tmp_path)
    fb.begin(configured)
    fb.set_version("0.5.9")
    assert fb.decide("garbage") is not None
    saved = json.loads((tmp_path / "supervisor-fallback.json").read_text())
    assert saved["sglang_version"] == "0.5.9"
    return fb, configured


def test_a_decision_saved_for_another_sglang_version_is_discarded_at_start(tmp_path: Path) -> None:
    """An SGLang upgrade that leaves the command line as it was (0.5.9 and 0.5.10 render the same
    flags): the configured hash still matches, the version does not; the old flags are not relaunched."""
    _, configured = _decided(tmp_path)
    upgraded = replace(configured, sglang_version=Version(0, 5, 10))
    assert upgraded.config_hash == configured.config_hash
    with capture_logs() as logs:
        again = Fallback(FallbackSettings(enabled=True, sources=("history",)), tmp_path)
        assert again.begin(upgraded) is upgraded
    assert not again.active
    assert again.discarded["sglang_version_changed"] == 1
    assert again.view().discarded["sglang_version_changed"] == 1
    assert not (tmp_path / "supervisor-fallback.json").exists()
    gone = [e for e in logs if e["event"] == "server_fallback_discarded"]
    assert [(e["reason"], e["was"], e["now"]) for e in gone] == [
        ("sglang_version_changed", "0.5.9", "0.5.10")
    ]
    # The same version: restored.
    _decided(tmp_path)
    kept = Fallback(FallbackSettings(enabled=True, sources=("history",)), tmp_path)
    kept.begin(configured)
    assert kept.active


def test_a_decision_is_discarded_when_the_server_reports_another_version(tmp_path: Path) -> None:
    """A launch whose version is unknown before it runs (a systemd unit, another command): the
    version the fallback's server reports decides; a decision made before it was known adopts it."""
    _, configured = _decided(tmp_path)
    unknown = replace(configured, sglang_version=None)
    doc = json.loads((tmp_path / "supervisor-fallback.json").read_text())
    doc["configured_hash"] = unknown.config_hash
    (tmp_path / "supervisor-fallback.json").write_text(json.dumps(doc))
    fb = Fallback(FallbackSettings(enabled=True, sources=("history",)), tmp_path)
    fb.begin(unknown)
    assert fb.active
    assert not fb.set_version("0.5.9")
    assert not fb.set_version("0.5.9.post1")  # the decision said 0.5.9 only: one release, as at restore
    assert fb.active
    assert fb.set_version("0.5.10")
    assert fb.view().source == "configured"  # (not fb.active: mypy keeps the narrowing above)
    assert fb.running is unknown
    assert fb.discarded["sglang_version_changed"] == 1
    # A decision without a version (made before /server_info answered, or by an older sentinel).
    del doc["sglang_version"]
    (tmp_path / "supervisor-fallback.json").write_text(json.dumps(doc))
    fb = Fallback(FallbackSettings(enabled=True, sources=("history",)), tmp_path)
    fb.begin(unknown)
    assert not fb.set_version("0.5.10")
    assert fb.active
    assert json.loads((tmp_path / "supervisor-fallback.json").read_text())["sglang_version"] == "0.5.10"


def test_sim_launch_version_comes_from_its_arguments() -> None:
    settings = ServerSettings.model_validate(
        {"profiles": {"s": {"kind": "sim", "extra_args": ["--sglang-version", "0.5.9"]}}, "profile": "s"}
    )
    assert launch_version(render_command(settings)) == "0.5.9"
    assert launch_version(render_command(ServerSettings())) is None  # the simulator's own default
    other = ServerSettings.model_validate(
        {"profiles": {"c": {"kind": "command", "command": ["srv", "--sglang-version", "9"]}}, "profile": "c"}
    )
    assert launch_version(render_command(other)) is None  # not the simulator


def test_sglang_upgraded_under_a_running_sentinel_ends_the_decision_even_with_the_same_flags(
    tmp_path: Path,
) -> None:
    """preflight re-renders the command when SGLang changed under a running sentinel: a fallback
    decided for the old version ends, whether or not the flags render differently; an edit of the
    configured launch (systemd: launch.env) ends one about the old command only."""
    fb, configured = _decided(tmp_path)
    assert not fb.reconfigure(configured, "configuration_changed")  # nothing changed
    assert fb.active
    assert fb.reconfigure(replace(configured, sglang_version=Version(0, 5, 10)), "sglang_version_changed")
    assert fb.view().source == "configured"
    assert fb.discarded["sglang_version_changed"] == 1
    assert not (tmp_path / "supervisor-fallback.json").exists()
