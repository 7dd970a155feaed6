"""The state file round trip, finding the unfinished tune, the TOML snippet, and bad usage (exit 2)."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from sglang_sentinel.cli import main
from sglang_sentinel.supervise.launch import BUILTIN_PROFILES
from sglang_sentinel.supervise.settings import LaunchProfile
from sglang_sentinel.tune.driver import new_doc
from sglang_sentinel.tune.settings import TuneSettings
from sglang_sentinel.tune.snippet import winner_toml
from sglang_sentinel.tune.state import StateFileError, find_unfinished, load_doc, save_doc, tune_root


def _doc(tid: str, fp: str) -> dict[str, object]:
    s = TuneSettings(space={"--x": (1, 2)})
    return new_doc(
        tid,
        s,
        space={"--x": [1, 2]},
        configs=[{}, {"--x": 1}],
        argvs=[["a"], ["a", "--x", "1"]],
        base_argv=["a"],
        sglang_version="0.5.9",
        fp=fp,
    )


def test_round_trip_and_the_newest_unfinished_tune_of_the_same_config(tmp_path: Path) -> None:
    root = tune_root(tmp_path)
    old, new, other = (
        _doc("20261201T000000Z-aaaa", "fp"),
        _doc("20261202T000000Z-bbbb", "fp"),
        _doc("20261203T000000Z-cccc", "zz"),
    )
    for d in (old, new, other):
        save_doc(root / str(d["tune_id"]), d)
    assert load_doc(root / "20261202T000000Z-bbbb") == new
    assert find_unfinished(tmp_path, "fp") == "20261202T000000Z-bbbb"
    new["finished_at"] = "2026-12-02T01:00:00Z"
    save_doc(root / "20261202T000000Z-bbbb", new)
    assert find_unfinished(tmp_path, "fp") == "20261201T000000Z-aaaa"
    assert find_unfinished(tmp_path, "none") is None
    (root / "junk").mkdir()
    (root / "junk" / "state.json").write_text("{not json")
    with pytest.raises(StateFileError, match="cannot read"):
        load_doc(root / "junk")
    assert find_unfinished(tmp_path, "fp") == "20261201T000000Z-aaaa"  # a broken one is passed over
    assert list((root / "20261201T000000Z-aaaa").iterdir()) == [root / "20261201T000000Z-aaaa" / "state.json"]


def test_the_snippet_pastes_into_the_config() -> None:
    sim = BUILTIN_PROFILES["sim"].model_copy(update={"extra_args": ("--speed", "50")})
    text = winner_toml("sim", sim, {"--max-running-requests": 16, "--disable-cuda-graph": True})
    data = tomllib.loads(text)["server"]["profiles"]["sim"]
    assert data == {"extra_args": ["--speed", "50", "--max-running-requests", "16", "--disable-cuda-graph"]}
    glm = BUILTIN_PROFILES["glm5-nvfp4-rtxpro6000"]
    text = winner_toml(
        "glm5-nvfp4-rtxpro6000",
        glm,
        {
            "--disable-cuda-graph": False,
            "--mem-fraction-static": 0.8,
            "--nsa-decode-backend": "trtllm",
            "--moe-runner-backend": "flashinfer_cutlass",
        },
    )
    data = tomllib.loads(text)["server"]["profiles"]["glm5-nvfp4-rtxpro6000"]
    LaunchProfile.model_validate(data)  # every key is a profile field
    assert data["disable_cuda_graph"] is False
    assert data["mem_fraction_static"] == 0.8
    assert data["dsa_decode_backend"] == "trtllm"
    assert data["extra_args"] == ["--disable-custom-all-reduce", "--moe-runner-backend", "flashinfer_cutlass"]


@pytest.mark.parametrize(
    ("toml", "argv", "needle"),
    [
        ("[tune]\nrepeats = 0\n", ["--vary=--x=1,2"], "tune.repeats"),
        ('[tune.space]\n"--x" = []\n', [], "tune.space"),
        ("[tune]\nbogus = 1\n", [], "tune.bogus"),
        ("", ["--vary", "x=1"], "--vary 'x=1'"),
        ("", [], "nothing to vary"),
        ('[tune]\nreference_profile = "nope"\n', ["--vary=--x=1,2"], "tune.reference_profile"),
        ('[server]\nmode = "systemd"\n', ["--vary=--x=1,2"], "child mode"),
        ("[tune]\nmax_configs = 2\n", ["--vary=--x=1,2,3"], "max_configs = 2"),
        ("", ["--vary=--x=1,2", "--budget-time", "-1"], "tune.budget_time_s"),
    ],
)
def test_bad_usage_exits_2_naming_the_field(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], toml: str, argv: list[str], needle: str
) -> None:
    cfg = tmp_path / "c.toml"
    cfg.write_text(f'state_dir = "{tmp_path}/state"\n{toml}')
    assert main(["tune", "--config", str(cfg), *argv]) == 2
    err = capsys.readouterr().err
    assert needle in err
    assert "Traceback" not in err
    assert not (tmp_path / "state" / "tune").exists()  # nothing started
