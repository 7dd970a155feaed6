"""SGLang's torch profiler around a measured run (``sentinel bench --profile``), as bench_serving 0.5.23.

The calls, their moments and their bodies are bench_serving's (``sglang.benchmark.serving``
``async_request_profile``, ``_call_profile_pd`` and ``benchmark``):

- after the warm-up, before the first measured request: ``POST /start_profile`` with
  ``{"activities", "num_steps", "profile_by_stage", "profile_stages", "output_dir",
  "profile_prefix"}``; ``num_steps`` is ``--profile-num-steps`` (5 with ``--profile-by-stage``
  when not given); ``output_dir`` is ``--profile-output-dir`` (else ``$SGLANG_TORCH_PROFILER_DIR``,
  else /tmp) made absolute, plus a ``/<unix time>`` directory that the client creates (as
  bench_serving does: it matters when client and server share the disk); ``--profile-start-step``
  and ``--profile-steps`` are added as strings ``start_step`` and ``num_steps`` (which pydantic
  takes; ``--profile-steps`` wins over ``--profile-num-steps``);
- after the last response: ``POST /stop_profile`` (body ``{}``, plus ``start_step`` when given),
  unless ``--profile-steps`` is given (the server stops by itself), or, on one server,
  ``--profile-num-steps`` is;
- ``--pd-separated`` sends both calls to each ``--profile-prefill-url`` (or
  ``--profile-decode-url``) instead of the target, one after the other; without one it
  warns and profiles nothing.

Failures do not fail the run, as in bench_serving; it says nothing on one server, we log
``bench_profile_failed`` with the status and SGLang's answer (a server without the routes, a
profile already running, torch's refusal: SGLang answers those with a bare 500). The calls
carry ``--header`` and the API key to the target (bench_serving sends neither, so it is refused
by a server with a key); the PD worker URLs, other servers, get neither. Nothing is added to the
result JSON (bench_serving records none of these flags).
"""

from __future__ import annotations

import asyncio
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sglang_sentinel.load.spec import LoadSpec

__all__ = ["ACTIVITIES", "ProfilePlan", "Profiler"]

ACTIVITIES = ("CPU", "GPU", "CUDA_PROFILER", "XPU", "MEM")  # bench_serving's choices
_BY_STAGE_STEPS = 5  # bench_serving's num_steps for --profile-by-stage without --profile-num-steps
_ANSWER_MAX = 2000  # of SGLang's answer kept in the failure event


@dataclass(frozen=True, slots=True)
class ProfilePlan:
    activities: tuple[str, ...]
    start_step: int | None
    steps: int | None
    num_steps: int | None
    by_stage: bool
    stages: tuple[str, ...] | None
    output_dir: str | None
    prefix: str | None
    pd_separated: bool
    workers: tuple[tuple[str, str], ...]  # (bench_serving's label "Prefill-0", base URL)

    def start_body(self, output_dir: str) -> dict[str, Any]:
        num_steps = self.num_steps
        if self.by_stage and num_steps is None:
            num_steps = _BY_STAGE_STEPS
        body: dict[str, Any] = {
            "activities": list(self.activities),
            "num_steps": num_steps,
            "profile_by_stage": self.by_stage,
            "profile_stages": list(self.stages) if self.stages is not None else None,
            "output_dir": output_dir,
            "profile_prefix": self.prefix,
        }
        return self._steps(body)

    def stop_body(self) -> dict[str, Any]:
        return self._steps({})

    def _steps(self, body: dict[str, Any]) -> dict[str, Any]:
        # bench_serving adds these to both calls, as strings.
        if self.start_step is not None:
            body["start_step"] = str(self.start_step)
        if self.steps is not None:
            body["num_steps"] = str(self.steps)
        return body

    def stops(self) -> bool:
        """Whether bench_serving calls /stop_profile after the run."""
        if self.steps is not None:
            return False
        return self.pd_separated or self.num_steps is None

    def local_output_dir(self) -> Path:
        base = self.output_dir
        if base is None:
            base = os.environ.get("SGLANG_TORCH_PROFILER_DIR", "/tmp")
        return Path(os.path.abspath(os.path.normpath(base))) / str(time.time())


class Profiler:
    """The start and stop calls of one run (`sglang_sentinel.cli.bench` calls them around the load)."""

    def __init__(self, session: Any, spec: LoadSpec, plan: ProfilePlan) -> None:
        self.session = session
        self.spec = spec
        self.plan = plan
        self.started = False  # the start was sent (whatever the answer): the stop follows

    def _targets(self) -> list[tuple[str, str, dict[str, str]]]:
        from sglang_sentinel.load.session import auth_headers

        if self.plan.pd_separated:
            return [(label, url, {}) for label, url in self.plan.workers]
        return [("server", self.spec.base_url, auth_headers(self.spec))]

    async def start(self) -> None:
        from sglang_sentinel.log import get_logger

        self.started = True
        if self.plan.pd_separated and not self.plan.workers:
            get_logger(__name__).warning(
                "bench_profile_skipped",
                reason="--pd-separated needs --profile-prefill-url or --profile-decode-url",
            )
            return
        for label, url, headers in self._targets():
            local = self.plan.local_output_dir()
            try:
                await asyncio.to_thread(local.mkdir, parents=True, exist_ok=True)
            except OSError as exc:
                get_logger(__name__).warning(
                    "bench_profile_failed", call="start", worker=label, url=url,
                    error=f"cannot create {local}: {exc.strerror}",
                )  # fmt: skip
                continue
            await self._call(label, url, "/start_profile", self.plan.start_body(str(local)), headers)

    async def stop(self) -> None:
        if not self.started or not self.plan.stops():
            return
        for label, url, headers in self._targets():
            await self._call(label, url, "/stop_profile", self.plan.stop_body(), headers)

    async def _call(
        self, label: str, url: str, path: str, body: dict[str, Any], headers: dict[str, str]
    ) -> None:
        from sglang_sentinel.load.session import read_capped
        from sglang_sentinel.log import get_logger

        log = get_logger(__name__)
        call = path.strip("/").split("_")[0]
        try:
            # A stop exports the traces before it answers: the run's request timeout bounds it.
            async with asyncio.timeout(self.spec.request_timeout_s):
                async with self.session.post(url + path, json=body, headers=headers) as resp:
                    answer = await read_capped(resp, 1 << 20)
                    status, reason = resp.status, resp.reason or ""
        except Exception as exc:  # best effort, as in bench_serving: never fails the run
            log.warning(
                "bench_profile_failed", call=call, worker=label, url=url, error=str(exc) or type(exc).__name__
            )
            return
        if status != 200:
            text = answer.decode("utf-8", "replace").strip()[:_ANSWER_MAX]
            log.warning(
                "bench_profile_failed",
                call=call,
                worker=label,
                url=url,
                status=status,
                error=f"{reason}: {text}",
            )
            return
        if call == "start":
            log.info("bench_profile_started", worker=label, url=url, output_dir=body["output_dir"])
        else:
            log.info("bench_profile_stopped", worker=label, url=url)
