"""sentinel fleet's configuration and file_sd targets: every bad input is one message naming the field."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.fleet import FleetConfigError, load_fleet_file
from sglang_sentinel.fleet.prober import phase
from sglang_sentinel.fleet.targets import FileSdError, parse_file_sd, read_file_sd


def test_a_file_sd_entry_names_one_target() -> None:
    targets = parse_file_sd(
        [
            {"targets": ["10.0.0.5:30000"], "labels": {"name": "gpu-a"}},
            {
                "targets": ["http://10.0.0.9:30000"],
                "labels": {"name": "router-1", "kind": "router", "canaries": "false", "team": "x"},
            },
        ]
    )
    assert [(t.name, t.url, t.kind, t.canaries) for t in targets] == [
        ("gpu-a", "http://10.0.0.5:30000", "auto", True),  # kind defaults to auto
        ("router-1", "http://10.0.0.9:30000", "router", False),
    ]


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        ({"targets": []}, "expected a JSON list"),
        (["x"], "entry 0: not an object"),
        ([{"targets": ["a:1"]}], "entry 0: labels.name is required"),
        ([{"targets": ["a:1", "b:1"], "labels": {"name": "n"}}], "exactly one address per entry"),
        ([{"targets": "a:1", "labels": {"name": "n"}}], "'targets' must be a list"),
        ([{"targets": ["a:1"], "labels": {"name": "bad name"}}], "entry 0: name:"),
        ([{"targets": ["a:1"], "labels": {"name": "n", "kind": "gateway"}}], "entry 0: kind:"),
        (
            [{"targets": ["a:1"], "labels": {"name": "n"}}, {"targets": ["b:1"], "labels": {"name": "n"}}],
            "repeated: n",
        ),
    ],
)
def test_a_bad_file_sd_is_refused_with_the_entry_named(data: Any, needle: str) -> None:
    with pytest.raises(FileSdError) as info:
        parse_file_sd(data, "sd.json")
    assert needle in str(info.value)
    assert str(info.value).startswith("sd.json")


def test_an_unreadable_or_invalid_file_sd(tmp_path: Path) -> None:
    with pytest.raises(FileSdError, match="No such file"):
        read_file_sd(tmp_path / "missing.json")
    (tmp_path / "bad.json").write_text("[{")
    with pytest.raises(FileSdError, match="invalid JSON"):
        read_file_sd(tmp_path / "bad.json")


@pytest.mark.parametrize(
    ("toml", "needle"),
    [
        ("[fleet]\nintervall = 3\n", "fleet.intervall: unknown key"),
        ("[fleet]\n", "no [[fleet.targets]] and no file_sd"),
        ('[[fleet.targets]]\nname = "a"\nurl = "10.0.0.1:30000"\n', "fleet.targets.0.url"),
        (
            '[[fleet.targets]]\nname = "a"\nurl = "http://a:1"\n[[fleet.targets]]\nname = "a"\nurl = "http://b:1"\n',
            "repeated: a",
        ),
        ("[fleet\n", "invalid TOML"),
    ],
)
def test_a_bad_fleet_config_names_the_field(tmp_path: Path, toml: str, needle: str) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text(toml)
    with pytest.raises(FleetConfigError) as info:
        load_fleet_file(path)
    assert needle in str(info.value)


def test_sentinel_fleet_exits_2_on_a_bad_config_without_a_traceback(tmp_path: Path) -> None:
    path = tmp_path / "fleet.toml"
    path.write_text("[fleet]\njitter = 2\n")
    out = subprocess.run(
        [sys.executable, "-m", "sglang_sentinel", "fleet", "--config", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert out.returncode == 2
    assert "fleet.jitter" in out.stderr
    assert "Traceback" not in out.stderr


def test_targets_are_spread_over_the_interval_stably() -> None:
    phases = [phase(f"gpu-{i}", 30.0) for i in range(200)]
    assert all(0 <= p < 30 for p in phases)
    assert phases == [phase(f"gpu-{i}", 30.0) for i in range(200)]  # same after a restart
    # Spread, not bunched: every 3 s slice of the interval holds some of the 200 targets.
    assert {int(p // 3) for p in phases} == set(range(10))


def test_file_sd_json_is_what_prometheus_reads_too(tmp_path: Path) -> None:
    # deploy/fleet/targets.json is the documented example: it must load as fleet targets.
    example = Path(__file__).resolve().parents[2] / "deploy" / "fleet" / "targets.json"
    targets = read_file_sd(example)
    assert targets
    assert all(t.name for t in targets)
    assert json.loads(example.read_text())[0]["labels"]["name"] == targets[0].name


def test_the_shipped_example_config_loads() -> None:
    example = Path(__file__).resolve().parents[2] / "deploy" / "fleet" / "fleet.example.toml"
    config = load_fleet_file(example)
    assert [t.kind for t in config.fleet.targets] == ["router"]
    assert config.fleet.file_sd is not None
    assert config.exporter.port == 9481
