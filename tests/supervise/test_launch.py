"""Launch profiles rendered to argv, per SGLang version."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from sglang_sentinel.sglang.versions import Version, parse_version
from sglang_sentinel.supervise.launch import (
    BUILTIN_PROFILES,
    ProfileError,
    detect_sglang_version,
    render_command,
    version_text,
)
from sglang_sentinel.supervise.settings import ServerSettings

GLM = "glm5-nvfp4-rtxpro6000"


def glm(**server: object) -> ServerSettings:
    return ServerSettings.model_validate({"profile": GLM, **server})


def flag(argv: tuple[str, ...], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


@pytest.mark.parametrize(
    ("version", "prefix"),
    [
        (Version(0, 5, 9), "--nsa"),
        (Version(0, 5, 12), "--nsa"),
        (Version(0, 5, 15), "--dsa"),
        (Version(0, 5, 19), "--dsa"),
        (Version(0, 5, 23), "--dsa"),
    ],
)
def test_dsa_flags_follow_the_rename(version: Version, prefix: str) -> None:
    cmd = render_command(glm(), detected_version=version)
    other = "--dsa" if prefix == "--nsa" else "--nsa"
    assert cmd.launch_row is not None
    prefill, decode = cmd.launch_row.backends
    assert flag(cmd.argv, f"{prefix}-prefill-backend") == prefill
    assert flag(cmd.argv, f"{prefix}-decode-backend") == decode
    assert not any(a.startswith(other) for a in cmd.argv)
    assert cmd.sglang_version == version
    assert cmd.version_source == "detected"


def test_glm_profile_renders_the_deployment() -> None:
    cmd = render_command(glm(port=31000), detected_version=Version(0, 5, 9))
    a = cmd.argv
    assert a[1:3] == ("-m", "sglang.launch_server")
    assert flag(a, "--model-path") == "/models/GLM-5-NVFP4"
    assert flag(a, "--tp-size") == "8"
    # The deployment's finding on 0.5.9 / SM120: trtllm, and an explicit bf16 KV cache.
    assert flag(a, "--nsa-prefill-backend") == "trtllm"
    assert flag(a, "--nsa-decode-backend") == "trtllm"
    assert flag(a, "--kv-cache-dtype") == "bf16"  # explicit: auto picks fp8 on SM120 (garbled output)
    assert cmd.launch_row is not None
    assert cmd.launch_row.key == "glm5.sm120.trtllm_bf16"
    assert "deployment finding" in cmd.launch_row.source
    assert flag(a, "--mem-fraction-static") == "0.85"
    assert flag(a, "--reasoning-parser") == "glm45"
    assert flag(a, "--host") == "127.0.0.1"
    assert flag(a, "--port") == "31000"
    assert "--enable-metrics" in a
    assert "--disable-cuda-graph" in a
    assert not any(x.startswith("--cuda-graph-backend") for x in a)
    assert cmd.env["NCCL_P2P_LEVEL"] == "SYS"
    assert cmd.env["SGLANG_ENABLE_JIT_DEEPGEMM"] == "0"
    assert "SGLANG_ENABLE_DEEP_GEMM" not in cmd.env  # read by no SGLang version


@pytest.mark.parametrize("version", [Version(0, 5, 19), Version(0, 5, 23), Version(0, 5, 40)])
def test_glm_profile_on_newer_sglang(version: Version) -> None:
    cmd = render_command(glm(), detected_version=version)
    a = cmd.argv
    # `sglang serve` run by the profile's interpreter: what the console script runs.
    assert a[1] == "-c"
    assert "from sglang.cli.main import main" in a[2]
    assert a[3] == "serve"
    assert flag(a, "--dsa-prefill-backend") == "tilelang"
    assert flag(a, "--dsa-decode-backend") == "tilelang"
    assert flag(a, "--kv-cache-dtype") == "bf16"
    assert "--disable-cuda-graph" not in a  # deprecated from 0.5.19
    assert "--cuda-graph-backend-decode=disabled" in a
    assert "--cuda-graph-backend-prefill=disabled" in a
    assert cmd.launch_row is not None
    assert cmd.launch_row.key == "glm5.sm120.tilelang_bf16"
    assert "SGLANG_ENABLE_DEEP_GEMM" not in cmd.env


def test_profile_values_override_the_table() -> None:
    s = ServerSettings.model_validate(
        {
            "profile": GLM,
            "profiles": {GLM: {"dsa_decode_backend": "trtllm", "kv_cache_dtype": "fp8_e4m3"}},
        }
    )
    cmd = render_command(s, detected_version=Version(0, 5, 23))
    assert flag(cmd.argv, "--dsa-prefill-backend") == "tilelang"  # from the table
    assert flag(cmd.argv, "--dsa-decode-backend") == "trtllm"  # the override
    assert flag(cmd.argv, "--kv-cache-dtype") == "fp8_e4m3"
    assert cmd.dsa == ("tilelang", "trtllm", "fp8_e4m3")


def test_entrypoint_stub_runs_sglangs_cli_main(tmp_path: Path) -> None:
    # The stub must be what the `sglang` console script does: call sglang.cli.main:main with
    # argv[1:] = ["serve", ...]. A stand-in sglang package records what it was called with.
    pkg = tmp_path / "sglang" / "cli"
    pkg.mkdir(parents=True)
    (tmp_path / "sglang" / "__init__.py").write_text("")
    (pkg / "__init__.py").write_text("")
    (pkg / "main.py").write_text("import sys\ndef main():\n    print(repr(sys.argv))\n    return 3\n")
    cmd = render_command(glm(), detected_version=Version(0, 5, 23))
    proc = subprocess.run(
        [sys.executable, *cmd.argv[1:4], "--model-path", "/m"],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(tmp_path)},
        check=False,
    )
    assert proc.returncode == 3
    assert proc.stdout.strip() == repr(["sglang", "serve", "--model-path", "/m"])


def test_unknown_version_renders_for_newest_and_says_so() -> None:
    cmd = render_command(glm(), detect_message="sglang is not importable")
    assert "--dsa-prefill-backend" in cmd.argv
    assert cmd.sglang_version is None
    assert "not importable" in cmd.version_source
    assert "0.5.23" in cmd.version_source


def test_pinned_version_wins_and_bad_pin_is_an_error() -> None:
    pinned = ServerSettings.model_validate(
        {
            "profile": "mine",
            "profiles": {
                "mine": {"model_path": "/m", "dsa_decode_backend": "fa3", "sglang_version": "0.5.9"}
            },
        }
    )
    cmd = render_command(pinned, detected_version=Version(0, 5, 23))
    assert flag(cmd.argv, "--nsa-decode-backend") == "fa3"
    assert cmd.version_source == "pinned in the profile"
    for pin, why in (("x", "not an SGLang version"), ("0.5.8", "older than the oldest supported")):
        with pytest.raises(ValidationError, match=why) as exc:
            ServerSettings.model_validate(
                {"profile": "b", "profiles": {"b": {"model_path": "/m", "sglang_version": pin}}}
            )
        assert exc.value.errors()[0]["loc"][-1] == "sglang_version"


def test_sim_profile_is_the_default_and_on_loopback() -> None:
    cmd = render_command(ServerSettings())
    assert cmd.argv[:4] == (sys.executable, "-m", "sglang_sentinel_sim", "--host")
    assert flag(cmd.argv, "--host") == "127.0.0.1"
    assert flag(cmd.argv, "--port") == "30000"
    assert cmd.profile.required_gpus == 0


def test_config_hash_tracks_argv_and_env() -> None:
    base = render_command(glm(), detected_version=Version(0, 5, 9))
    assert base.config_hash == render_command(glm(), detected_version=Version(0, 5, 9)).config_hash
    assert base.config_hash != render_command(glm(port=31001), detected_version=Version(0, 5, 9)).config_hash
    assert base.config_hash != render_command(glm(), detected_version=Version(0, 5, 23)).config_hash


def test_api_key_is_passed_but_never_displayed() -> None:
    cmd = render_command(glm(api_key="s3cret"), detected_version=Version(0, 5, 9))
    assert flag(cmd.argv, "--api-key") == "s3cret"
    assert "s3cret" not in cmd.display()
    assert "s3cret" not in cmd.redacted_argv()


def test_unknown_profile_lists_the_known_ones() -> None:
    with pytest.raises(
        ProfileError, match=r"unknown launch profile 'nope' \(known: glm5-nvfp4-rtxpro6000, sim\)"
    ):
        render_command(ServerSettings(profile="nope"))


def test_profile_without_model_path_is_an_error() -> None:
    s = ServerSettings.model_validate({"profile": "x", "profiles": {"x": {"kind": "sglang"}}})
    with pytest.raises(ProfileError, match="no model_path"):
        render_command(s, detected_version=Version(0, 5, 9))


@pytest.mark.parametrize(
    ("text", "want"),
    [
        ("0.5.9", Version(0, 5, 9)),
        ("0.5.10.post1", Version(0, 5, 10, 1)),
        ("v0.5.23rc1", Version(0, 5, 23, -1, "rc1")),
        ("0.6", Version(0, 6, 0)),
    ],
)
def test_a_pinned_version_is_read_by_the_daemons_one_parser(text: str, want: Version) -> None:
    s = ServerSettings.model_validate(
        {"profile": "p", "profiles": {"p": {"model_path": "/m", "sglang_version": text}}}
    )
    cmd = render_command(s)
    assert cmd.sglang_version == want
    assert version_text(cmd.sglang_version) == str(want)
    assert parse_version(str(want)) == want  # .postN and the pre-release survive the round trip


def test_detect_version_reports_missing_sglang_and_missing_interpreter() -> None:
    version, msg = detect_sglang_version(sys.executable, timeout=30)
    assert version is None
    assert "not importable" in msg
    version, msg = detect_sglang_version("/nonexistent/python3")
    assert version is None
    assert "not found" in msg


def test_a_profile_named_like_a_builtin_adjusts_it() -> None:
    s = ServerSettings.model_validate({"profile": GLM, "profiles": {GLM: {"model_path": "/data/glm5"}}})
    cmd = render_command(s, detected_version=Version(0, 5, 9))
    assert flag(cmd.argv, "--model-path") == "/data/glm5"
    assert flag(cmd.argv, "--tp-size") == "8"  # everything else is the built-in's
    assert flag(cmd.argv, "--kv-cache-dtype") == "bf16"


def test_base_chains_and_explicit_fields_win() -> None:
    profiles: dict[str, dict[str, object]] = {
        "site": {"base": GLM, "python": "/opt/sglang/bin/python", "extra_args": []},
        "canary-box": {"base": "site", "tp_size": 4, "kv_cache_dtype": "auto"},
    }
    s = ServerSettings.model_validate({"profile": "canary-box", "profiles": profiles})
    cmd = render_command(s, detected_version=Version(0, 5, 23))
    assert cmd.argv[0] == "/opt/sglang/bin/python"
    assert flag(cmd.argv, "--tp-size") == "4"
    assert flag(cmd.argv, "--kv-cache-dtype") == "auto"  # explicit: wins over the launch table
    assert "--disable-custom-all-reduce" not in cmd.argv
    assert flag(cmd.argv, "--dsa-decode-backend") == "tilelang"  # the table's row for 0.5.23
    table_off = {**profiles, "canary-box": {**profiles["canary-box"], "launch_table": ""}}
    off = render_command(
        ServerSettings.model_validate({"profile": "canary-box", "profiles": table_off}),
        detected_version=Version(0, 5, 23),
    )
    assert off.launch_row is None
    assert not any(a.startswith("--dsa-") for a in off.argv)  # no table: left to SGLang
    assert cmd.profile.required_gpus == 4


@pytest.mark.parametrize(
    ("profiles", "message"),
    [
        ({"a": {"base": "b"}, "b": {"base": "a"}}, r"extends itself \(a -> b -> a\)"),
        ({"a": {"base": "a"}}, "extends itself"),
        ({"a": {"base": "nope"}}, r"unknown launch profile 'nope' \(extended by 'a'\)"),
    ],
)
def test_bad_base_chains(profiles: dict[str, dict[str, str]], message: str) -> None:
    s = ServerSettings.model_validate({"profile": "a", "profiles": profiles})
    with pytest.raises(ProfileError, match=message):
        render_command(s, detected_version=Version(0, 5, 9))


def test_the_simulator_is_a_builtin_command_profile() -> None:
    sim = BUILTIN_PROFILES["sim"]
    assert sim.kind == "command"
    assert (sim.required_gpus, sim.requires_weights) == (0, False)
    cmd = render_command(ServerSettings(port=31000, api_key="s3cret"))
    assert cmd.argv == (
        sys.executable,
        *("-m", "sglang_sentinel_sim", "--host", "127.0.0.1", "--port", "31000"),
        *("--enable-metrics", "--api-key", "s3cret"),
    )
    assert "s3cret" not in cmd.display()


def test_a_command_profile_fills_its_template() -> None:
    s = ServerSettings.model_validate(
        {
            "profile": "other",
            "port": 8000,
            "api_key": "k3y",
            "profiles": {
                "other": {
                    "kind": "command",
                    "python": "/opt/py",
                    "command": ["{python}", "-m", "srv", "--listen={host}:{port}", "{{literal}}"],
                    "metrics_args": ["--metrics"],
                    "api_key_args": ["--token={api_key}"],
                    "extra_args": ["--quiet"],
                    "needs_gpus": 2,
                    "model_path": "/models/x",
                    "needs_weights": True,
                }
            },
        }
    )
    cmd = render_command(s)
    assert cmd.argv == (
        "/opt/py",
        *("-m", "srv", "--listen=127.0.0.1:8000", "{literal}", "--metrics", "--token=k3y", "--quiet"),
    )
    assert "k3y" not in cmd.display()
    assert "--token=***" in cmd.display()
    assert (cmd.profile.required_gpus, cmd.profile.requires_weights) == (2, True)
    # Only what the profile declares: no metrics flag when metrics are off, no key when there is none.
    quiet = s.model_copy(
        update={
            "api_key": "",
            "profiles": {"other": s.profiles["other"].model_copy(update={"enable_metrics": False})},
        }
    )
    assert "--metrics" not in render_command(quiet).argv
    assert not any(a.startswith("--token") for a in render_command(quiet).argv)


@pytest.mark.parametrize(
    ("profile", "message"),
    [
        ({"kind": "command"}, "needs a command"),
        ({"kind": "command", "command": ["srv", "--port={prot}"]}, r"command: cannot fill '--port=\{prot\}'"),
        ({"kind": "command", "command": ["srv", "{"]}, "literal braces"),
    ],
)
def test_bad_command_templates_are_profile_errors(profile: dict[str, object], message: str) -> None:
    s = ServerSettings.model_validate({"profile": "x", "profiles": {"x": profile}})
    with pytest.raises(ProfileError, match=message):
        render_command(s)


def test_deprecated_sim_keys_still_render_the_simulator() -> None:
    s = ServerSettings.model_validate(
        {
            "profile": "fastsim",
            "profiles": {"fastsim": {"kind": "sim", "sim_speed": 50, "sim_faults": ["crash_after=5"]}},
        }
    )
    cmd = render_command(s)
    assert cmd.argv[:4] == (sys.executable, "-m", "sglang_sentinel_sim", "--host")
    assert flag(cmd.argv, "--speed") == "50"
    assert flag(cmd.argv, "--fault") == "crash_after=5"
    assert cmd.profile.kind == "command"
    # [server.profiles.sim] adjusting the built-in, the old way.
    adjusted = ServerSettings.model_validate({"profiles": {"sim": {"sim_profile": "glm5", "gpus": 1}}})
    cmd = render_command(adjusted)
    assert flag(cmd.argv, "--profile") == "glm5"
    assert cmd.profile.required_gpus == 1


def test_sim_keys_on_an_sglang_profile_are_refused_by_name() -> None:
    with pytest.raises(ValueError, match="sim_speed only apply to the simulator"):
        ServerSettings.model_validate({"profiles": {"x": {"kind": "sglang", "sim_speed": 3}}})
    # The kind inherited from an SGLang base, or left at its default: refused when rendered.
    s = ServerSettings.model_validate({"profile": "x", "profiles": {"x": {"base": GLM, "sim_faults": ["a"]}}})
    with pytest.raises(ProfileError, match=r"'x' on base 'glm5.*sim_faults only apply to the simulator"):
        render_command(s, detected_version=Version(0, 5, 9))
    s = ServerSettings.model_validate(
        {"profile": "y", "profiles": {"y": {"model_path": "/m", "sim_speed": 2}}}
    )
    with pytest.raises(ProfileError, match="sim_speed only apply to a command profile"):
        render_command(s, detected_version=Version(0, 5, 9))
