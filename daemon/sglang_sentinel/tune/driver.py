"""The tune's loop: screen every configuration, halve, measure the finalists, pick honestly.

Driven by the document alone (``progress``: stage, round, queue, the life in progress), so a
resumed tune continues where the killed one stopped: a trial whose server life was interrupted
goes back to what it was before that life (its partial rounds dropped) and is measured again;
every finished life stays. One server life at a time (:class:`Lab`): start, correctness gate on
the first life of a configuration, the measurements of the stage, stop.

Stages: ``screen`` (gate + short calibration, every configuration, baseline first; preflight's
known-bad ones ``skipped``; with ``search = "race"`` a configuration whose short figure beats
the best one so far goes on to the full calibration in the same life, repeated there while within
noise of the best other full figure, then the reference profile; any other is eliminated; the race
ends after the screen), ``halving`` (``search = "halving"`` only, see
:mod:`~sglang_sentinel.tune.halving`), ``final`` (halving: full calibration + reference profile for the
last few, started again while the best two are within each other's spread, up to ``repeats``),
``done``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

from sglang_sentinel.tune.compare import Spread, judge, spread_of
from sglang_sentinel.tune.figures import figures_of, measure_name
from sglang_sentinel.tune.halving import halve, pareto, summarize, throughput_of
from sglang_sentinel.tune.measure import saturation_concurrency
from sglang_sentinel.tune.settings import TuneSettings
from sglang_sentinel.tune.space import Flags, flag_label
from sglang_sentinel.tune.state import SCHEMA, now_iso, save_doc

__all__ = ["Lab", "LifeResult", "Tune", "new_doc"]

Outcome = Literal["ok", "failed", "rejected"]


@dataclass
class LifeResult:
    outcome: Outcome
    reason: str | None = None
    trial_s: float = 0.0
    tokens: int = 0
    notes: list[str] = field(default_factory=list)


class Lab(Protocol):
    """Where configurations run: the real one starts servers (trial.py), unit tests fake it."""

    def skip_reason(self, flags: Flags) -> str | None:
        """Why preflight refuses this configuration before any start (None: it may run)."""
        ...

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
        """One server life: fills ``trial``'s started_at/ready_s/server_version/gpu/correctness and
        appends one round per measurement, calling ``checkpoint()`` after each phase. When the
        ``kinds`` are done, ``more(trial)`` may ask for further measurements in the same life.
        A ``short`` measurement runs at ``probe_concurrency`` (else at the concurrency where this
        trial's own full calibration saturated, else the short ramp)."""
        ...

    async def reap_leftover(self) -> None:
        """Stop a server that a killed tune left running (before the first life of a resumed tune)."""
        ...

    def snippet(self, flags: Flags) -> str:
        """The winning launch profile as TOML to paste into the config."""
        ...


def new_doc(
    tune_id: str,
    settings: TuneSettings,
    *,
    space: dict[str, list[Any]],
    configs: Sequence[Flags],
    argvs: Sequence[Sequence[str]],
    base_argv: Sequence[str],
    sglang_version: str | None,
    fp: str,
) -> dict[str, Any]:
    trials = []
    for i, (flags, argv) in enumerate(zip(configs, argvs, strict=True)):
        trials.append(
            {
                "id": f"t{i + 1:02d}",
                "label": flag_label(flags),
                "flags": dict(flags),
                "argv": list(argv),
                "status": "pending",
                "reason": None,
                "started_at": None,
                "ready_s": None,
                "trial_s": None,
                "starts": 0,
                "server_version": None,
                "gpu": None,
                "correctness": None,
                "rounds": [],
                "summary": None,
                "figures": figures_of([]),
            }
        )
    slo = settings.slo
    return {
        "schema": SCHEMA,
        "tune_id": tune_id,
        "started_at": now_iso(),
        "finished_at": None,
        "sglang_version": sglang_version,
        "base_argv": list(base_argv),
        "space": space,
        "budget": {
            "time_s": settings.budget_time_s,
            "tokens": settings.budget_tokens,
            "spent_time_s": 0.0,
            "spent_tokens": 0,
        },
        "slo": {"ttft_p99_s": slo.ttft_p99_s, "tpot_p99_s": slo.tpot_p99_s},
        "baseline": trials[0]["id"] if trials else None,
        "winner": None,
        "winner_reason": None,
        "winner_toml": None,
        "stop_reason": None,
        "interrupted_at": None,
        "pareto": [],
        # Which measure the verdict compares, and where the race's probes ran (figures.py).
        "search": settings.search,
        "ranked_by": "short" if settings.search == "race" else "full",
        "probe_concurrency": None,
        "fingerprint": fp,
        "progress": {"stage": "screen", "round": 0, "queue": [t["id"] for t in trials], "current": None},
        "trials": trials,
    }


class Tune:
    def __init__(
        self,
        doc: dict[str, Any],
        directory: Path,
        lab: Lab,
        settings: TuneSettings,
        *,
        say: Callable[[str], None] = lambda line: None,
        on_trial: Callable[[dict[str, Any]], None] = lambda doc: None,
    ) -> None:
        self.doc = doc
        self.directory = directory
        self.lab = lab
        self.settings = settings
        self.say = say
        #: Called with the document after every finished server life and at the end (the report
        #: and its JSON are rewritten there, so a killed tune keeps them up to its last trial).
        self.on_trial = on_trial
        self._by_id = {t["id"]: t for t in doc["trials"]}

    def save(self) -> None:
        save_doc(self.directory, self.doc)

    # ------------------------------------------------------------------ the loop
    async def run(self) -> dict[str, Any]:
        self._recover()
        if self.doc["finished_at"] is not None:
            return self.doc
        await self.lab.reap_leftover()
        self.doc["stop_reason"] = None  # a budget that stopped an earlier run may have been raised
        self.doc["interrupted_at"] = None  # an interrupted run goes on now
        progress = self.doc["progress"]
        while progress["stage"] != "done":
            if not progress["queue"]:
                self._advance()
                self.save()
                continue
            why = self._budget_exhausted()
            if why is not None:
                self.doc["stop_reason"] = why
                self.say(f"stopping: {why}")
                break
            tid = progress["queue"][0]
            await self._one_life(self._by_id[tid], progress["stage"])
            progress["queue"].pop(0)
            self.save()
            self.on_trial(self.doc)
        self._finish()
        self.save()
        self.on_trial(self.doc)
        return self.doc

    def _recover(self) -> None:
        """A life interrupted by a kill: back to the trial as it was before it (see the docstring)."""
        current = self.doc["progress"].get("current")
        if not current:
            return
        trial = self._by_id.get(current["id"])
        if trial is not None:
            del trial["rounds"][current["rounds"] :]
            trial["status"] = current["status"]
            if current.get("gate"):
                trial["correctness"] = None
            trial["summary"] = summarize(trial["rounds"])
            trial["figures"] = figures_of(trial["rounds"])
            self.say(f"{trial['id']}: its interrupted server life is measured again")
        self.doc["progress"]["current"] = None
        self.save()

    def _budget_exhausted(self) -> str | None:
        b = self.doc["budget"]
        if b["time_s"] is not None and b["spent_time_s"] >= b["time_s"]:
            return f"time budget spent ({b['spent_time_s']:.0f} of {b['time_s']:.0f} trial seconds)"
        if b["tokens"] is not None and b["spent_tokens"] >= b["tokens"]:
            return f"token budget spent ({b['spent_tokens']} of {b['tokens']} tokens)"
        return None

    async def _one_life(self, trial: dict[str, Any], stage: str) -> None:
        if stage == "screen":
            skip = self.lab.skip_reason(trial["flags"])
            if skip is not None:
                trial["status"], trial["reason"] = "skipped", skip
                self.say(f"{trial['id']} {trial['label']}: skipped: {skip}")
                return
        gate = trial["correctness"] is None
        has_full = any(r["kind"] == "full" for r in trial["rounds"])
        if stage == "final":
            kinds: list[str] = (
                ["full"] if has_full or not self.settings.reference_profile else ["full", "reference"]
            )
        elif self._racing(stage) and self._probe_anchor() is None:
            # The first configuration measured gets its full calibration first: where it
            # saturates is the concurrency every other configuration's probe runs at.
            kinds = ["full"]
        else:
            kinds = ["short"]
        progress = self.doc["progress"]
        progress["current"] = {
            "id": trial["id"],
            "rounds": len(trial["rounds"]),
            "status": trial["status"],
            "gate": gate,
        }
        trial["status"] = "running"
        trial["starts"] += 1
        self.save()
        self.say(f"{trial['id']} {trial['label']}: starting ({stage}: {', '.join(kinds)})")
        result = await self.lab.life(
            trial,
            gate=gate,
            kinds=kinds,
            checkpoint=self.save,
            more=lambda t: self._more(t, stage),
            probe_concurrency=self._probe_anchor() if self._racing(stage) else None,
        )
        budget = self.doc["budget"]
        budget["spent_time_s"] = round(budget["spent_time_s"] + result.trial_s, 3)
        budget["spent_tokens"] += result.tokens
        trial["trial_s"] = round((trial["trial_s"] or 0.0) + result.trial_s, 3)
        if result.outcome == "ok":
            trial["status"], trial["reason"] = "measured", None
        else:
            trial["status"], trial["reason"] = result.outcome, result.reason
        trial["summary"] = summarize(trial["rounds"])
        trial["figures"] = figures_of(trial["rounds"])
        if self.settings.search == "race":
            self.doc["probe_concurrency"] = self._probe_anchor()
        if self._racing(stage) and trial["status"] == "measured" and not _has(trial, "full"):
            trial["status"], trial["reason"] = "eliminated", self._race_verdict(trial)[1]
        progress["current"] = None
        self.say(f"{trial['id']}: {trial['status']} {self._figures_text(trial)}")

    def _figures_text(self, trial: dict[str, Any]) -> str:
        """Each measure named, the one the verdict ranks by first: never a bare figure that reads
        as comparable with another trial's figure of the other measure."""
        first = self.doc.get("ranked_by", "full")
        shown = []
        for kind in (first, *(k for k in ("short", "full") if k != first)):
            s = (trial.get("figures") or {}).get(kind)
            if s:
                shown.append(
                    f"{measure_name(self.doc, kind)} {Spread.from_dict(s['throughput_tok_s']).text()} tok/s"
                )
        if not shown or trial["status"] == "eliminated":
            return trial["reason"] or ""  # an elimination's reason names both probes
        return ", ".join(shown)

    def _racing(self, stage: str) -> bool:
        return stage == "screen" and self.settings.search == "race"

    def _race_verdict(self, trial: dict[str, Any]) -> tuple[bool, str]:
        """(contender, why not): is the short measurement the best short one so far?

        Strictly above the best so far (a new record), not "within its spread": a server life is
        the expensive part of a tune, and a band this wide (one short measurement borrows +-5 %)
        would send most configurations of a space that differ by a few percent to the full
        calibration (benchmarks/tune_cost.py measured 5 of 10). The fastest configuration is
        always a record when it is measured, so it always gets its full calibration; the ones
        that stayed within noise of the winner without being records are named in the verdict."""
        own = _short(trial)
        found = self._best_other_probe(trial)
        if own is None or found is None:
            return True, ""
        best, best_s = found
        if own.mean > best_s.mean:
            return True, ""
        beyond = "beyond the spread" if own.high < best_s.low else "within the spread"
        return False, (
            f"screen: probe output throughput {own.text()} tok/s below {best['id']}'s probe "
            f"{best_s.text()}, the best so far ({beyond}; no full calibration)"
        )

    def _more(self, trial: dict[str, Any], stage: str) -> list[str]:
        """Race: what else this life measures, without a restart. The first configuration's probe
        after its full calibration; a probe within the spread of the best probe so far is
        repeated (up to ``repeats``, other prompts each time) before it decides; a record goes on
        to the full calibration (knee, SLO capacity), then the reference profile."""
        if not self._racing(stage):
            return []
        if not _has(trial, "short"):
            # The first configuration: its probe, at its own saturation concurrency, comparable
            # with everyone else's.
            return ["short"] if _has(trial, "full") else []
        if not _has(trial, "full"):
            if self._probe_needs_repeat(trial):
                return ["short"]
            return ["full"] if self._race_verdict(trial)[0] else []
        if self.settings.reference_profile and not any(r.get("kind") == "reference" for r in trial["rounds"]):
            return ["reference"]
        return []

    def _probe_needs_repeat(self, trial: dict[str, Any]) -> bool:
        """Another probe in this life: fewer than ``repeats`` so far, not clearly below the best
        probe so far, and not clearly above it either (within each other's spread)."""
        shorts = sum(1 for r in trial["rounds"] if r.get("kind") == "short" and r.get("throughput_tok_s"))
        if shorts >= self.settings.repeats:
            return False
        own = _short(trial)
        found = self._best_other_probe(trial)
        if own is None or found is None:
            return False
        best, best_s = found
        if own.high < best_s.low:
            return False  # clearly slower: eliminated without spending more on it
        verdict = judge(trial["id"], own, best["id"], best_s)
        if not verdict.significant:
            self.say(f"{trial['id']}: probe within noise of {best['id']}: probing again in the same life")
        return not verdict.significant

    def _best_other_probe(self, trial: dict[str, Any]) -> tuple[dict[str, Any], Spread] | None:
        """The configuration with the best probe (short) mean so far, other than ``trial``, among
        those that can still win (``measured``): a record whose full calibration then failed
        keeps its probe in the document, and a configuration eliminated against it would be
        out although faster than the winner. (An eliminated one's probe is below a measured one's,
        so leaving them out changes nothing else.)"""
        probes = [
            (t, sp)
            for t in self.doc["trials"]
            if t is not trial and t["status"] == "measured" and (sp := _short(t)) is not None
        ]
        return max(probes, key=lambda p: p[1].mean, default=None)

    def _figure(self, trial: dict[str, Any]) -> Spread | None:
        """The figure configurations are compared on: the race's probes (same concurrency and
        method for all, repeated where close), halving's summary (full calibrations)."""
        if self.settings.search == "race" and self._probe_anchor() is not None:
            return _short(trial)
        return throughput_of(trial)

    def _probe_anchor(self) -> int | None:
        """The concurrency of the race's probes: where the first full calibration saturated."""
        for t in self.doc["trials"]:
            c = saturation_concurrency(t)
            if c is not None:
                return c
        return None

    def _survivors(self) -> list[dict[str, Any]]:
        return [t for t in self.doc["trials"] if t["status"] == "measured"]

    def _advance(self) -> None:
        """The queue of the current stage is empty: decide the next stage and its queue."""
        s, progress = self.settings, self.doc["progress"]
        stage = progress["stage"]
        survivors = self._survivors()
        if stage == "screen" and s.search == "race":
            # Every life is done: the records had their full calibrations (and repeats within
            # noise) in their own lives; no server is started again.
            progress.update(stage="done", queue=[])
            return
        if stage in ("screen", "halving"):
            if len(survivors) > s.finalists:
                kept, dropped = halve(survivors, s.halving_factor, s.finalists, progress["round"])
                for tid, why in dropped.items():
                    self._by_id[tid]["status"], self._by_id[tid]["reason"] = "eliminated", why
                    self.say(f"{tid}: eliminated: {why}")
                survivors = [self._by_id[tid] for tid in kept]
            if len(survivors) > s.max_full:
                progress.update(
                    stage="halving", round=progress["round"] + 1, queue=[t["id"] for t in survivors]
                )
            else:
                progress.update(stage="final", queue=[t["id"] for t in survivors])
            if not survivors:
                progress.update(stage="done", queue=[])
            return
        # final: repeat while the best two are within noise and repeats are left
        ranked = sorted(survivors, key=lambda t: -_mean(t))
        if len(ranked) >= 2:
            a, b = _in_order(ranked[0], ranked[1])
            ta, tb = throughput_of(a), throughput_of(b)
            if ta is not None and tb is not None:
                verdict = judge(a["id"], ta, b["id"], tb, preferred=self.doc["baseline"])
                short = [t["id"] for t in (a, b) if (throughput_of(t) or ta).n < s.repeats]
                if not verdict.significant and short:
                    self.say(f"within noise: repeating {', '.join(short)}")
                    progress.update(queue=short)
                    return
        progress.update(stage="done", queue=[])

    def _finish(self) -> None:
        doc = self.doc
        figure = self._figure
        measured = sorted(
            (t for t in doc["trials"] if t["status"] == "measured" and figure(t) is not None),
            key=lambda t: -(figure(t) or _NONE).mean,
        )
        doc["pareto"] = pareto(doc["trials"], doc.get("ranked_by"))
        if self.doc["progress"]["stage"] == "done":
            doc["finished_at"] = now_iso()
        if not measured:
            rejected = [t for t in doc["trials"] if t["status"] in ("rejected", "failed", "skipped")]
            doc["winner"], doc["winner_toml"] = None, None
            doc["winner_reason"] = doc["stop_reason"] or (
                f"no configuration answered correctly and was measured ({len(rejected)} rejected, failed "
                "or skipped)"
            )
            return
        best = measured[0]
        reason: str
        if len(measured) == 1:
            others = len(doc["trials"]) - 1
            reason = f"{best['id']} is the only configuration measured to the end ({others} others rejected, "
            reason += "failed, skipped or eliminated)"
        else:
            a, b = _in_order(measured[0], measured[1])
            ta, tb = figure(a), figure(b)
            assert ta is not None
            assert tb is not None
            verdict = judge(a["id"], ta, b["id"], tb, preferred=doc["baseline"])
            best = self._by_id[verdict.better]
            reason = verdict.reason
            anchor = self._probe_anchor()
            if self.settings.search == "race" and anchor is not None:
                # The race compares its probes: one method, one concurrency, repeated in the life.
                reason += f" (the race's probes at concurrency {anchor})"
        reason += _close_calls(doc["trials"], best)
        if doc["stop_reason"]:
            reason += f" (tune stopped early: {doc['stop_reason']})"
        doc["winner"], doc["winner_reason"] = best["id"], reason
        doc["winner_toml"] = self.lab.snippet(best["flags"])


def _close_calls(trials: Sequence[dict[str, Any]], best: dict[str, Any]) -> str:
    """Eliminated configurations whose short figure overlapped the winner's: the verdict names
    them (the winner beat them on a single short measurement, not beyond its spread)."""
    won = _short(best)
    if won is None:
        return ""
    close = [
        t["id"]
        for t in trials
        if t["status"] == "eliminated" and (own := _short(t)) is not None and own.high >= won.low
    ]
    if not close:
        return ""
    return f"; within the spread of {best['id']}'s probe, not fully calibrated: {', '.join(close)}"


_NONE = Spread(-math.inf, -math.inf, -math.inf, 0)


def _mean(trial: dict[str, Any]) -> float:
    tp = throughput_of(trial)
    return tp.mean if tp is not None else -math.inf


def _in_order(a: dict[str, Any], b: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """The two in trial order: within noise the one measured first (the cheaper default) is kept."""
    return (a, b) if a["id"] <= b["id"] else (b, a)


def _has(trial: dict[str, Any], kind: str) -> bool:
    return any(r.get("kind") == kind and r.get("throughput_tok_s") is not None for r in trial["rounds"])


def _short(trial: dict[str, Any]) -> Spread | None:
    return spread_of(
        [
            float(r["throughput_tok_s"])
            for r in trial["rounds"]
            if r.get("kind") == "short" and r.get("throughput_tok_s") is not None
        ]
    )
