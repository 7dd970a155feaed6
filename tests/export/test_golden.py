"""The whole /metrics page with every collector on fakes: golden file + ``promtool check metrics``.

Regenerate after an intended change with ``SENTINEL_UPDATE_GOLDEN=1 pytest tests/export/test_golden.py``
and review the diff like code: every line is a series an operator's dashboards depend on.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import time
from asyncio.subprocess import PIPE, STDOUT
from pathlib import Path
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.collect import CollectorSet

GOLDEN = Path(__file__).resolve().parent / "golden" / "metrics.txt"
VOLATILE_NAME = re.compile(
    r"^(sentinel_\w*(_timestamp_seconds|_duration_seconds)|process_\w+)(\{.*\})? (.*)$"
)
PROC = Path("/proc/self/stat").exists()  # prometheus_client's ProcessCollector needs it
# Labels whose values depend on the machine running the test, not on sentinel.
VOLATILE_LABELS = re.compile(
    r'(python_version|prometheus_client_version|nvidia_ml_py_version|version)="[^"]*"'
)


def sentinel_part(text: str) -> str:
    """Drop SGLang's re-exposed families: they keep SGLang's names (the one lint exemption)."""
    keep = []
    for line in text.splitlines():
        name = line.split(" ", 3)[2] if line.startswith("# ") else re.split(r"[{ ]", line, maxsplit=1)[0]
        if not name.startswith("sglang"):
            keep.append(line)
    return "\n".join(keep) + "\n"


def normalise(text: str) -> str:
    out = []
    for line in sentinel_part(text).splitlines():
        m = VOLATILE_NAME.match(line)
        if m:
            line = f"{m.group(1)}{m.group(3) or ''} <volatile>"
        out.append(VOLATILE_LABELS.sub(lambda g: f'{g.group(1)}="<volatile>"', line))
    return "\n".join(out) + "\n"


async def scrape(collectors: CollectorSet, exporter_factory: Any) -> str:
    exporter = await exporter_factory(collectors)
    async with httpx.AsyncClient() as client:
        r = await client.get(exporter.url + "/metrics")
    r.raise_for_status()
    return r.text


async def test_golden_metrics(collectors: CollectorSet, exporter_factory: Any) -> None:
    got = normalise(await scrape(collectors, exporter_factory))
    if os.environ.get("SENTINEL_UPDATE_GOLDEN"):
        GOLDEN.parent.mkdir(exist_ok=True)
        GOLDEN.write_text(got)
    assert got == GOLDEN.read_text()


@pytest.mark.skipif(not PROC, reason="ProcessCollector reads /proc (Linux)")
async def test_the_daemons_own_process_series(collectors: CollectorSet, exporter_factory: Any) -> None:
    """prometheus_client's ProcessCollector on Linux: what node-exporter-style alerts read
    (resident memory, CPU, fds against their limit, restarts by start time)."""
    text = await scrape(collectors, exporter_factory)
    values = {
        s.name: s.value
        for f in text_string_to_metric_families(text)
        if f.name.startswith("process_")
        for s in f.samples
    }
    assert set(values) == {
        "process_virtual_memory_bytes",
        "process_resident_memory_bytes",
        "process_start_time_seconds",
        "process_cpu_seconds_total",
        "process_open_fds",
        "process_max_fds",
    }
    assert 10e6 < values["process_resident_memory_bytes"] < values["process_virtual_memory_bytes"]
    assert 0 < values["process_open_fds"] <= values["process_max_fds"]
    assert time.time() - 86400 < values["process_start_time_seconds"] <= time.time()  # a timestamp


async def test_promtool_check_metrics(collectors: CollectorSet, exporter_factory: Any) -> None:
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool not installed (scripts/test installs Debian's prometheus package)")
    text = sentinel_part(await scrape(collectors, exporter_factory))
    assert "sentinel_gpu_power_watts" in text
    assert "sentinel_sglang_log_lines_total" in text
    proc = await asyncio.create_subprocess_exec(
        promtool, "check", "metrics", stdin=PIPE, stdout=PIPE, stderr=STDOUT
    )
    out, _ = await asyncio.wait_for(proc.communicate(text.encode()), 60)
    assert (proc.returncode, out.decode()) == (0, "")


def test_no_percent_or_mib_units_in_names() -> None:
    """What promtool does not flag (https://prometheus.io/docs/practices/naming/): ratios and bytes only."""
    names = {line.split(" ")[2] for line in GOLDEN.read_text().splitlines() if line.startswith("# TYPE")}
    assert names
    for name in names:
        assert not re.search(r"_(percent|pct|mib|mb|kb|kib|ms|mw|mhz|celsius_total)($|_)", name), name
