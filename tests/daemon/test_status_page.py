"""The status page (HTML) and `sentinel status` (text + exit code)."""

from __future__ import annotations

import json
import re
import struct
import time
import zlib
from pathlib import Path
from typing import Any

import pytest
from aiohttp import web

from sglang_sentinel.cli import main
from sglang_sentinel.cli.status import health_code, summarize
from sglang_sentinel.status_page import render_status_page
from support.headless_chromium import dump_dom_and_screenshot, requires_chromium
from support.ports import free_port


def snapshot(**overrides: Any) -> dict[str, Any]:
    now = time.time()
    run = {
        "kind": "run",
        "profile": "reference",
        "outcome": "completed",
        "abort_reason": None,
        "started_at": now - 120,
        "finished_at": now - 80,
        "reference": True,
        "num_prompts": 64,
        "requests": {"success": 63, "http_503": 1},
        "summary": {
            "output_throughput": 196.2,
            "total_throughput": 451.0,
            "ttft_p50": 0.21,
            "ttft_p99": 1.4,
            "tpot_p50": 0.08,
            "concurrency_mean": 31.5,
        },
    }
    aborted = dict(run, outcome="aborted", abort_reason="error_ratio", reference=False, started_at=now - 60)
    skip = {"kind": "skip", "profile": "<script>alert(1)</script>", "reason": "budget", "at": now - 30}
    snap: dict[str, Any] = {
        "generated_at": now,
        "version": "0.1.0",
        "server": {
            "state": "ready",
            "since": now - 600,
            "ready_at": now - 600,
            "start_duration_seconds": 412.5,
            "launch_hash": "9a7606c650fb778d",
            "mode": "child",
            "url": "http://127.0.0.1:30000",
            "restarts": 1,
        },
        "probes": [
            {"name": "health", "success": True, "duration_seconds": 0.004, "detail": "ok"},
            {"name": "canary_arithmetic", "success": True, "duration_seconds": 0.8, "detail": "ok"},
        ],
        "schedule": {
            "current": {
                "profile": "reference",
                "started_at": now - 5,
                "in_flight": 12,
                "completed": 3,
                "failed": 0,
            },
            "recent": [run, aborted, skip],
            "restarts": [
                {"ready_at": now - 4000, "launch_hash": "aaaa"},
                {"ready_at": now - 600, "launch_hash": "bbbb"},
            ],
            "budget": {"tokens_per_hour": 1_000_000, "spent": 250_000, "remaining": 750_000},
            "next_runs": {"load:reference": now + 600, "server_watch": now + 1},
        },
        "capacity": {
            "output_throughput": 208.0,
            "knee_concurrency": 16,
            "slo_concurrency": 24,
            "finished_at": now - 3600,
        },
        "calibration_report_url": "/calibration/report",
        "collectors": [
            {"name": "sglang", "success": True, "detail": ""},
            {"name": "gpu", "success": True, "detail": ""},
        ],
    }
    snap.update(overrides)
    return snap


def test_page_shows_everything_and_escapes() -> None:
    page = render_status_page(snapshot())
    for needle in (
        "ready",
        "9a7606c650fb778d",
        "canary_arithmetic",
        "196.2",
        "error_ratio",
        "250,000",
        "208.0",
        "/metrics",
        "/calibration/report",
        "Running now",
    ):
        assert needle in page, needle
    assert "<script>" not in page
    assert "&lt;script&gt;" in page


def test_page_copes_with_an_empty_snapshot() -> None:
    page = render_status_page({})
    assert "No load run yet" in page
    assert "No conclusive calibration yet" in page
    bad = snapshot(server={"state": "failed", "ready_at": float("nan")}, probes=[{"name": "x"}])
    assert "failed" in render_status_page(bad)


def test_summary_and_exit_codes() -> None:
    good = snapshot()
    assert health_code(good) == 0
    text = summarize(good)
    assert text.startswith("sentinel: healthy")
    assert "reference completed" in text
    # A GPU host that lost NVML is not healthy, even with the server ready.
    lost = snapshot(collectors=[{"name": "gpu", "success": False, "detail": "nvml library_not_found"}])
    assert health_code(lost) == 1
    assert "collector   FAIL gpu: nvml library_not_found" in summarize(lost)
    assert "nvml library_not_found" in render_status_page(lost)
    bad = snapshot(probes=[{"name": "canary_arithmetic", "success": False, "detail": "wrong_answer"}])
    assert health_code(bad) == 1
    assert "FAIL canary_arithmetic" in summarize(bad)
    assert health_code(snapshot(server={"state": "restarting"})) == 1
    assert "none yet" in summarize({"server": {}})
    # A collector with no outcome yet (nothing collected it) is neither ok nor FAIL.
    pending = snapshot(collectors=[{"name": "gpu", "success": None, "detail": ""}])
    assert "FAIL gpu" not in summarize(pending)
    page = render_status_page(pending)
    row = page[page.index("<td>gpu</td>") :]
    assert row.index(">unknown<") < row.index("</tr>")
    assert "failing" not in row[: row.index("</tr>")]


async def test_status_command_against_a_daemon_endpoint(
    aiohttp_free_port: int, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = snapshot()

    async def status_json(request: web.Request) -> web.Response:
        return web.json_response(doc)

    app = web.Application()
    app.router.add_get("/status.json", status_json)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", aiohttp_free_port)
    await site.start()
    try:
        import asyncio

        url = f"http://127.0.0.1:{aiohttp_free_port}"
        code = await asyncio.to_thread(main, ["status", "--url", url])
        assert code == 0
        assert "sentinel: healthy" in capsys.readouterr().out
        doc["server"]["state"] = "unhealthy"
        assert await asyncio.to_thread(main, ["status", "--url", url]) == 1
        assert await asyncio.to_thread(main, ["status", "--url", url + "/nope"]) == 3
    finally:
        await runner.cleanup()
    # Nothing listening: exit 3 and one line.
    assert main(["status", "--url", url, "--timeout", "1"]) == 3
    err = capsys.readouterr().err
    assert "cannot reach the daemon" in err
    assert "Traceback" not in err


@pytest.fixture
def aiohttp_free_port() -> int:
    return free_port()


def _png_is_not_blank(path: Path) -> float:
    """Share of distinct byte values in the decompressed image data (a blank page has very few)."""
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    pos, idat = 8, b""
    while pos < len(data):
        (length,) = struct.unpack(">I", data[pos : pos + 4])
        kind = data[pos + 4 : pos + 8]
        if kind == b"IDAT":
            idat += data[pos + 8 : pos + 8 + length]
        pos += 12 + length
    raw = zlib.decompress(idat)
    non_white = sum(1 for b in raw[::7] if b < 230)
    return non_white / len(raw[::7])


@requires_chromium
def test_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    page = tmp_path / "status.html"
    page.write_text(render_status_page(snapshot()), encoding="utf-8")
    profile = tmp_path / "profile"
    shot = tmp_path / "shot.png"
    dom = dump_dom_and_screenshot(page, shot, profile=profile, virtual_time_ms=3000, window="1280,1400")
    # The browser parsed every section, and the injected script stayed text.
    for heading in ("Server", "Probes and canaries", "Load runs", "Capacity", "Collectors"):
        assert re.search(rf"<h2>{heading}", dom), heading
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in dom
    assert _png_is_not_blank(shot) > 0.02


def test_page_and_summary_mark_client_bound_runs_lower_bounds_and_long_answers() -> None:
    doc = snapshot()
    run = dict(doc["schedule"]["recent"][0])
    run["summary"] = dict(run["summary"], client_bound=True, client_bound_reasons=["p99 schedule lag 40 ms"])
    doc["schedule"]["recent"] = [run]
    doc["capacity"] = {
        "output_throughput": 1234.5,
        "knee_concurrency": 16,
        "slo_concurrency": None,
        "finished_at": doc["generated_at"] - 60,
        "bound": "lower",
        "max_concurrency": 64,
    }
    long_answer = "garbage " * 100
    doc["probes"] = [
        {"name": "canary_x", "success": False, "at": doc["generated_at"] - 12, "detail": long_answer[:160]}
    ]
    page = render_status_page(doc)
    assert "client-bound" in page
    assert "≥ 1,234.5 tok/s (lower bound: did not saturate up to concurrency 64)" in page
    assert "within SLO" not in page
    assert "12 s ago" in page
    # The cell shows the start of a long answer; the whole (already bounded) text is on hover.
    cell = page[page.index("canary_x") :]
    assert "…" in cell[: cell.index("</tr>")]
    text = summarize(doc, now=doc["generated_at"])
    assert "CLIENT-BOUND (p99 schedule lag 40 ms)" in text
    assert "capacity    ≥ 1,234.5 tok/s (lower bound" in text
    assert "12 s ago" in text


def test_status_document_cuts_long_canary_answers_and_knows_staleness() -> None:
    from sglang_sentinel.statusdoc import probe_rows
    from sglang_sentinel.supervise.probes import ProbeResult
    from sglang_sentinel.supervise.snapshot import SupervisorSnapshot
    from sglang_sentinel.supervise.state import ServerState

    now = time.time()
    probes = {
        "canary_x": ProbeResult("canary_x", False, 0.1, "garbage_repeated", "! " * 500, at=now - 5),
        "health": ProbeResult("health", True, 0.01, "ok", at=now - 1),
        "stall": ProbeResult("stall", True, 0.01, "ok", "running from loads_aggregate", at=now - 2),
    }

    def snap(state: ServerState) -> SupervisorSnapshot:
        return SupervisorSnapshot(
            "child", "sim", "hash", None, state, now, state is ServerState.READY, None, None, None,
            None, {}, {}, {}, probes, {}, {}, (), 0,
        )  # fmt: skip

    rows = {r["name"]: r for r in probe_rows(snap(ServerState.READY), now)}
    assert len(rows["canary_x"]["detail"]) <= 160
    assert rows["canary_x"]["age_seconds"] == pytest.approx(5, abs=0.5)
    assert rows["stall"]["success"] is True
    assert rows["stall"]["stale"] is False
    down = {r["name"]: r for r in probe_rows(snap(ServerState.RESTARTING), now)}
    # Not serving: /health fails (whatever its last result said), the others are unknown and stale.
    assert down["health"]["success"] is False
    assert down["health"]["detail"] == "server restarting"
    assert down["stall"]["success"] is None
    assert down["stall"]["stale"] is True


def test_next_firings_say_load_jobs_skip_while_the_server_is_not_ready() -> None:
    ready = render_status_page(snapshot())
    assert "skips unless the server is ready" not in ready
    failed = snapshot()
    failed["server"] = dict(failed["server"], state="failed")
    failed["schedule"] = dict(failed["schedule"], next_runs={"ready:reference": time.time() + 5})
    assert "ready:reference" in render_status_page(failed)
    assert "skips unless the server is ready" in render_status_page(failed)


def test_page_and_summary_show_energy_per_token_and_why_a_run_has_none() -> None:
    metered = {
        "joules": 4800.0,
        "seconds": 8.0,
        "mean_power_watts": 600.0,
        "joules_per_output_token": 2.4,
        "output_tokens_per_joule": 0.4167,
        "reason": None,
    }
    reset = {
        "joules": None,
        "joules_per_output_token": None,
        "reason": "counter_reset",
        "detail": "GPU-1 reset",
    }
    base = snapshot()
    recent = base["schedule"]["recent"]
    runs = [{**recent[0], "energy": metered}, {**recent[0], "started_at": time.time() - 5, "energy": reset}]
    snap = snapshot(
        schedule={**base["schedule"], "recent": runs},
        capacity={**base["capacity"], "knee_tokens_per_joule": 0.52, "efficient_concurrency": 48.0},
        energy={
            "metered": True,
            "baseline_power_watts": 640.5,
            "baseline_measured_at": time.time() - 60,
            "price_per_kwh": 0.25,
            "currency": "EUR",
        },
    )
    page = render_status_page(snap)
    assert "GPU J/tok" in page
    assert ">2.4<" in page
    assert "no energy (counter_reset)" in page
    assert "Tokens per joule at the knee" in page
    assert "0.520" in page
    assert "Efficient concurrency (fewest J/tok)" in page
    assert "640.5 W" in page
    assert "0.25 EUR/kWh" in page
    text = summarize(snap)
    assert "2.4 J/tok" in text
    assert "no energy (counter_reset)" in text
    assert "energy      idle baseline 640.5 W, energy price 0.25 EUR/kWh, 0.520 tok/J at the knee" in text
    # Not metered: no energy section, no energy line.
    assert "GPU energy" not in render_status_page(snapshot())
    assert "energy " not in summarize(snapshot())


# After layout: for every card its scroll and client widths, for every detail cell its height and
# line height, written into the DOM as JSON (the page itself has no script).
_MEASURE = """<script>
window.addEventListener("load", () => {
  const cards = [...document.querySelectorAll("main > section")].map(s => ({
    title: (s.querySelector("h2") || {}).textContent || "",
    scroll: s.scrollWidth, client: s.clientWidth,
  }));
  const cells = [...document.querySelectorAll("td.detail")].map(td => ({
    height: td.getBoundingClientRect().height,
    line: parseFloat(getComputedStyle(td).lineHeight) || 20,
    width: td.getBoundingClientRect().width,
    text: td.textContent.slice(0, 40),
  }));
  const out = document.createElement("pre");
  out.id = "measured";
  out.style.display = "none";
  out.textContent = JSON.stringify({cards, cells, page: document.documentElement.scrollWidth,
                                    viewport: window.innerWidth});
  document.body.appendChild(out);
});
</script>"""


def long_snapshot() -> dict[str, Any]:
    doc = snapshot()
    now = doc["generated_at"]
    unbroken = "x" * 300  # a canary answer with no space to wrap at
    words = "the answer goes on and on " * 20
    doc["probes"] = [
        {
            "name": "canary_arithmetic",
            "success": False,
            "at": now - 5,
            "duration_seconds": 0.2,
            "detail": unbroken,
        },
        {
            "name": "canary_is_prime",
            "success": False,
            "at": now - 5,
            "duration_seconds": 0.3,
            "detail": words,
        },
        {"name": "health", "success": True, "at": now - 1, "duration_seconds": 0.01, "detail": ""},
    ]
    doc["probes"][0]["detail"] = unbroken
    doc["probes"][1]["detail"] = words
    doc["collectors"] = [
        {"name": "sglang", "success": True, "state": "ok", "detail": ""},
        {"name": "gpu", "success": None, "state": "not_applicable", "detail": "no NVIDIA GPU " + words},
    ]
    return doc


@requires_chromium
@pytest.mark.parametrize("width", [1400, 800])
def test_cards_hold_long_details_on_one_line(tmp_path: Path, width: int) -> None:
    page = tmp_path / "status.html"
    page.write_text(
        render_status_page(long_snapshot()).replace("</body>", _MEASURE + "</body>"), encoding="utf-8"
    )
    shot = tmp_path / f"status-{width}.png"
    dom = dump_dom_and_screenshot(
        page, shot, profile=tmp_path / "profile", virtual_time_ms=3000, window=f"{width},1600"
    )
    m = re.search(r'<pre id="measured"[^>]*>(.*?)</pre>', dom, re.S)
    assert m is not None, dom[-2000:]
    measured = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert measured["viewport"] == width
    cards = {c["title"]: c for c in measured["cards"]}
    # The cards with long details fit their width: nothing to scroll sideways.
    for title in ("Probes and canaries", "Collectors", "Server"):
        card = cards[title]
        assert card["scroll"] <= card["client"], (title, card)
    # The page as a whole does not scroll sideways either.
    assert measured["page"] <= width, measured["page"]
    # Every detail cell is one line (no letter-per-line column), and has room to show something.
    cells = measured["cells"]
    assert len(cells) == 5
    for cell in cells:
        assert cell["height"] < 2 * cell["line"], cell
        if cell["text"]:
            assert cell["width"] >= 100, cell
    # The long texts are cut, the whole of them behind a click (<details>) and on hover (title).
    assert dom.count("<details>") == 3
    assert 'title="' + "x" * 300 + '"' in dom


def test_an_undecided_target_kind_is_shown_on_the_page_and_in_the_summary() -> None:
    doc = snapshot()
    doc["server"] = dict(doc["server"], mode="external", kind="server", kind_undecided=True)
    page = render_status_page(doc)
    assert '<span class="badge warn">undecided</span>' in page
    text = summarize(doc, now=doc["generated_at"])
    assert "target      kind undecided" in text
    decided = snapshot()
    decided["server"] = dict(decided["server"], mode="external", kind="router", kind_undecided=False)
    assert "undecided" not in render_status_page(decided)
    assert "undecided" not in summarize(decided, now=decided["generated_at"])
