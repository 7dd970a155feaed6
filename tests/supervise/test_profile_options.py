"""Every shipped SGLang launch profile renders, for every release read, only options that
release's own argument parser registers (``options.json``, generated from the wheels by
``scripts/sglang-options``): an option it does not know is argparse exit 2, a crash loop."""

from __future__ import annotations

import json
from importlib import resources

import pytest

from sglang_sentinel.sglang.versions import (
    NEWEST_KNOWN,
    OLDEST_KNOWN,
    RELEASES_READ,
    Version,
    accepted_choices,
    accepted_options,
    release_row,
)
from sglang_sentinel.supervise.launch import BUILTIN_PROFILES, render_command
from sglang_sentinel.supervise.settings import ServerSettings

_DATA = json.loads(
    resources.files("sglang_sentinel.sglang").joinpath("options.json").read_text(encoding="utf-8")
)
SGLANG_PROFILES = sorted(name for name, p in BUILTIN_PROFILES.items() if p.kind == "sglang")


def _options_of(argv: tuple[str, ...]) -> list[tuple[str, str | None]]:
    """(option, value) for each option in argv; the value is the next word or the ``=`` part."""
    out: list[tuple[str, str | None]] = []
    for i, word in enumerate(argv):
        if not word.startswith("--"):
            continue
        name, eq, value = word.partition("=")
        nxt = argv[i + 1] if i + 1 < len(argv) and not argv[i + 1].startswith("-") else None
        out.append((name, value if eq else nxt))
    return out


def test_the_generated_data_covers_the_supported_range() -> None:
    assert RELEASES_READ[0] == OLDEST_KNOWN == Version(0, 5, 9)
    assert RELEASES_READ[-1] == NEWEST_KNOWN
    assert set(_DATA["releases"]) == {str(v) for v in RELEASES_READ}
    for release in _DATA["releases"].values():
        assert "sglang/srt/server_args.py" in release["files"]
        assert {"--model-path", "--tp-size", "--host", "--port"} <= set(release["options"])


@pytest.mark.parametrize("profile", SGLANG_PROFILES)
@pytest.mark.parametrize("release", [str(v) for v in RELEASES_READ])
def test_rendered_argv_is_accepted_by_that_release(profile: str, release: str) -> None:
    v = next(r for r in RELEASES_READ if str(r) == release)
    settings = ServerSettings.model_validate({"profile": profile, "api_key": "k"})
    cmd = render_command(settings, detected_version=v)
    accepted = set(_DATA["releases"][release]["options"])
    choices: dict[str, list[str]] = _DATA["releases"][release]["choices"]
    rendered = _options_of(cmd.argv)
    assert rendered, cmd.argv
    unknown = [name for name, _ in rendered if name not in accepted]
    assert not unknown, f"sglang {release} has no option {unknown} (argparse exits 2)"
    for name, value in rendered:
        if name in choices:
            assert value in choices[name], f"sglang {release}: {name} {value!r} not in {choices[name]}"


def test_a_post_release_behaves_as_its_read_release() -> None:
    assert release_row(Version(0, 5, 13, 2)) == Version(0, 5, 13, 1)
    assert release_row(Version(0, 5, 24)) == NEWEST_KNOWN
    assert accepted_options(Version(0, 5, 24)) == set(_DATA["releases"][str(NEWEST_KNOWN)]["options"])
    assert "--nsa-prefill-backend" in accepted_options(Version(0, 5, 19))
    assert "--nsa-prefill-backend" not in accepted_options(Version(0, 5, 20))


def test_choices_are_each_releases_own() -> None:
    # Recorded for the flags the profiles render and the simulator checks (scripts/sglang-options).
    moe_059 = accepted_choices(Version(0, 5, 9), "--moe-runner-backend")
    assert moe_059 is not None
    assert "deep_gemm" in moe_059
    assert "marlin" not in moe_059
    assert "marlin" in (accepted_choices(Version(0, 5, 23), "--moe-runner-backend") or ())
    assert "fp4_e2m1" in (accepted_choices(Version(0, 5, 20), "--kv-cache-dtype") or ())
    assert "fp4_e2m1" not in (accepted_choices(Version(0, 5, 21), "--kv-cache-dtype") or ())
    assert accepted_choices(Version(0, 5, 20), "--nsa-prefill-backend") is None  # gone in 0.5.20
    assert accepted_choices(Version(0, 5, 23), "--tp-size") is None  # free-form


@pytest.mark.parametrize(
    ("version", "dsa", "graphs_off"),
    [
        (Version(0, 5, 12), "--nsa-prefill-backend", "--disable-cuda-graph"),
        (Version(0, 5, 13), "--dsa-prefill-backend", "--disable-cuda-graph"),  # no per-phase flags yet
        (Version(0, 5, 14), "--dsa-prefill-backend", "--cuda-graph-backend-decode=disabled"),
    ],
)
def test_flag_spellings_switch_at_the_first_release_that_has_them(
    version: Version, dsa: str, graphs_off: str
) -> None:
    cmd = render_command(
        ServerSettings.model_validate({"profile": "glm5-nvfp4-rtxpro6000"}), detected_version=version
    )
    assert dsa in cmd.argv
    assert graphs_off in cmd.argv
