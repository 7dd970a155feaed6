"""The `sentinel bench` examples of docs/bench.md's Datasets section, run as written against
`sentinel sim` (the docs' `--port 30000` replaced by the test simulator's port, which a later
`--port` does; `docs/...` paths resolved from the checkout)."""

from __future__ import annotations

import asyncio
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.cli import main

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs" / "bench.md"


def _examples() -> list[str]:
    text = DOCS.read_text(encoding="utf-8")
    section = text[text.index("## Datasets") : text.index("## Ramps")]
    block = re.search(r"```sh\n(.*?)```", section, re.S)
    assert block is not None, "docs/bench.md's Datasets section lost its example block"
    return [line for line in block.group(1).splitlines() if line.startswith("sentinel bench ")]


def test_the_datasets_section_has_its_examples() -> None:
    assert len(_examples()) == 7


@pytest.mark.slow
@pytest.mark.parametrize("command", _examples())
async def test_docs_example_runs_on_the_sim(
    sim_factory: Any, command: str, capsys: pytest.CaptureFixture[str]
) -> None:
    sim = sim_factory("--skip-server-warmup")
    port = sim.base_url.rsplit(":", 1)[1]
    argv = [str(ROOT / a) if a.startswith("docs/") else a for a in shlex.split(command)[1:]]
    argv += ["--port", port, "--disable-tqdm", "--log-level", "error"]
    assert await asyncio.to_thread(main, argv) == 0
    assert " Serving Benchmark Result " in capsys.readouterr().out
