"""``sentinel tune --adopt``: the winner becomes the configured profile and a known-good record.

Two effects, both said on stderr:

- the winner's argv (secrets masked) is recorded known-good in the state directory
  (supervise/knowngood.py) with the SGLang version its server reported: it passed the tune's
  correctness gate and was measured, so ``[server.fallback]`` may fall back to it;
- its ``[server.profiles.<profile>]`` snippet (tune/snippet.py) is appended to the config file,
  but only when that file has no such table yet: sentinel does not rewrite a table someone wrote
  by hand (TOML has no merge, and comments would be lost), so then the snippet is printed to paste.
"""

from __future__ import annotations

import datetime
import tomllib
from dataclasses import replace
from pathlib import Path
from typing import Any

from sglang_sentinel.atomic import atomic_write_bytes
from sglang_sentinel.supervise.knowngood import KNOWN_GOOD_FILE, KnownGoodStore
from sglang_sentinel.supervise.launch import LaunchCommand

__all__ = ["adopt_winner"]


def adopt_winner(doc: dict[str, Any], base: LaunchCommand, config: Path | None, state_dir: Path) -> list[str]:
    """Adopt ``doc``'s winner; returns what was done (lines for stderr). No winner: nothing."""
    winner = next((t for t in doc.get("trials", []) if t.get("id") == doc.get("winner")), None)
    snippet = doc.get("winner_toml")
    if winner is None or not snippet:
        return ["--adopt: no winner, nothing adopted"]
    argv = tuple(str(a) for a in winner.get("argv") or ())
    store = KnownGoodStore(state_dir / KNOWN_GOOD_FILE)
    store.load()
    rec = store.mark_good(
        replace(base, argv=argv).config_hash,
        argv,
        sglang_version=winner.get("server_version"),
        driver_version=None,
        gpu_model=None,
        profile=base.profile_name,
    )
    out = [f"--adopt: recorded {rec.argv_hash} known-good in {store.path}"]
    if config is None:
        return [*out, "--adopt: no --config file to write; paste the profile above into yours"]
    try:
        text = config.read_text(encoding="utf-8")
        data = tomllib.loads(text)
    except (OSError, ValueError) as exc:
        return [*out, f"--adopt: cannot read {config}: {exc}; paste the profile above into it"]
    profiles = data.get("server", {}).get("profiles", {})
    if base.profile_name in profiles:
        return [
            *out,
            f"--adopt: {config} already has [server.profiles.{base.profile_name}]; not rewritten "
            "(sentinel does not edit a table written by hand): replace it with the profile above",
        ]
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    head = f"# Adopted from sentinel tune {doc.get('id')} ({stamp}): the winner {winner.get('id')}."
    added = f"\n{head}\n{snippet.rstrip()}\n"
    try:
        atomic_write_bytes(config, (text.rstrip("\n") + "\n" + added).encode())
    except OSError as exc:
        return [*out, f"--adopt: cannot write {config}: {exc}; paste the profile above into it"]
    return [*out, f"--adopt: wrote [server.profiles.{base.profile_name}] to {config}"]
