"""A canary that confirms garbage answers names the start of the doubt: the last passing canary."""

from __future__ import annotations

from sglang_sentinel.supervise.garbage import GarbageWatch
from sglang_sentinel.supervise.probes import ProbeResult


def _r(ok: bool, reason: str = "ok", conclusive: bool = True) -> ProbeResult:
    return ProbeResult("canary_arithmetic", ok, 0.1, reason, conclusive=conclusive)


def test_confirmed_garbage_reports_the_last_pass_once() -> None:
    watch = GarbageWatch(failures=2)
    calls: list[tuple[float, str]] = []
    watch.add_listener(lambda since, reason: calls.append((since, reason)))
    watch.observe(_r(True), 100.0, ready_at=50.0)
    watch.observe(_r(True), 200.0, ready_at=50.0)
    # A timeout says nothing about the answers; one garbage answer is not yet a confirmation.
    watch.observe(_r(False, "timeout"), 300.0, ready_at=50.0)
    watch.observe(_r(False, "garbage_repeated"), 310.0, ready_at=50.0)
    assert calls == []
    watch.observe(_r(False, "garbage_repeated"), 320.0, ready_at=50.0)
    watch.observe(_r(False, "garbage_repeated"), 330.0, ready_at=50.0)
    assert calls == [(200.0, "canary_arithmetic: garbage_repeated")]


def test_without_any_pass_the_doubt_starts_at_ready() -> None:
    watch = GarbageWatch(failures=1)
    calls: list[tuple[float, str]] = []
    watch.add_listener(lambda since, reason: calls.append((since, reason)))
    watch.observe(_r(False, "wrong_answer"), 300.0, ready_at=50.0)
    assert calls == [(50.0, "canary_arithmetic: wrong_answer")]
