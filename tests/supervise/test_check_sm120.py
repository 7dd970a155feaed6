"""``sentinel check`` for the flagship profile on 8 RTX PRO 6000 (SM120) seen through a fake NVML.

For each supported SGLang version (pinned in the profile) the rendered argv and the preflight's own
warnings must not contradict each other: no warning names a backend or KV dtype that argv passes.
The launch-table row that applied is printed with its source, in text and JSON.
"""

from __future__ import annotations

import json
import re
import stat
import sys
from pathlib import Path
from typing import Any

import pynvml
import pytest

from sglang_sentinel.cli import main
from sglang_sentinel.collect.gpu.fake import FakeNvml, load_sample
from sglang_sentinel.sglang.launch_facts import GLM5_NVFP4_TABLE
from support.ports import free_port

FAKE_SGLANG = Path(__file__).with_name("fake_sglang")
GLM = "glm5-nvfp4-rtxpro6000"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "sglang-versions.md"


def rtx_pro_6000_sample() -> dict[str, Any]:
    """The H200 recording with the readings that differ on an RTX PRO 6000 Blackwell Server
    Edition replaced by ones taken on that card (name, memory, compute capability 12.0)."""
    sample = load_sample("idle")
    device = dict(sample["devices"][0])
    device["name"] = {"ok": True, "value": "NVIDIA RTX PRO 6000 Blackwell Server Edition", "us": 60.0}
    memory = {"total": 102641958912, "free": 102076055552, "used": 565903360}
    device["memory_info"] = {"ok": True, "value": memory, "us": 20.0}
    device["cuda_cc"] = {"ok": True, "value": [12, 0], "us": 8.0}
    device["arch"] = {"ok": True, "value": pynvml.NVML_DEVICE_ARCH_BLACKWELL, "us": 7.8}
    return {**sample, "count": 8, "devices": [device] * 8}


@pytest.fixture
def sm120(monkeypatch: pytest.MonkeyPatch) -> FakeNvml:
    nvml = FakeNvml(8, rtx_pro_6000_sample())
    monkeypatch.setitem(sys.modules, "pynvml", nvml)  # preflight's read_gpus_nvml imports it
    return nvml


def config(tmp_path: Path, pinned: str, installed: str, **profile: str) -> Path:
    """A config running the flagship profile with a fake SGLang ``installed`` and flags ``pinned``."""
    version = tmp_path / "version"
    version.write_text(installed)
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        f"export PYTHONPATH='{FAKE_SGLANG}'\n"
        f"export FAKE_SGLANG_VERSION_FILE='{version}'\n"
        f"exec '{sys.executable}' \"$@\"\n"
    )
    python.chmod(python.stat().st_mode | stat.S_IEXEC)
    model = tmp_path / "GLM-5-NVFP4"
    model.mkdir(exist_ok=True)
    (model / "config.json").write_text("{}")
    extra = "".join(f'{k} = "{v}"\n' for k, v in profile.items())
    cfg = tmp_path / "c.toml"
    cfg.write_text(
        f'[server]\nprofile = "{GLM}"\nport = {free_port()}\n'
        f'[server.profiles.{GLM}]\npython = "{python}"\nmodel_path = "{model}"\n'
        f'sglang_version = "{pinned}"\n{extra}'
    )
    return cfg


def contradictions(argv: list[str], warnings: list[str]) -> list[str]:
    """Warnings that call a value argv passes known-bad (backend or KV dtype family)."""
    passed = {argv[i + 1] for i, a in enumerate(argv[:-1]) if a.endswith(("-backend", "--kv-cache-dtype"))}
    out = []
    for message in warnings:
        m = re.search(r"this launch: prefill (\S+), decode (\S+), KV (\S+)", message)
        if m is None:
            continue
        named = {row.key for row in GLM5_NVFP4_TABLE if message.startswith(row.key)}
        for row in GLM5_NVFP4_TABLE:
            if row.key in named and (
                set(row.backends) & passed
                or (row.kv_cache_dtype == "fp8" and any(p.startswith("fp8") for p in passed))
            ):
                out.append(message)
    return out


# (pinned, expected row, a token of the rendered entrypoint)
VERSIONS = [
    ("0.5.9", "glm5.sm120.trtllm_bf16", "sglang.launch_server"),
    ("0.5.19", "glm5.sm120.tilelang_bf16", "serve"),
    ("0.5.23", "glm5.sm120.tilelang_bf16", "serve"),
    ("0.7.1", "glm5.sm120.tilelang_bf16", "serve"),  # unknown newer: newest known behaviour
]


@pytest.mark.parametrize(("pinned", "row", "entry"), VERSIONS)
def test_check_json_has_no_contradiction(
    pinned: str, row: str, entry: str, sm120: FakeNvml, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config(tmp_path, pinned, installed=pinned)
    assert main(["check", "--config", str(cfg), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert sm120.calls["nvmlDeviceGetCudaComputeCapability"] == 8
    argv: list[str] = data["argv"]
    assert entry in argv[1:4]
    assert data["launch_row"]["key"] == row
    assert data["sglang_behaves_as"] == ("0.5.23" if pinned == "0.7.1" else pinned)
    assert data["launch_row"]["source"]
    rendered = data["launch_row"]["rendered"]
    assert rendered["kv_cache_dtype"] == "bf16"
    prefix = "--nsa" if pinned == "0.5.9" else "--dsa"
    assert argv[argv.index(f"{prefix}-decode-backend") + 1] == rendered["decode_backend"]
    statuses = {r["check"]: r["status"] for r in data["preflight"]}
    assert statuses["gpus"] == "ok"
    warnings = [r["message"] for r in data["preflight"] if r["status"] == "warn"]
    assert contradictions(argv, warnings) == []
    # The only warning left is the FP4 GEMM race the canaries watch for: nothing about DSA/KV.
    assert all("NaN race" in w for w in warnings), warnings


def test_check_text_prints_the_row_and_its_source(
    sm120: FakeNvml, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config(tmp_path, "0.5.23", installed="0.5.23")
    assert main(["check", "--config", str(cfg)]) == 0
    out = capsys.readouterr().out
    assert "launch row:   glm5.sm120.tilelang_bf16 (known_good, SGLang 0.5.19 – now, SM120)" in out
    assert "prefill tilelang, decode tilelang, KV bf16" in out
    assert "source: sgl-project/sglang#37105" in out
    assert "sglang:       pinned in the profile; release row 0.5.23 (read from its wheel)" in out


def test_check_says_an_unknown_newer_version_is_read_as_the_newest(
    sm120: FakeNvml, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config(tmp_path, "0.7.1", installed="0.7.1")
    assert main(["check", "--config", str(cfg)]) == 0
    assert "0.7.1 is newer than the newest known (0.5.23): behaving as it" in capsys.readouterr().out


def test_override_to_a_known_bad_combination_warns(
    sm120: FakeNvml, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config(
        tmp_path, "0.5.23", installed="0.5.23", dsa_prefill_backend="trtllm", dsa_decode_backend="trtllm"
    )
    assert main(["check", "--config", str(cfg), "--json"]) == 0  # warnings do not fail the check
    data = json.loads(capsys.readouterr().out)
    warnings = [r["message"] for r in data["preflight"] if r["status"] == "warn"]
    assert any(w.startswith("glm5.sm120.trtllm_unsupported") for w in warnings)
    assert contradictions(data["argv"], warnings)  # the helper does see one when there is one


def test_a_pin_that_differs_from_the_installed_sglang_warns(
    sm120: FakeNvml, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    cfg = config(tmp_path, "0.5.9", installed="0.5.23")
    assert main(["check", "--config", str(cfg), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    (sglang,) = [r for r in data["preflight"] if r["check"] == "sglang"]
    assert sglang["status"] == "warn"
    assert "sglang 0.5.23 importable" in sglang["message"]
    assert "pinned sglang_version 0.5.9" in sglang["message"]


def test_every_launch_row_is_documented_with_its_source() -> None:
    doc = DOCS.read_text()
    for row in GLM5_NVFP4_TABLE:
        line = next((ln for ln in doc.splitlines() if ln.startswith(f"| `{row.key}` |")), None)
        assert line is not None, row.key
        assert row.source in line, row.key
        assert row.versions in line, row.key


# (SGLang, the row versions.resolve names): a .postN is its own row, a pre-release the row below it.
EXACT_ROWS = [
    ("0.5.10.post1", "release row 0.5.10.post1 (read from its wheel)"),
    ("0.5.23rc0", "release row 0.5.22 (the newest read release not newer)"),
]


@pytest.mark.parametrize("how", ["pinned", "detected"])
@pytest.mark.parametrize(("version", "row"), EXACT_ROWS)
def test_check_names_the_exact_release_row(
    version: str, row: str, how: str, sm120: FakeNvml, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # The launch's version is the daemon's one parser's (sglang.versions.Version): before, a
    # 3-number tuple printed "release row 0.5.10" for 0.5.10.post1 and row 0.5.23 for 0.5.23rc0.
    cfg = config(tmp_path, version if how == "pinned" else "", installed=version)
    source = "pinned in the profile" if how == "pinned" else "detected"
    assert main(["check", "--config", str(cfg)]) == 0
    assert f"sglang:       {source}; {row}" in capsys.readouterr().out
    assert main(["check", "--config", str(cfg), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["sglang_version"] == version
    assert data["sglang_behaves_as"] == version


@pytest.mark.parametrize(("mode", "code", "status"), [("child", 1, "FAIL"), ("external", 0, "WARN")])
def test_check_refuses_an_installed_sglang_older_than_every_release_read(
    mode: str, code: int, status: str, sm120: FakeNvml, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # Not pinned: the flags follow the installed 0.5.8, read as 0.5.9 (the oldest release read),
    # whose flags that parser may reject. External mode launches nothing: a warning only.
    cfg = config(tmp_path, "", installed="0.5.8")
    cfg.write_text(cfg.read_text().replace("[server]\n", f'[server]\nmode = "{mode}"\n', 1))
    assert main(["check", "--config", str(cfg)]) == code
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "sglang_version" in ln)
    assert line.split()[:2] == [status, "sglang_version"]
    assert "SGLang 0.5.8 is older than the oldest supported release (0.5.9)" in line
