"""The real lab: one configuration's server life as a managed child of the supervisor.

Each life renders the trial's argv (the base launch as rendered for the detected SGLang version,
with the trial's flags applied), starts it through :class:`~sglang_sentinel.supervise.Supervisor` in
child mode (the parent-death wrapper and the pidfile come with it: a SIGKILLed tune's server
dies with it, and a leftover is reaped by the next start or :meth:`ServerLab.reap_leftover`),
waits for ready, then gates and measures (:mod:`~sglang_sentinel.tune.measure`), then stops the server.
The supervisor's own checks are quietened for the life (no canary loop, alerts instead of
restarts): a restart in the middle of a measurement would make it meaningless, so a server that
leaves ``ready`` fails the trial instead.
"""

from __future__ import annotations

import asyncio
import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx

from sglang_sentinel.calibrate.api import calibrate
from sglang_sentinel.calibrate.settings import CalibrationSettings
from sglang_sentinel.httpread import tls_context
from sglang_sentinel.netloc import url_host
from sglang_sentinel.schedule.settings import LoadProfileSettings
from sglang_sentinel.sglang.launch_facts import dsa_verdicts, launch_facts
from sglang_sentinel.supervise.launch import LaunchCommand, api_key_of, version_text
from sglang_sentinel.supervise.pidfile import PIDFILE, ServerPidfile
from sglang_sentinel.supervise.preflight import GpuReader
from sglang_sentinel.supervise.server_version import read_server_version
from sglang_sentinel.supervise.settings import ServerSettings
from sglang_sentinel.supervise.state import ServerState
from sglang_sentinel.supervise.supervisor import Supervisor
from sglang_sentinel.tune.driver import LifeResult
from sglang_sentinel.tune.gpu import GpuStateReader
from sglang_sentinel.tune.measure import (
    calibration_round,
    gate_reason,
    reference_round,
    run_gate,
    saturation_concurrency,
    tune_calibration,
)
from sglang_sentinel.tune.settings import TuneSettings
from sglang_sentinel.tune.snippet import winner_toml
from sglang_sentinel.tune.space import Flags, apply_flags
from sglang_sentinel.tune.state import now_iso

__all__ = ["ServerLab", "flag_aliases"]

_HISTORY = "supervisor-restarts.json"
# A round the load generator could not keep up with (the calibration stopped "client-bound":
# another job on the tune's host, a stalled event loop) measured the client, not the
# configuration. It is measured again in the same life, with other prompts, this many times in
# a life before the trial is given up: a configuration lost to a moment's stall of the client
# may be the fastest one, and the life (the server's start) is the expensive part.
CLIENT_BOUND_RETRIES = 2


def flag_aliases(
    base: LaunchCommand, names: Sequence[str]
) -> dict[str, tuple[tuple[str, ...], tuple[str, ...]]]:
    """Spellings of version-dependent SGLang flags (see :func:`~sglang_sentinel.tune.space.apply_flags`)."""
    if base.profile.kind != "sglang":
        return {}
    facts = launch_facts(version_text(base.sglang_version), base.profile.gpu_arch)
    out: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {}
    for name in names:
        if name == "--disable-cuda-graph":
            out[name] = (
                ("--disable-cuda-graph", "--cuda-graph-backend-decode", "--cuda-graph-backend-prefill"),
                tuple(facts.disable_cuda_graph_flags),
            )
        for old in ("--nsa-", "--dsa-"):
            if name.startswith(old):
                tail = name[len(old) :]
                out[name] = ((f"--nsa-{tail}", f"--dsa-{tail}"), (f"{facts.dsa_flag_prefix}-{tail}",))
    return out


def _dsa_of(base: LaunchCommand, flags: Flags) -> tuple[str, str, str]:
    prefill, decode, kv = base.dsa
    for name, value in flags.items():
        text = "" if isinstance(value, bool) else str(value)
        if name in ("--nsa-prefill-backend", "--dsa-prefill-backend"):
            prefill = text
        elif name in ("--nsa-decode-backend", "--dsa-decode-backend"):
            decode = text
        elif name == "--kv-cache-dtype":
            kv = text
    return prefill, decode, kv


class ServerLab:
    def __init__(
        self,
        server: ServerSettings,
        base: LaunchCommand,
        tune: TuneSettings,
        calibration: CalibrationSettings,
        *,
        directory: Path,
        reference: LoadProfileSettings | None,
        gpu_state: GpuStateReader | None = None,
        gpu_reader: GpuReader | None = None,
        gpu_arch: int | None = None,
        say: Callable[[str], None] = lambda line: None,
    ) -> None:
        """``directory``: the tune's own; the servers' pidfile and logs go to its ``server/``."""
        self.base = base
        self.tune = tune
        self.calibration = calibration
        self.reference = reference
        self.gpu_state = gpu_state
        self.gpu_reader = gpu_reader
        self.gpu_arch = gpu_arch
        self.say = say
        self.server_dir = directory / "server"
        checks = server.checks
        quiet = checks.model_copy(
            update={
                "canary": checks.canary.model_copy(update={"enabled": False}),
                "health": checks.health.model_copy(update={"action": "alert"}),
                "health_generate": checks.health_generate.model_copy(update={"action": "alert"}),
                "stall": checks.stall.model_copy(update={"action": "alert"}),
            }
        )
        self.server = server.model_copy(
            update={"checks": quiet, "restart": server.restart.model_copy(update={"max_restarts": 0})}
        )
        self.api_key = api_key_of(server, base.profile)
        self.base_url = f"http://{url_host(server.host)}:{server.port}"

    # ------------------------------------------------------------------ Lab
    def command_for(self, flags: Flags) -> LaunchCommand:
        argv = apply_flags(self.base.argv, flags, flag_aliases(self.base, list(flags)))
        return dataclasses.replace(self.base, argv=tuple(argv), dsa=_dsa_of(self.base, flags))

    def argv_for(self, flags: Flags) -> list[str]:
        return self.command_for(flags).redacted_argv()

    def skip_reason(self, flags: Flags) -> str | None:
        cmd = self.command_for(flags)
        if cmd.profile.kind != "sglang":
            return None
        uses_dsa = cmd.launch_row is not None or any(cmd.dsa[:2])
        arch = self.gpu_arch or cmd.profile.gpu_arch
        if not uses_dsa or not arch:
            return None
        verdicts = dsa_verdicts(
            version_text(cmd.sglang_version), arch, *cmd.dsa, glm=cmd.launch_row is not None
        )
        if not verdicts.bad:
            return None
        bad = verdicts.bad[0]
        prefill, decode, kv = verdicts.effective
        return (
            f"known bad on SM{arch} with SGLang {version_text(cmd.sglang_version) or 'unknown'}: {bad.key}: "
            f"{bad.what} (prefill {prefill}, decode {decode}, KV {kv}) [{bad.source}]"
        )

    def snippet(self, flags: Flags) -> str:
        return winner_toml(self.server.profile, self.base.profile, flags)

    async def reap_leftover(self) -> None:
        left = await ServerPidfile(self.server_dir / PIDFILE).reap(self.server.stop_timeout)
        if left is not None:
            self.say(f"stopped the server (pid {left.pid}) that the interrupted tune left running")

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
        t0 = time.monotonic()
        cmd = self.command_for(trial["flags"])
        trial["argv"] = cmd.redacted_argv()
        self.server_dir.mkdir(parents=True, exist_ok=True)
        # Each life starts with a clean crash-loop history: max_restarts = 0 means "first exit ends
        # the life", not "a life of yesterday's killed tune already used the allowance".
        (self.server_dir / _HISTORY).unlink(missing_ok=True)
        settings = self.server.model_copy(update={"log_file": self.server_dir / f"{trial['id']}.log"})
        sup = Supervisor(settings, state_dir=self.server_dir, command=cmd, gpu_reader=self.gpu_reader)
        trial["started_at"] = now_iso()
        result = LifeResult("failed", "not started")
        try:
            await sup.start()
            result = await self._serve(sup, trial, gate, kinds, checkpoint, t0, more, probe_concurrency)
        finally:
            await sup.stop()
            result.trial_s = round(time.monotonic() - t0, 3)
        return result

    async def _serve(
        self,
        sup: Supervisor,
        trial: dict[str, Any],
        gate: bool,
        kinds: Sequence[str],
        checkpoint: Callable[[], None],
        t0: float,
        more: Callable[[dict[str, Any]], Sequence[str]],
        probe_concurrency: int | None,
    ) -> LifeResult:
        limit = self.tune.ready_timeout or self.server.start_timeout
        try:
            state = await sup.wait_for_state(
                ServerState.READY, ServerState.FAILED, ServerState.RESTARTING, timeout_s=limit
            )
        except TimeoutError:
            return LifeResult("failed", f"not ready within {limit:g} s")
        if state is not ServerState.READY:
            crash = sup.last_crash
            failed = [f"{r.name}: {r.message}" for r in sup.preflight if r.status == "fail"]
            why = crash.detail if crash is not None else "; ".join(failed) or f"server {state.value}"
            if crash is not None and crash.lines:
                why += f"; last line: {crash.lines[-1].strip()[:300]}"
            return LifeResult("failed", f"did not start: {why}"[:600])
        trial["ready_s"] = round(time.monotonic() - t0, 3)
        headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else None
        tokens = 0
        async with httpx.AsyncClient(base_url=self.base_url, headers=headers, verify=tls_context()) as client:
            version, _ = await read_server_version(client)
            trial["server_version"] = version or version_text(self.base.sglang_version)
            if self.gpu_state is not None:
                trial["gpu"] = await asyncio.to_thread(self.gpu_state)
            checkpoint()
            if gate:
                t = self.tune
                correctness = await run_gate(
                    client, self.server.checks.canary, t.correctness_prompts, t.correctness_max_tokens
                )
                tokens += t.correctness_prompts * t.correctness_max_tokens  # an upper bound
                trial["correctness"] = correctness
                checkpoint()
                if not correctness["passed"]:
                    return LifeResult("rejected", gate_reason(correctness), tokens=tokens)
        epoch = sup.snapshot().epoch
        pending = list(kinds)
        client_bound = 0
        while pending:
            kind = pending.pop(0)
            # The n-th measurement of a kind in this life draws other prompts than the ones
            # before it: a server answering a repeat from its prefix cache would read as faster.
            repeat = sum(1 for r in trial["rounds"] if r.get("kind") == kind)
            measured = await self._measure(kind, probe_concurrency or saturation_concurrency(trial), repeat)
            measured["round"] = len(trial["rounds"])
            tokens += int(measured.get("tokens") or 0)
            snap = sup.snapshot()
            if snap.state is not ServerState.READY or snap.epoch != epoch:
                crash = sup.last_crash
                why = crash.detail if crash is not None else f"server {snap.state.value}"
                return LifeResult(
                    "failed", f"server left ready during the {kind} measurement: {why}", tokens=tokens
                )
            trial["rounds"].append(measured)
            checkpoint()
            if kind != "reference" and measured["throughput_tok_s"] is None:
                stop = measured["stop_reason"]
                if stop == "client-bound" and client_bound < CLIENT_BOUND_RETRIES:
                    client_bound += 1
                    self.say(
                        f"{trial['id']}: the {kind} round measured the load generator, not the server "
                        f"(client-bound); measuring it again ({client_bound} of {CLIENT_BOUND_RETRIES})"
                    )
                    pending.insert(0, kind)
                    continue
                times = f", {client_bound + 1} times in this life" if stop == "client-bound" else ""
                why = f"{kind} calibration measured nothing trustworthy ({stop}{times})"
                return LifeResult("failed", why, tokens=tokens)
            if not pending:
                pending = list(more(trial))
        return LifeResult("ok", tokens=tokens)

    async def _measure(self, kind: str, probe_concurrency: int | None, repeat: int) -> dict[str, Any]:
        if kind == "reference":
            assert self.reference is not None
            return await reference_round(
                self.tune.reference_profile, self.reference, self.base_url, self.api_key
            )
        t = self.tune
        cal = tune_calibration(
            self.calibration,
            kind,
            short_requests=t.short_requests,
            short_max_concurrency=t.short_max_concurrency,
            ttft_p99_s=t.slo.ttft_p99_s,
            tpot_p99_s=t.slo.tpot_p99_s,
            probe_concurrency=probe_concurrency if t.search == "race" else None,
            repeat=repeat,
        )
        result = await calibrate(cal, base_url=self.base_url, api_key=self.api_key or None)
        return calibration_round(kind, result)
