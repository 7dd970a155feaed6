"""The tune loop against a fake lab: gate first, halving, finals, the noise rule, budgets, resume.

The fake lab is the boundary: it answers each server life from a table of throughputs per
configuration (a sequence per configuration, so repeats can disagree), with no server at all.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from sglang_sentinel.tune.driver import LifeResult, Tune, new_doc
from sglang_sentinel.tune.settings import TuneSettings
from sglang_sentinel.tune.space import Flags, expand, space_values
from sglang_sentinel.tune.state import find_unfinished, load_doc
from sglang_sentinel.tune.table import format_table


class Killed(BaseException):
    """Stands for SIGKILL: nothing after it runs (not even `except Exception`)."""


class FakeLab:
    def __init__(
        self,
        speeds: Mapping[int, Sequence[float]],
        *,
        garbage: frozenset[int] = frozenset(),
        skip: frozenset[int] = frozenset(),
        kill_at_life: int | None = None,
        full_fails: frozenset[int] = frozenset(),
    ) -> None:
        self.speeds = speeds
        self.full_fails = full_fails
        self.garbage = garbage
        self.skip = skip
        self.kill_at_life = kill_at_life
        self.lives: list[tuple[str, tuple[str, ...]]] = []
        self.probes: list[int | None] = []
        self.reaped = 0

    @staticmethod
    def _key(flags: Flags) -> int:
        return int(flags.get("--x", 0))

    def skip_reason(self, flags: Flags) -> str | None:
        return f"known bad: x={self._key(flags)}" if self._key(flags) in self.skip else None

    async def life(
        self,
        trial: dict[str, Any],
        *,
        gate: bool,
        kinds: Sequence[str],
        checkpoint: Callable[[], None],
        more: Callable[[dict[str, Any]], Sequence[str]] = lambda trial: (),
        probe_concurrency: int | None = None,
    ) -> LifeResult:
        self.lives.append((trial["id"], tuple(kinds)))
        self.probes.append(probe_concurrency)
        key = self._key(trial["flags"])
        trial["started_at"], trial["ready_s"] = "2026-12-01T00:00:00Z", 1.0
        if gate:
            bad = key in self.garbage
            trial["correctness"] = {
                "passed": not bad,
                "prompts": 24,
                "failures": [{"prompt": "What is 2+2?", "why": "garbage_repeated"}] if bad else [],
            }
            checkpoint()
            if bad:
                return LifeResult("rejected", "correctness gate: garbage_repeated", trial_s=2.0, tokens=100)
        pending = list(kinds)
        done: list[str] = []
        while pending:
            kind = pending.pop(0)
            if self.kill_at_life is not None and len(self.lives) == self.kill_at_life:
                raise Killed
            if kind == "full" and key in self.full_fails:
                self.lives[-1] = (trial["id"], tuple(done))
                return LifeResult("failed", "server left ready during the full measurement", trial_s=5.0)
            seq = self.speeds[key]
            n = sum(1 for r in trial["rounds"] if r["kind"] == kind)
            tp = seq[n % len(seq)] * (2.0 if kind == "full" else 1.0)
            trial["rounds"].append(
                {
                    "kind": kind,
                    "saturation_concurrency": 24 if kind == "full" else None,
                    "throughput_tok_s": tp,
                    "ttft_p99_s": 1000 / tp,
                    "tokens": 1000,
                    "duration_s": 5.0,
                }
            )
            checkpoint()
            done.append(kind)
            if not pending:
                pending = list(more(trial))
        self.lives[-1] = (trial["id"], tuple(done))
        return LifeResult("ok", trial_s=10.0, tokens=1000 * len(done))

    async def reap_leftover(self) -> None:
        self.reaped += 1

    def snippet(self, flags: Flags) -> str:
        return f"[server.profiles.sim]\nextra_args = {['--x', str(self._key(flags))]!r}\n".replace("'", '"')


def _tune(tmp_path: Path, lab: FakeLab, values: Sequence[int], **kw: Any) -> Tune:
    settings = TuneSettings(
        space={"--x": tuple(values)}, baseline={"--x": values[0]}, reference_profile="", **kw
    )
    configs = expand(settings)
    doc = new_doc(
        "tid",
        settings,
        space=space_values(settings),
        configs=configs,
        argvs=[["srv", "--x", str(c["--x"])] for c in configs],
        base_argv=["srv"],
        sglang_version=None,
        fp="fp1",
    )
    return Tune(doc, tmp_path / "tid", lab, settings)


_FIG = r"[\d.]+ \[[\d.]+, [\d.]+\]"  # Spread.text(): mean [low, high]


def _status(doc: dict[str, Any]) -> dict[int, str]:
    return {t["flags"]["--x"]: t["status"] for t in doc["trials"]}


@pytest.mark.parametrize("search", ["race", "halving"])
async def test_garbage_is_rejected_however_fast_and_the_fastest_correct_wins(
    tmp_path: Path, search: str
) -> None:
    # x=5 is by far the fastest, and answers garbage.
    speeds = {1: [100.0], 2: [150.0], 3: [300.0], 4: [120.0], 5: [900.0], 6: [80.0]}
    lab = FakeLab(speeds, garbage=frozenset({5}), skip=frozenset({6}))
    doc = await _tune(tmp_path, lab, [1, 2, 3, 4, 5, 6], search=search).run()
    status = _status(doc)
    assert status[5] == "rejected"
    assert status[6] == "skipped"
    by_x = {t["flags"]["--x"]: t for t in doc["trials"]}
    assert "correctness gate" in by_x[5]["reason"]
    assert by_x[6]["reason"] == "known bad: x=6"
    assert by_x[5]["rounds"] == []  # never measured
    assert doc["winner"] == by_x[3]["id"]
    assert "beyond the spread" in doc["winner_reason"]
    assert doc["finished_at"] is not None
    assert '"--x", "3"' in doc["winner_toml"]
    full = sorted(tid for tid, kinds in lab.lives if "full" in kinds)
    if search == "halving":
        # 4 measured -> 2 finalists; the eliminated ones say at which round and why.
        assert status[1] == "eliminated"
        assert status[4] == "eliminated"
        assert "round 0" in by_x[1]["reason"]
        assert full == sorted([by_x[3]["id"], by_x[2]["id"]])
    else:
        # One life per configuration; the full calibration only for those that reached the best
        # short figure so far: x=1 (first), x=2 (150 is above 100), x=3; not x=4 (120 vs 300).
        assert len(lab.lives) == 5
        assert full == sorted(by_x[x]["id"] for x in (1, 2, 3))
        assert status[4] == "eliminated"
        assert by_x[4]["reason"].startswith("screen: probe output throughput 120.0")
        assert by_x[4]["rounds"][-1]["kind"] == "short"
    assert lab.reaped == 1
    # Written to disk: the document round-trips.
    assert load_doc(tmp_path / "tid") == doc


async def test_within_noise_repeats_in_the_same_life_then_keeps_the_baseline(tmp_path: Path) -> None:
    # Baseline x=1 and x=2 alternate around the same figure: no significant difference.
    speeds = {1: [100.0, 104.0, 98.0], 2: [103.0, 97.0, 101.0]}
    lab = FakeLab(speeds)
    doc = await _tune(tmp_path, lab, [1, 2], repeats=3).run()
    by_x = {t["flags"]["--x"]: t for t in doc["trials"]}
    # x=2's probe (103) is within the spread of x=1's (100 +- 5 %): probed again in the same life,
    # up to `repeats` (no server is started again), then a record by its mean: full calibration.
    assert lab.lives == [("t01", ("full", "short")), ("t02", ("short", "short", "short", "full"))]
    assert [r["throughput_tok_s"] for r in by_x[2]["rounds"] if r["kind"] == "short"] == [103, 97, 101]
    assert doc["winner"] == by_x[1]["id"] == doc["baseline"]
    assert doc["winner_reason"].startswith("no significant difference")


async def test_race_names_the_configurations_it_left_within_noise(tmp_path: Path) -> None:
    # x=2 (99) is within the spread of x=1's probe (100 +- 5 %): probed up to `repeats` times in
    # its life, still not a record: no full calibration. x=3 (60) is clearly below: one probe.
    lab = FakeLab({1: [100.0], 2: [99.0], 3: [60.0]})
    doc = await _tune(tmp_path, lab, [1, 2, 3]).run()
    assert [kinds for _, kinds in lab.lives] == [("full", "short"), ("short",) * 3, ("short",)]
    status = _status(doc)
    assert status == {1: "measured", 2: "eliminated", 3: "eliminated"}
    by_x = {t["flags"]["--x"]: t for t in doc["trials"]}
    assert "within the spread" in by_x[2]["reason"]
    assert "beyond the spread" in by_x[3]["reason"]
    assert doc["winner"] == "t01"
    assert doc["winner_reason"].endswith("not fully calibrated: t02")


async def test_a_clear_difference_needs_no_repeat(tmp_path: Path) -> None:
    lab = FakeLab({1: [100.0], 2: [200.0]})
    doc = await _tune(tmp_path, lab, [1, 2], repeats=3).run()
    # The first configuration: full calibration first, then its probe at the concurrency where it
    # saturated; every later probe runs at that concurrency.
    assert lab.lives == [("t01", ("full", "short")), ("t02", ("short", "full"))]
    assert lab.probes == [None, 24]
    assert doc["winner"] == "t02"


async def test_no_correct_configuration_no_winner(tmp_path: Path) -> None:
    lab = FakeLab({1: [1.0], 2: [2.0]}, garbage=frozenset({1, 2}))
    doc = await _tune(tmp_path, lab, [1, 2]).run()
    assert doc["winner"] is None
    assert "no configuration" in doc["winner_reason"]


async def test_the_time_budget_stops_the_tune_and_says_so(tmp_path: Path) -> None:
    speeds = {i: [100.0 * i] for i in range(1, 7)}
    lab = FakeLab(speeds)
    doc = await _tune(tmp_path, lab, list(range(1, 7)), budget_time_s=25.0).run()
    assert len(lab.lives) == 3  # 10 s each: the fourth would start past 25 s
    assert "time budget" in doc["stop_reason"]
    assert doc["finished_at"] is None  # resumable with a larger budget
    assert doc["winner"] == "t03"
    assert _status(doc)[4] == "pending"
    # A larger budget resumes the same tune to the end.
    more = TuneSettings(space={"--x": tuple(range(1, 7))}, baseline={"--x": 1}, reference_profile="")
    doc["budget"]["time_s"] = None
    doc = await Tune(doc, tmp_path / "tid", FakeLab(speeds), more).run()
    assert doc["stop_reason"] is None
    assert doc["finished_at"] is not None
    assert doc["winner"] == "t06"


async def test_a_killed_tune_resumes_without_repeating_finished_lives(tmp_path: Path) -> None:
    speeds = {i: [100.0 * i] for i in range(1, 7)}
    killed = FakeLab(speeds, kill_at_life=3)
    with pytest.raises(Killed):
        await _tune(tmp_path, killed, list(range(1, 7)), search="halving").run()
    on_disk = load_doc(tmp_path / "tid")
    assert on_disk["progress"]["current"]["id"] == "t03"
    assert [t["status"] for t in on_disk["trials"][:3]] == ["measured", "measured", "running"]
    assert find_unfinished(tmp_path.parent, "fp1") is None  # not under <state>/tune/
    lab = FakeLab(speeds)
    settings = TuneSettings(
        space={"--x": tuple(range(1, 7))}, baseline={"--x": 1}, reference_profile="", search="halving"
    )
    doc = await Tune(on_disk, tmp_path / "tid", lab, settings).run()
    assert lab.reaped == 1
    screened = [tid for tid, kinds in lab.lives if kinds == ("short",)]
    assert "t01" not in screened
    assert "t02" not in screened
    assert screened[0] == "t03"
    starts = {t["id"]: t["starts"] for t in doc["trials"]}
    assert starts["t01"] == 1
    assert starts["t03"] == 2  # the interrupted life, and the one that finished
    t03 = next(t for t in doc["trials"] if t["id"] == "t03")
    assert [r["kind"] for r in t03["rounds"]] == ["short"]  # the lost life left nothing behind
    assert doc["winner"] == "t06"


async def test_close_survivors_are_halved_again_until_few_enough_for_full_calibrations(
    tmp_path: Path,
) -> None:
    speeds = {i: [100.0 + i, 103.0 + i] for i in range(1, 11)}  # all within each other's noise
    lab = FakeLab(speeds)
    doc = await _tune(tmp_path, lab, list(range(1, 11)), max_full=4, search="halving").run()
    shorts = [tid for tid, kinds in lab.lives if kinds == ("short",)]
    assert len(shorts) == 10 + 5  # the screen, then a second short round for the kept half
    fulls = {tid for tid, kinds in lab.lives if "full" in kinds}
    assert len(fulls) == 3  # ceil(5 / 2) go to the finals
    assert doc["progress"]["round"] == 1
    eliminated = [t for t in doc["trials"] if t["status"] == "eliminated"]
    assert len(eliminated) == 7
    assert {t["reason"].split(":")[0] for t in eliminated} == {"round 0", "round 1"}


class InterruptingLab(FakeLab):
    """Sends the process a real SIGINT during life number ``at`` (as Ctrl-C would), then waits."""

    def __init__(self, speeds: Mapping[int, Sequence[float]], at: int) -> None:
        super().__init__(speeds)
        self.at = at

    async def life(self, trial: dict[str, Any], **kw: Any) -> LifeResult:
        if len(self.lives) + 1 == self.at:
            self.lives.append((trial["id"], ()))
            os.kill(os.getpid(), signal.SIGINT)
            await asyncio.sleep(30)  # cancelled by the CLI's handler
        return await super().life(trial, **kw)


async def test_the_report_is_written_after_every_trial_and_says_interrupted(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    from sglang_sentinel.cli.tune import _ReportWriter, _run

    speeds = {i: [100.0 * i] for i in range(1, 5)}
    pages: list[str] = []
    writer = _ReportWriter(tmp_path / "report")

    def on_trial(doc: dict[str, Any]) -> None:
        writer(doc)
        pages.append((tmp_path / "report" / "index.html").read_text())
        assert json.loads((tmp_path / "report" / "tune.json").read_text()) == doc

    tune = _tune(tmp_path, InterruptingLab(speeds, at=3), [1, 2, 3, 4], search="halving")
    doc, interrupted = await _run(tune.doc, tmp_path / "tid", tune.lab, tune.settings, on_trial=on_trial)
    assert interrupted
    # One page per finished trial (t01, t02), each partial, then the interrupted one.
    assert len(pages) == 3
    assert all("(partial)" in p for p in pages)
    assert "Partial report" in pages[0]
    assert "t01 measured" in pages[0]
    assert "t02 measured" not in pages[0]
    assert "t02 measured" in pages[1]
    last = pages[-1]
    assert f"Interrupted at {doc['interrupted_at']}" in last
    assert "Trials that ran: t01 measured; t02 measured; t03 cut short (measured again on resume)" in last
    assert "Not started: t04" in last
    on_disk = load_doc(tmp_path / "tid")
    assert on_disk["interrupted_at"] == doc["interrupted_at"] is not None
    # Resumed to the end: the page is no longer partial.
    lab = FakeLab(speeds)
    settings = TuneSettings(
        space={"--x": (1, 2, 3, 4)}, baseline={"--x": 1}, reference_profile="", search="halving"
    )
    done, interrupted = await _run(on_disk, tmp_path / "tid", lab, settings, on_trial=on_trial)
    assert not interrupted
    assert done["interrupted_at"] is None
    assert done["finished_at"] is not None
    assert "(partial)" not in pages[-1]
    assert "Interrupted" not in pages[-1]
    assert f"Winner: <b>{done['winner']}</b>" in pages[-1]


async def test_a_record_whose_full_calibration_failed_is_no_bar_for_the_others(tmp_path: Path) -> None:
    # x=2 probes fastest, then its server dies in the full calibration: x=3, faster than the
    # baseline, must not be eliminated against a configuration that can no longer win.
    lab = FakeLab({1: [100.0], 2: [200.0], 3: [150.0]}, full_fails=frozenset({2}))
    doc = await _tune(tmp_path, lab, [1, 2, 3]).run()
    assert _status(doc) == {1: "measured", 2: "failed", 3: "measured"}
    assert doc["winner"] == "t03", doc["winner_reason"]
    eliminated = [t for t in doc["trials"] if t["status"] == "eliminated"]
    assert not eliminated


async def test_the_table_never_puts_probe_and_full_figures_in_one_column(tmp_path: Path) -> None:
    # The fake lab's full calibration reads twice its probe: a record's full figure is above
    # every probe, so one mixed column would show eliminated ones "slower" or "faster" at random.
    lab = FakeLab({1: [100.0], 2: [300.0], 3: [250.0], 4: [120.0]})
    lines: list[str] = []
    tune = _tune(tmp_path, lab, [1, 2, 3, 4])
    tune.say = lines.append
    doc = await tune.run()
    assert doc["ranked_by"] == "short"
    assert doc["probe_concurrency"] == 24
    text = format_table(doc)
    head, *rows = text.splitlines()[: 1 + len(doc["trials"])]
    cols = re.split(r"  +", head)
    assert cols[3:5] == ["probe@c24 tok/s ± spread", "full tok/s ± spread"]
    for t, row in zip(doc["trials"], rows, strict=True):
        cells = re.split(r"  +", row)
        probes = [r["throughput_tok_s"] for r in t["rounds"] if r["kind"] == "short"]
        fulls = [r["throughput_tok_s"] for r in t["rounds"] if r["kind"] == "full"]
        assert cells[3].split()[0] == f"{sum(probes) / len(probes):.1f}", row
        assert cells[4].split()[0] == (f"{sum(fulls) / len(fulls):.1f}" if fulls else "-"), row
        assert t["figures"]["short"]["throughput_tok_s"]["mean"] == pytest.approx(sum(probes) / len(probes))
        assert (t["figures"]["full"] is None) == (not fulls)
    # The ranking column: no eliminated configuration above the winner.
    win = next(t for t in doc["trials"] if t["id"] == doc["winner"])
    for t in doc["trials"]:
        if t["status"] == "eliminated":
            assert (
                t["figures"]["short"]["throughput_tok_s"]["mean"]
                < win["figures"]["short"]["throughput_tok_s"]["mean"]
            )
    # Every progress line names the measure of each figure it prints.
    for line in lines:
        if "tok/s" in line and ": measured" in line:
            assert re.fullmatch(
                rf"t\d\d: measured probe@c24 {_FIG} tok/s(?:, full {_FIG} tok/s)?",
                line,
            ), line
