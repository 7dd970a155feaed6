"""SGLang's torch-profiler control (``/start_profile``, ``/stop_profile``) as the TP schedulers run it.

The state machine of 0.5.9's ``scheduler_profiler_mixin.py`` and 0.5.23's
``scheduler_components/profiler_manager.py`` (the default, non-``SGLANG_PROFILE_V2`` path); "0.5.23"
below is every release from the one its ``profile.*`` row in ``versions.BEHAVIOURS`` names
(XPU 0.5.10, the caught double start 0.5.14, ``ProfileReq`` 0.5.15, ``+ 1`` 0.5.16, the MEM
prefix 0.5.17), "0.5.9" every release before it:

- a start with ``start_step`` or ``profile_by_stage`` only arms the profiler (it starts at that
  forward step, or at the first prefill / decode batch); "already in progress" refuses it;
- a plain start starts at once. Its "already in progress" check is computed and dropped (as in
  SGLang), so a second plain start reaches torch, which refuses a second profiler on the thread:
  0.5.23 returns that error, 0.5.9 does not catch it and the scheduler dies;
- ``num_steps`` stops it by itself: 0.5.9 at forward ``ct + num_steps``, 0.5.23 at ``ct + num_steps + 1``;
- a stop writes one trace per TP rank, ``[<prefix>-]<profile id>-TP-<rank>[-<stage>].trace.json.gz``
  (and a ``.pickle`` memory snapshot for ``MEM``) into the output directory, which defaults to
  ``$SGLANG_TORCH_PROFILER_DIR`` (else /tmp) of the server process.

No torch trace is recorded (this is a simulator): the files are valid, empty Chrome traces, so that
tools that look for them find them. ``merge_profiles``, ``profile_stages``, ``RPD`` and
``SGLANG_PROFILE_V2`` are accepted and have no effect.
"""

from __future__ import annotations

import gzip
import json
import os
import pickle
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from sglang_sentinel_sim.versions import has

if TYPE_CHECKING:
    from sglang_sentinel_sim.context import SimContext

__all__ = ["ProfileOutcome", "SimProfiler", "TorchDoubleStart"]

# torch's TORCH_CHECK in enableProfiler (profiler_kineto.cpp), raised by torch.profiler.profile.start.
TORCH_ALREADY_ENABLED = "Profiler is already enabled on this thread."
_TORCH_ACTIVITIES = {False: ("CPU", "GPU"), True: ("CPU", "GPU", "XPU")}  # by profile.xpu_activity


class TorchDoubleStart(RuntimeError):
    """Before profile.double_start_caught: torch's refusal escapes the scheduler (no try/except
    around start()), which dies."""


@dataclass(frozen=True, slots=True)
class ProfileOutcome:
    """SGLang's ProfileReqOutput: the HTTP route raises RuntimeError(message) when not success."""

    success: bool
    message: str


class SimProfiler:
    """One server's profiler state; the API routes and the engine observer drive it (one loop)."""

    def __init__(self, srv: SimContext) -> None:
        self.srv = srv
        self.in_progress = False
        self.torch_running = False
        self.mem = False
        self.output_dir = Path("/tmp")
        self.activities: list[str] = ["CPU", "GPU"]
        self.profile_id = ""
        self.prefix = ""
        self.by_stage = False
        self.start_ct: int | None = None
        self.target_ct: int | None = None
        self.prefill_ct: int | None = None
        self.decode_ct: int | None = None
        self.target_stage_ct: int | None = None
        self.files: list[Path] = []  # every file written, for tests and the control API

    # ---- the routes ---------------------------------------------------------------------------
    def start(self, req: dict[str, Any], forward_ct: int) -> ProfileOutcome:
        """``req``: the validated body (``sglang_sentinel_sim.routes_profile``)."""
        profile_id = req.get("profile_id") or str(time.time())  # a field of ProfileReq only
        configured = self._init(req, profile_id, forward_ct)
        if req.get("profile_by_stage") or req.get("start_step"):
            return configured
        return self._start()  # the plain path drops _init's answer, as SGLang does

    def stop(self) -> ProfileOutcome:
        return self._stop()

    # ---- the scheduler's per-batch predicate (called after forward_ct was counted) -------------
    def on_batch(self, forward_ct: int, prefill: bool) -> None:
        if not (self.by_stage or self.target_ct or self.start_ct):
            return  # nothing armed (the usual case: this runs once per forward)
        try:
            self._predicate(forward_ct, prefill)
        except TorchDoubleStart:
            self.srv.crash("profiler")

    def _predicate(self, forward_ct: int, prefill: bool) -> None:
        if self.by_stage:
            if self.prefill_ct is None or self.decode_ct is None or self.target_stage_ct is None:
                return
            if prefill:
                if self.prefill_ct == 0:
                    self._start("EXTEND")
                self.prefill_ct += 1
                if self.prefill_ct > self.target_stage_ct and self.in_progress:
                    self._stop("EXTEND")
            else:
                if self.decode_ct == 0:
                    if self.in_progress:
                        self._stop("EXTEND")  # a prefill capture must not absorb decode steps
                    self._start("DECODE")
                self.decode_ct += 1
                if self.decode_ct > self.target_stage_ct and self.in_progress:
                    self._stop("DECODE")
            return
        if self.target_ct and self.target_ct <= forward_ct:
            self._stop()
        if self.start_ct and self.start_ct == forward_ct:
            self._start()

    # ---- SGLang's _init_profile / _start_profile / _stop_profile -------------------------------
    def _init(self, req: dict[str, Any], profile_id: str, forward_ct: int) -> ProfileOutcome:
        if self.in_progress:
            return ProfileOutcome(False, "Profiling is already in progress. Call /stop_profile first.")
        self.by_stage = bool(req.get("profile_by_stage"))
        output_dir = req.get("output_dir")
        if output_dir is None:
            output_dir = os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
        activities = req.get("activities")
        self.output_dir = Path(output_dir).expanduser()
        self.activities = list(activities) if activities is not None else ["CPU", "GPU"]
        self.profile_id = profile_id
        self.prefix = req.get("profile_prefix") or ""
        start_step: int | None = req.get("start_step")
        num_steps: int | None = req.get("num_steps")
        if start_step:
            self.start_ct = max(start_step, forward_ct + 1)
        if num_steps:
            if self.by_stage:
                self.prefill_ct = self.decode_ct = 0
                self.target_stage_ct = num_steps
            elif start_step and self.start_ct is not None:
                self.target_ct = self.start_ct + num_steps
            else:
                extra = 1 if has("profile.num_steps_plus_one", self.srv.version) else 0
                self.target_ct = forward_ct + num_steps + extra
        else:
            self.target_ct = None
        return ProfileOutcome(True, "Succeeded")

    def _start(self, stage: str | None = None) -> ProfileOutcome:
        log = self.srv.log
        stage_str = f" for {stage}" if stage else ""
        log.all_ranks(
            f"Profiling starts{stage_str}. Traces will be saved to: {self.output_dir} "
            f"(with profile id: {self.profile_id})"
        )
        version = self.srv.version
        if any(a in _TORCH_ACTIVITIES[has("profile.xpu_activity", version)] for a in self.activities):
            if self.torch_running:
                if not has("profile.double_start_caught", version):
                    raise TorchDoubleStart(TORCH_ALREADY_ENABLED)
                return ProfileOutcome(False, TORCH_ALREADY_ENABLED)
            self.torch_running = True
            self.in_progress = True
        if "MEM" in self.activities:
            self.mem = True
            self.in_progress = True
        if "CUDA_PROFILER" in self.activities:
            self.in_progress = True
        return ProfileOutcome(True, "Succeeded")

    def _stop(self, stage: str | None = None) -> ProfileOutcome:
        if not self.in_progress:
            return ProfileOutcome(False, "Profiling is not in progress. Call /start_profile first.")
        log = self.srv.log
        prefix = self.prefix + "-" if self.prefix else ""
        suffix = f"-{stage}" if stage else ""
        log.all_ranks("Stop profiling" + suffix + "...")
        try:
            self.output_dir.mkdir(parents=True, exist_ok=True)
            for rank in range(self.srv.profile.tp_size):
                if self.torch_running:
                    name = f"{prefix}{self.profile_id}-TP-{rank}{suffix}.trace.json.gz"
                    self._write(name, gzip.compress(json.dumps(_placeholder_trace(rank)).encode()))
                if self.mem:
                    mem_prefix = prefix if has("profile.mem_prefix", self.srv.version) else ""
                    name = f"{mem_prefix}{time.time()}-TP-{rank}-memory{suffix}.pickle"
                    self._write(name, pickle.dumps({"segments": [], "device_traces": [[]]}))
        except OSError as exc:
            # SGLang's scheduler would die on this; the simulator only refuses the stop.
            self._reset()
            return ProfileOutcome(False, f"cannot write the trace into {self.output_dir}: {exc.strerror}")
        log.all_ranks(f"Profiling done. Traces are saved to: {self.output_dir}")
        self._reset()
        return ProfileOutcome(True, "Succeeded.")

    def _write(self, name: str, data: bytes) -> None:
        path = self.output_dir / name
        path.write_bytes(data)
        self.files.append(path)

    def _reset(self) -> None:
        self.torch_running = False
        self.mem = False
        self.in_progress = False
        self.start_ct = None


def _placeholder_trace(rank: int) -> dict[str, Any]:
    return {
        "schemaVersion": 1,
        "traceEvents": [],
        "displayTimeUnit": "ms",
        "otherData": {"note": "sentinel sim: placeholder, no torch trace was recorded", "tp_rank": rank},
    }
