"""`sentinel status` names the SGLang release row the readers use, and warns for an unread one."""

from __future__ import annotations

from sglang_sentinel.cli.status import health_code, summarize
from sglang_sentinel.sglang.versions import NEWEST_KNOWN, resolve


def _status(reported: str, mode: str = "child") -> dict[str, object]:
    res = resolve(reported)
    sglang = {
        "reported": reported,
        "source": "/server_info",
        "behaves_as": str(res.behaves_as),
        "known": res.known,
        "note": res.note,
    }
    return {"server": {"state": "ready", "mode": mode, "url": "http://127.0.0.1:1", "sglang": sglang}}


def test_a_read_release_names_its_row() -> None:
    text = summarize(_status("0.5.13.post1"))
    assert "sglang      0.5.13.post1: release row 0.5.13.post1 (read from its wheel)" in text


def test_a_release_newer_than_every_one_read_warns_without_degrading() -> None:
    status = _status("0.9.0")
    line = next(ln for ln in summarize(status).splitlines() if ln.startswith("sglang "))
    assert line.startswith("sglang      WARN 0.9.0:")
    assert "behaving as it" in line
    assert str(NEWEST_KNOWN) in line
    assert health_code(status) == 0  # behaving as the newest read release is not a fault


def test_a_release_older_than_every_one_read_warns_and_is_still_watched() -> None:
    # External mode: sentinel launched nothing (preflight's sglang_version check only warns there)
    # and keeps watching the server, read as the oldest release; the status line says it is unsupported.
    status = _status("0.5.8", mode="external")
    line = next(ln for ln in summarize(status).splitlines() if ln.startswith("sglang "))
    assert line.startswith("sglang      WARN 0.5.8:")
    assert "older than the oldest supported (0.5.9): not supported" in line
    assert health_code(status) == 0
