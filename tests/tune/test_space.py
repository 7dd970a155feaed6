"""Search space expansion, --vary parsing and flags applied to a base argv."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from pydantic import ValidationError

from sglang_sentinel.supervise.launch import render_command
from sglang_sentinel.supervise.settings import LaunchProfile, ServerSettings
from sglang_sentinel.tune.settings import RangeSpec, TuneSettings
from sglang_sentinel.tune.space import (
    Flags,
    SpaceError,
    apply_flags,
    expand,
    merge_vary,
    parse_vary,
    space_values,
)
from sglang_sentinel.tune.trial import flag_aliases


def test_product_with_the_baseline_first_and_not_twice() -> None:
    s = TuneSettings(
        space={"--disable-cuda-graph": (True, False), "--mem-fraction-static": (0.8, 0.85)},
        baseline={"--disable-cuda-graph": True, "--mem-fraction-static": 0.85},
    )
    configs = expand(s)
    assert configs[0] == {"--disable-cuda-graph": True, "--mem-fraction-static": 0.85}
    assert len(configs) == 4  # the baseline is one of the product's four
    assert {tuple(c.items()) for c in configs} == {
        (("--disable-cuda-graph", a), ("--mem-fraction-static", b))
        for a in (True, False)
        for b in (0.8, 0.85)
    }


def test_an_empty_baseline_is_the_launch_as_configured() -> None:
    configs = expand(TuneSettings(space={"--max-running-requests": (8, 16)}))
    assert configs == [{}, {"--max-running-requests": 8}, {"--max-running-requests": 16}]


def test_range_values_are_exact_and_integers_stay_integers() -> None:
    assert RangeSpec(min=0.8, max=0.9, step=0.05).values() == (0.8, 0.85, 0.9)
    assert RangeSpec(min=64, max=256, step=64).values() == (64, 128, 192, 256)
    s = TuneSettings.model_validate({"space": {"--cuda-graph-max-bs": {"min": 8, "max": 32, "step": 8}}})
    assert space_values(s) == {"--cuda-graph-max-bs": [8, 16, 24, 32]}


def test_a_huge_product_is_refused_with_the_way_out() -> None:
    s = TuneSettings(space={f"--f{i}": (1, 2, 3) for i in range(4)}, max_configs=20)  # 81 + baseline
    with pytest.raises(SpaceError, match=r"82 configurations.*max_configs = 20.*sample"):
        expand(s)


def test_sampling_is_seeded_and_keeps_the_baseline() -> None:
    s = TuneSettings(space={f"--f{i}": (1, 2, 3) for i in range(4)}, max_configs=20, sample=10)
    a, b = expand(s), expand(s)
    assert a == b
    assert len(a) == 10
    assert a[0] == {}
    other = expand(s.model_copy(update={"seed": 2}))
    assert other != a


@pytest.mark.parametrize(
    ("bad", "where"),
    [
        ({"space": {"disable-cuda-graph": [True]}}, "space"),
        ({"space": {"--x": []}}, "space"),
        ({"space": {"--x": [1, 1]}}, "space"),
        ({"space": {"--x": {"min": 2, "max": 1, "step": 1}}}, "space"),
        ({"repeats": 0}, "repeats"),
        ({"sample": 50, "max_configs": 10}, "sample"),
    ],
)
def test_bad_settings_name_the_field(bad: dict[str, object], where: str) -> None:
    with pytest.raises(ValidationError) as exc:
        TuneSettings.model_validate(bad)
    assert where in str(exc.value)


def test_vary_parses_types_and_replaces_the_config_space() -> None:
    assert parse_vary("--disable-cuda-graph=true,false") == ("--disable-cuda-graph", (True, False))
    assert parse_vary("--mem-fraction-static=0.8,0.85") == ("--mem-fraction-static", (0.8, 0.85))
    assert parse_vary("--attention-backend=fa3,triton") == ("--attention-backend", ("fa3", "triton"))
    merged = merge_vary(TuneSettings(space={"--x": (1,)}), ["--x=2,3", "--y=a"])
    assert merged.space == {"--x": (2, 3), "--y": ("a",)}
    for bad in ("--x", "--x=", "x=1", "--x=1,1"):
        with pytest.raises(ValueError, match=r"^--vary "):
            parse_vary(bad)


def test_apply_flags_replaces_removes_and_adds() -> None:
    base = ["py", "-m", "srv", "--mem-fraction-static", "0.85", "--disable-cuda-graph", "--tp-size=8"]
    out = apply_flags(base, {"--mem-fraction-static": 0.8, "--disable-cuda-graph": False, "--tp-size": 4})
    assert out == ["py", "-m", "srv", "--mem-fraction-static", "0.8", "--tp-size", "4"]
    assert apply_flags(base, {"--enable-x": True})[-1] == "--enable-x"


def _sglang(version: str, **profile: object) -> ServerSettings:
    p = LaunchProfile(kind="sglang", model_path="/m", sglang_version=version, **profile)  # type: ignore[arg-type]
    return ServerSettings(profile="p", profiles={"p": p})


def test_version_dependent_spellings_follow_the_rendered_sglang() -> None:
    new = render_command(_sglang("0.5.23", disable_cuda_graph=True))
    assert "--cuda-graph-backend-decode=disabled" in new.argv
    flags: Flags = {"--disable-cuda-graph": False, "--nsa-decode-backend": "trtllm"}
    out = apply_flags(new.argv, flags, flag_aliases(new, list(flags)))
    assert not any(a.startswith("--cuda-graph-backend") for a in out)
    assert out[-2:] == ["--dsa-decode-backend", "trtllm"]
    old = render_command(_sglang("0.5.9"))
    on = apply_flags(old.argv, {"--disable-cuda-graph": True}, flag_aliases(old, ["--disable-cuda-graph"]))
    assert on[-1] == "--disable-cuda-graph"
    assert dataclasses.replace(old, argv=tuple(on)).argv.count("--disable-cuda-graph") == 1


def test_short_round_is_one_probe_step_once_the_race_knows_where_to_probe() -> None:
    from sglang_sentinel.calibrate.search import step_requests
    from sglang_sentinel.calibrate.settings import CalibrationSettings
    from sglang_sentinel.tune.measure import tune_calibration

    base = CalibrationSettings(max_concurrency=64)
    kw: dict[str, Any] = {"short_requests": 150, "short_max_concurrency": None, "ttft_p99_s": 2.0}
    ramp = tune_calibration(base, "short", tpot_p99_s=None, **kw)
    assert (ramp.start_concurrency, ramp.max_concurrency, ramp.max_requests) == (16, 64, 150)
    probe = tune_calibration(base, "short", tpot_p99_s=None, probe_concurrency=24, **kw)
    assert (probe.start_concurrency, probe.max_concurrency) == (24, 24)
    # One step of two requests per slot, and the budget holds exactly that step.
    assert probe.max_requests == step_requests(24, probe) == 48
    assert probe.seed != base.seed  # not the full calibration's prompts (prefix cache)
    assert probe.slo.ttft_seconds == 2.0
    full = tune_calibration(base, "full", tpot_p99_s=None, probe_concurrency=24, **kw)
    assert (full.start_concurrency, full.max_concurrency, full.max_requests) == (1, 64, 2000)
