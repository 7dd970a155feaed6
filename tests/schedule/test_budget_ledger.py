"""The token budget is a hard bound across SIGKILLs: a property test over random schedules.

Each case draws a sequence of runs (random sizes, durations, partial spending, failures that
report exact streamed tokens or only the reservation) and kills of the daemon at random moments
mid-run. A kill loses the in-memory budget; the next life rebuilds it from the ledger. The truth
is the list of token spending events as the server saw them (a killed run spent only up to the
kill); in every sliding hour the truth must stay within tokens_per_hour.
"""

from __future__ import annotations

import random
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from sglang_sentinel.schedule.budget import WINDOW_SECONDS, TokenBudget
from sglang_sentinel.schedule.ledger import LEDGER_FILE, BudgetLedger

LIMIT = 15_000


class Clock:
    def __init__(self) -> None:
        self.now = 1_800_000_000.0

    def __call__(self) -> float:
        return self.now


def _life(path: Path, clock: Clock) -> TokenBudget:
    budget = TokenBudget(LIMIT, clock=clock, ledger=BudgetLedger(path))
    budget.restore_ledger()
    return budget


def _max_hour(events: list[tuple[float, int]]) -> int:
    events.sort()
    best = 0
    j = 0
    total = 0
    for i, (t, _) in enumerate(events):  # windows [t, t + 1 h) starting at each event
        while j < len(events) and events[j][0] < t + WINDOW_SECONDS:
            total += events[j][1]
            j += 1
        best = max(best, total)
        total -= events[i][1]
    return best


def _case(path: Path, seed: int) -> tuple[int, int, int]:
    """One random history; returns (admitted runs, kills, the most tokens spent in any hour)."""
    rng = random.Random(seed)
    clock = Clock()
    budget = _life(path, clock)
    truth: list[tuple[float, int]] = []
    kills = admitted = 0
    for _ in range(80):
        clock.now += rng.uniform(0, 900)
        reservation = budget.reserve(rng.randint(500, LIMIT // 2))
        if reservation is None:
            continue
        admitted += 1
        start = clock.now
        duration = rng.uniform(1, 1500)
        # What the run streams, in pieces over its duration: at most the reservation; a run
        # whose requests fail mid-stream streams less (still real spending).
        streamed = rng.randint(0, reservation.tokens)
        pieces = sorted(rng.uniform(start, start + duration) for _ in range(5))
        shares = [streamed // 5] * 4 + [streamed - 4 * (streamed // 5)]
        if rng.random() < 0.3:  # SIGKILL mid-run: spending stops, the memory is gone
            killed_at = rng.uniform(start, start + duration)
            truth += [(t, n) for t, n in zip(pieces, shares, strict=True) if t <= killed_at]
            clock.now = killed_at + rng.uniform(0.5, 120)  # systemd restarts the daemon
            budget = _life(path, clock)
            kills += 1
            continue
        truth += list(zip(pieces, shares, strict=True))
        clock.now = start + duration
        # Exact reports charge what was streamed; a run known only from its counters charges
        # the reservation (scheduler.py).
        budget.settle(reservation, streamed if rng.random() < 0.7 else reservation.tokens)
    return admitted, kills, _max_hour(truth)


@pytest.fixture
def memory_dir(tmp_path: Path) -> Iterator[Path]:
    """A directory in tmpfs where the box has one: the ledger fsyncs every line (8,000 in the
    property test, 80 % of its time on a disk; seconds more on a disk others write to), and a
    SIGKILL, unlike a power cut, keeps what was written without them: the same checks there."""
    shm = Path("/dev/shm")
    if not shm.is_dir():
        yield tmp_path
        return
    path = Path(tempfile.mkdtemp(prefix="sentinel-ledger-", dir=shm))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_spent_never_exceeds_the_hourly_budget(memory_dir: Path) -> None:
    total_kills = 0
    for seed in range(60):
        admitted, kills, worst = _case(memory_dir / f"{seed}-{LEDGER_FILE}", seed)
        assert admitted > 5, seed
        assert worst <= LIMIT, (seed, worst)
        total_kills += kills
    assert total_kills > 60  # the histories did exercise kills


def test_an_unsettled_reservation_counts_in_full_after_a_kill(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / LEDGER_FILE
    budget = _life(path, clock)
    assert budget.reserve(9_000) is not None
    clock.now += 60  # killed; restarted a minute later
    again = _life(path, clock)
    assert again.spent() == 9_000
    assert again.reserve(9_000) is None  # the same hour cannot be spent twice
    clock.now += WINDOW_SECONDS + 1
    assert again.spent() == 0
    assert again.reserve(9_000) is not None


def test_a_torn_last_line_and_a_refusing_disk(tmp_path: Path) -> None:
    clock = Clock()
    path = tmp_path / LEDGER_FILE
    budget = _life(path, clock)
    r = budget.reserve(1_000)
    assert r is not None
    budget.settle(r, 400)
    with path.open("ab") as fh:
        fh.write(b'{"id":"x","sta')  # killed mid-append: that reservation was never handed out
    assert _life(path, clock).spent() == 400
    # A ledger that cannot be written: no reservation, so nothing is spent unrecorded.
    blocked = TokenBudget(LIMIT, clock=clock, ledger=BudgetLedger(tmp_path / "missing-dir" / LEDGER_FILE))
    assert blocked.reserve(10) is None


def test_compaction_keeps_what_counts(memory_dir: Path) -> None:
    clock = Clock()
    path = memory_dir / LEDGER_FILE
    budget = _life(path, clock)
    for _ in range(1200):  # past the compaction bound, mostly expired
        r = budget.reserve(1)
        assert r is not None
        budget.settle(r, 1)
        clock.now += 10
    lines = path.read_text().splitlines()
    assert len(lines) < 2000
    assert _life(path, clock).spent() == budget.spent()
