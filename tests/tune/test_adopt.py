"""``sentinel tune --adopt``: the winner is appended as the configured profile (never over a table
written by hand) and recorded known-good for the fallback."""

from __future__ import annotations

import tomllib
from pathlib import Path
from typing import Any

from sglang_sentinel.supervise.knowngood import KNOWN_GOOD_FILE, KnownGoodStore
from sglang_sentinel.supervise.launch import render_command
from sglang_sentinel.supervise.settings import ServerSettings
from sglang_sentinel.tune.adopt import adopt_winner


def _doc(argv: list[str]) -> dict[str, Any]:
    return {
        "id": "t1",
        "winner": "c2",
        "winner_toml": '[server.profiles.fast]\nextra_args = ["--cuda-graph-max-bs", "16"]\n',
        "trials": [
            {"id": "c1", "argv": argv[:-2]},
            {"id": "c2", "argv": argv, "server_version": "0.5.9"},
        ],
    }


def test_the_winner_is_appended_as_the_configured_profile_and_recorded(tmp_path: Path) -> None:
    settings = ServerSettings.model_validate({"profile": "fast", "profiles": {"fast": {"base": "sim"}}})
    base = render_command(settings)
    argv = [*base.argv, "--cuda-graph-max-bs", "16"]
    config = tmp_path / "c.toml"
    config.write_text('[server]\nprofile = "fast"\n')
    said = adopt_winner(_doc(argv), base, config, tmp_path)
    assert said[-1] == f"--adopt: wrote [server.profiles.fast] to {config}"
    data = tomllib.loads(config.read_text())
    assert data["server"]["profile"] == "fast"
    assert data["server"]["profiles"]["fast"]["extra_args"][-1] == "16"
    store = KnownGoodStore(tmp_path / KNOWN_GOOD_FILE)
    store.load()
    (rec,) = store.records.values()
    assert rec.sglang_version == "0.5.9"
    assert rec.argv[-2:] == ("--cuda-graph-max-bs", "16")
    # Adopting again: the table exists now and is not rewritten; the record is refreshed.
    before = config.read_text()
    said = adopt_winner(_doc(argv), base, config, tmp_path)
    assert "already has [server.profiles.fast]; not rewritten" in said[-1]
    assert config.read_text() == before


def test_no_winner_adopts_nothing(tmp_path: Path) -> None:
    base = render_command(ServerSettings())
    doc: dict[str, Any] = {"id": "t1", "winner": None, "winner_toml": None, "trials": []}
    assert adopt_winner(doc, base, None, tmp_path) == ["--adopt: no winner, nothing adopted"]
    assert not (tmp_path / KNOWN_GOOD_FILE).exists()
