"""``--sglang-version`` takes every release the daemon's version table read, each behaving as the
row it falls in (``sglang_sentinel_sim.versions.BEHAVIOURS``; the daemon's rows in
``sglang_sentinel.sglang.versions``).

The boundaries asserted here are written out from the wheels (the first release with the marker a
row's source names), not read back from BEHAVIOURS: a row moved by mistake fails here. Each
release is served in-process and checked on both sides of several boundaries: the ``/generate``
meta key (0.5.12), ``/get_load`` (gone from 0.5.21), ``/v1/loads`` (0.5.13), the ``/server_info``
names (0.5.13, 0.5.14), the Prefill line (0.5.10, 0.5.11) and the ``/metrics`` family set (0.5.10).
"""

from __future__ import annotations

import io
import re
from pathlib import Path
from typing import Any

import httpx
import pytest

from sglang_sentinel.cli import main
from sglang_sentinel.sglang.logparse import PrefillBatch, parse_line
from sglang_sentinel.sglang.versions import RELEASES_READ, Version, change, parse_version
from sglang_sentinel_sim import serve
from sglang_sentinel_sim.versions import BEHAVIOURS, DEFAULT_VERSION, VERSIONS, has
from support.loopback import HTTP

DOC = Path(__file__).resolve().parents[2] / "docs" / "sim.md"
_STAMP = re.compile(r"^\[[^\]]*\] ")


def _at_least(version: str, first: str) -> bool:
    return parse_version(version) >= parse_version(first)


def test_the_simulator_speaks_every_release_the_daemon_read() -> None:
    assert tuple(str(v) for v in RELEASES_READ) == VERSIONS
    assert VERSIONS[-1] == DEFAULT_VERSION
    for key, behaviour in BEHAVIOURS.items():
        # A boundary is a release read (no interpolation), and a row the daemon also has is that row.
        assert behaviour.first in VERSIONS, key
        if behaviour.source.startswith("sglang_sentinel.sglang.versions row "):
            assert behaviour.first == change(key).new_from, key
        assert not has(key, VERSIONS[0]) or behaviour.first == VERSIONS[0], key
        assert has(key, VERSIONS[-1]), key


def test_every_behaviour_row_is_in_the_simulator_docs() -> None:
    doc = DOC.read_text()
    for key, behaviour in BEHAVIOURS.items():
        line = next((ln for ln in doc.splitlines() if ln.startswith(f"| `{key}` |")), None)
        assert line is not None, key
        assert f"| {behaviour.first} |" in line, key


async def _serve_one(
    version: str,
) -> tuple[dict[str, Any], dict[str, Any], int, dict[str, Any], str, list[str]]:
    """(/server_info, /generate meta_info, /get_load status, /v1/loads, /metrics, log messages)."""
    err = io.StringIO()
    async with (
        serve(speed=200, sglang_version=version, enable_metrics=True, err=err) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        info = (await client.get("/server_info")).json()
        body = {"text": "hi", "sampling_params": {"max_new_tokens": 8, "ignore_eos": True}}
        reply = await client.post("/generate", json=body)
        assert reply.status_code == 200
        get_load = (await client.get("/get_load")).status_code
        loads = (await client.get("/v1/loads")).json()
        metrics = (await client.get("/metrics")).text
    messages = [_STAMP.sub("", line) for line in err.getvalue().splitlines()]
    return info, reply.json()["meta_info"], get_load, loads, metrics, messages


@pytest.mark.parametrize("version", VERSIONS)
async def test_each_release_is_served_as_its_row(version: str) -> None:
    info, meta, get_load, loads, metrics, messages = await _serve_one(version)
    assert info["version"] == version
    assert loads["version"] == version
    # /generate meta_info: num_retractions from 0.5.12, reasoning_tokens from 0.5.10.
    renamed = _at_least(version, "0.5.12")
    assert ("num_retractions" in meta, "total_retractions" in meta) == (renamed, not renamed)
    assert ("reasoning_tokens" in meta) == _at_least(version, "0.5.10")
    # /get_load: through 0.5.20.
    assert get_load == (404 if _at_least(version, "0.5.21") else 200)
    # /v1/loads: aggregate through 0.5.12.post1, LoadSnapshot entries from 0.5.13.
    assert ("aggregate" in loads) == (not _at_least(version, "0.5.13"))
    assert ("num_accelerators" in loads) == _at_least(version, "0.5.13")
    # /server_info: dsa_* names from 0.5.13; the -decode graph fields from 0.5.14.
    assert ("dsa_decode_backend" in info) == _at_least(version, "0.5.13")
    assert ("nsa_decode_backend" in info) == (not _at_least(version, "0.5.13"))
    assert ("cuda_graph_max_bs_decode" in info) == _at_least(version, "0.5.14")
    assert ("enable_hisparse" in info) == _at_least(version, "0.5.10")
    # /metrics: 0.5.23's family set (is_streaming on the tokenizer counters) from 0.5.10.
    assert ('is_streaming="false"' in metrics) == _at_least(version, "0.5.10")
    assert ("sglang:cache_config_info" in metrics) == (not _at_least(version, "0.5.10"))
    # Prefill line: cuda graph after the throughput through 0.5.9, before it from 0.5.10,
    # #pending-token from 0.5.11; the daemon's parser reads all three.
    prefills = [m for m in messages if m.startswith("Prefill batch")]
    assert prefills
    for line in prefills:
        graph_first = line.index("cuda graph") < line.index("input throughput")
        assert graph_first == _at_least(version, "0.5.10"), line
        assert ("#pending-token: 0, " in line) == _at_least(version, "0.5.11"), line
        assert isinstance(parse_line(line), PrefillBatch)


@pytest.mark.parametrize("version", VERSIONS)
def test_each_release_accepts_its_own_flag_spellings(
    capsys: pytest.CaptureFixture[str], version: str
) -> None:
    def code(*args: str) -> int:
        try:
            return main(["sim", "--check-args", "--sglang-version", version, *args])
        except SystemExit as exc:  # argparse's own errors
            return int(exc.code or 0)

    assert code() == 0
    # --dsa-* from 0.5.13; --nsa-* through 0.5.19 (options.json, the daemon's cli.* rows).
    assert code("--dsa-decode-backend", "trtllm") == (0 if _at_least(version, "0.5.13") else 2)
    assert code("--nsa-decode-backend", "trtllm") == (2 if _at_least(version, "0.5.20") else 0)
    # --cuda-graph-backend-decode from 0.5.14; --enable-hisparse from 0.5.10.
    assert code("--cuda-graph-backend-decode", "full") == (0 if _at_least(version, "0.5.14") else 2)
    assert code("--enable-hisparse") == (0 if _at_least(version, "0.5.10") else 2)
    # A choice that release's parser does not give: fp4_e2m1 KV on a dense model, gone in 0.5.21.
    dense = ("--profile", "tiny-llama-1x-h200", "--kv-cache-dtype", "fp4_e2m1")
    assert code(*dense) == (2 if _at_least(version, "0.5.21") else 0)
    capsys.readouterr()


def test_a_release_between_two_boundaries_runs_as_a_process(sim_factory) -> None:  # type: ignore[no-untyped-def]
    # The command line too (not only the in-process API): 0.5.10.post1 is after the metrics and
    # crash-text rows (0.5.10) and before the Prefill #pending-token one (0.5.11).
    sim = sim_factory("--sglang-version", "0.5.10.post1")
    info = HTTP.get(sim.base_url + "/server_info", timeout=30).json()
    assert info["version"] == "0.5.10.post1"
    assert Version(0, 5, 10, 1) == parse_version(info["version"])
    assert "nsa_decode_backend" in info
