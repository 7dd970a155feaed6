"""Time the daemon was away is not evidence: the gap heartbeat, the stall window after a gap and
a failing check's cadence across an inconclusive result."""

from __future__ import annotations

import asyncio
import time

from sglang_sentinel.supervise.checks import Checks
from sglang_sentinel.supervise.gaps import GapWatch
from sglang_sentinel.supervise.probes import ProbeResult, Progress, StallDetector
from sglang_sentinel.supervise.settings import CheckSettings, ChecksSettings
from sglang_sentinel.supervise.state import StateMachine
from support.waits import until


async def test_a_blocked_loop_is_a_gap_and_a_punctual_one_is_not() -> None:
    watch = GapWatch(period_s=0.02, threshold_s=0.2)
    task = asyncio.create_task(watch.run())
    try:
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        assert not watch.gap_since(t0 - 0.3)
        time.sleep(0.5)  # noqa: ASYNC251 - the event loop is away on purpose, as under SIGSTOP
        # Reported at once, before the heartbeat has run again ...
        assert watch.gap_since(t0)
        await asyncio.sleep(0.1)
        # ... and after it did: one gap of about the blocked time.
        assert watch.gaps_total == 1
        assert 0.25 < watch.gap_seconds_total < 2.0
        assert watch.gap_since(t0)
        assert not watch.gap_since(time.monotonic())
    finally:
        task.cancel()


def test_without_a_heartbeat_there_is_no_gap() -> None:
    watch = GapWatch(period_s=0.01, threshold_s=0.01)
    time.sleep(0.05)
    assert not watch.gap_since(0.0)
    assert watch.away_total() == 0.0


def test_after_a_gap_a_stall_needs_stall_after_of_observed_time() -> None:
    stall = StallDetector(stall_after=10.0)
    flat = Progress(100.0, 2.0, "loads_aggregate")
    assert stall.observe(flat, 0.0).ok
    assert stall.observe(flat, 5.0).ok
    # 180 s the daemon did not see: without the rebase this observation is "stuck for 185 s".
    stall.rebase(185.0)
    assert stall.observe(flat, 185.0).ok
    assert stall.observe(flat, 190.0).ok
    # Still flat after stall_after of watching: a real stall is still caught.
    verdict = stall.observe(flat, 195.5)
    assert not verdict.ok
    assert verdict.reason == "stalled"
    assert "for 10 s" in verdict.detail


async def test_an_inconclusive_result_keeps_a_failing_checks_retry_cadence() -> None:
    """A failing check re-checks at its retry interval until it passes. A result that cannot judge
    (the daemon was away while the probe was in flight) leaves the failure unresolved, so the
    cadence stays: it used to fall back to the full interval, a canary's 5 minutes by default."""
    checks = Checks(
        ChecksSettings(),
        StateMachine(),
        request_restart=lambda reason: None,
        on_result=lambda result: None,
        publish=lambda: None,
    )
    settings = CheckSettings(interval=3600, retry_interval=0.01, action="alert")
    script = [
        ProbeResult("canary_x", False, 0.0, "wrong_answer", "41"),
        ProbeResult("canary_x", False, 0.0, "wrong_answer", "daemon away: 41", conclusive=False),
        ProbeResult("canary_x", True, 0.0, "ok", ""),
    ]
    seen: list[ProbeResult] = []

    async def probe() -> list[ProbeResult]:
        seen.append(script[min(len(seen), len(script) - 1)])
        return [seen[-1]]

    loop = asyncio.create_task(checks._loop(settings, "canary", probe, allow_restart=False))
    try:
        # A loop that fell back to the interval would wait an hour here.
        await until(lambda: len(seen) >= 3, timeout_s=30, what="the re-check after the inconclusive result")
    finally:
        loop.cancel()
        await asyncio.gather(loop, return_exceptions=True)
    assert checks.failures[("canary_x", "wrong_answer")] == 2  # both counted, one of them a verdict
    assert checks.probes["canary_x"].ok  # the re-check's pass
