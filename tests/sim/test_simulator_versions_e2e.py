"""The daemon's readers against the running simulator, in every SGLang version and launch variant.

For each variant the simulator is brought to a steady state (more requests than
``--max-running-requests``, outputs that never end, a Decode log line and a gauge refresh on every
step), then its engine is frozen: from then on the ground truth (the engine's running and waiting
requests, the decode tokens it produced) cannot move, and every reader must return exactly it:

- ``sglang_sentinel.sglang.series.server_total`` over the scraped ``sglang:*`` samples,
- ``sglang_sentinel.sglang.logparse.parse_line`` over the last ``Decode batch`` line,
- the stall probe's ``sglang_sentinel.supervise.probes.read_progress`` (decode counter + ``/v1/loads``),
- polite injection's ``sglang_sentinel.schedule.polite.ServerLoadReader`` (``/metrics`` and ``/v1/loads``).

Crash texts: each ``crash:text=...`` fault, run as a real ``python -m sglang_sentinel_sim`` process, is
classified by ``sglang_sentinel.supervise.classify.classify_exit`` from its exit status and log tail.
"""

from __future__ import annotations

import asyncio
import contextlib
import io
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import Any

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from sglang_sentinel.schedule.polite import ServerLoadReader
from sglang_sentinel.sglang.logparse import DecodeBatch, NanSanitized, parse_line
from sglang_sentinel.sglang.series import server_total
from sglang_sentinel.supervise.classify import classify_exit
from sglang_sentinel.supervise.probes import read_progress
from sglang_sentinel.supervise.runners import ExitInfo
from sglang_sentinel_sim import SimServer, serve
from sglang_sentinel_sim.testing import SimProcess
from support.waits import until

RUNNING_CAP = 4
SUBMITTED = 7  # 4 running, 3 waiting
WARMUP_DECODE_TOKENS = 7  # the 8-token warm-up request: its first token comes out of the prefill


@dataclass(frozen=True)
class Variant:
    name: str
    options: dict[str, Any]
    # Request priorities (None: the request carries none).
    priorities: tuple[int | None, ...] = (None,)


VARIANTS = [
    Variant("0.5.9", {"sglang_version": "0.5.9"}),
    Variant("0.5.23", {"sglang_version": "0.5.23"}),
    Variant("0.5.23-priority", {"sglang_version": "0.5.23", "enable_priority_scheduling": True}, (0, 1, 2)),
    Variant(
        "0.5.23-all-schedulers-tp8",
        {"sglang_version": "0.5.23", "enable_metrics_for_all_schedulers": True, "tp_size": 8},
    ),
    Variant("0.5.23-hisparse", {"sglang_version": "0.5.23", "enable_hisparse": True}),
]


async def _hold_stream(client: httpx.AsyncClient, priority: int | None, i: int) -> None:
    body: dict[str, Any] = {
        "text": f"request {i}",
        "sampling_params": {"max_new_tokens": 150_000, "ignore_eos": True},
        "stream": True,
    }
    if priority is not None:
        body["priority"] = priority
    async with client.stream("POST", "/generate", json=body) as resp:
        assert resp.status_code == 200
        async for _ in resp.aiter_bytes():
            pass


@contextlib.asynccontextmanager
async def _frozen_sim(variant: Variant) -> AsyncIterator[tuple[SimServer, io.StringIO]]:
    err = io.StringIO()
    async with (
        serve(
            speed=200,
            enable_metrics=True,
            decode_log_interval=1,
            max_running_requests=RUNNING_CAP,
            err=err,
            **variant.options,
        ) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=60) as client,
    ):
        tasks = [
            asyncio.create_task(_hold_stream(client, variant.priorities[i % len(variant.priorities)], i))
            for i in range(SUBMITTED)
        ]
        engine = sim.engine
        deadline = time.monotonic() + 30
        # Steady: the cap is reached, the rest waits, and at least two decode steps (each logging
        # and refreshing the gauges) ran since.
        while len(engine.running) < RUNNING_CAP or len(engine.waiting) < SUBMITTED - RUNNING_CAP:
            assert time.monotonic() < deadline, "the simulator never reached its steady state"
            await asyncio.sleep(0.01)
        steps = engine.stats.decode_steps
        while engine.stats.decode_steps < steps + 2:  # noqa: ASYNC110  (polling the engine's counter)
            await asyncio.sleep(0.01)
        engine.freeze(None)
        await asyncio.sleep(0.05)
        frozen_at = engine.stats.decode_steps
        try:
            yield sim, err
        finally:
            assert engine.stats.decode_steps == frozen_at, "the engine moved while frozen"
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)


def _samples(text: str, name: str) -> list[tuple[dict[str, str], float]]:
    out: list[tuple[dict[str, str], float]] = []
    for family in text_string_to_metric_families(text):
        out.extend((dict(s.labels), s.value) for s in family.samples if s.name == name)
    return out


@pytest.mark.parametrize("variant", VARIANTS, ids=[v.name for v in VARIANTS])
async def test_readers_return_the_ground_truth(variant: Variant) -> None:
    async with _frozen_sim(variant) as (sim, err):
        engine = sim.engine
        true_running = len(engine.running)
        true_waiting = len(engine.waiting)
        assert (true_running, true_waiting) == (RUNNING_CAP, SUBMITTED - RUNNING_CAP)
        true_decode = WARMUP_DECODE_TOKENS + sum(r.generated - 1 for r in engine.running)

        async with httpx.AsyncClient(base_url=sim.base_url, timeout=10) as client:
            text = (await client.get("/metrics")).text
            progress = await read_progress(client, timeout_s=10)
        running_series = _samples(text, "sglang:num_running_reqs")
        queue_series = _samples(text, "sglang:num_queue_reqs")
        decode_series = [
            (labels, v)
            for labels, v in _samples(text, "sglang:realtime_tokens_total")
            if labels.get("mode") == "decode"
        ]

        # The shape each variant is about (so the readers are tested on what they must cope with).
        if variant.options.get("enable_priority_scheduling"):
            # "None": the warm-up request has no priority (QueueCount.from_reqs counts str(None),
            # and a priority once seen keeps being written, at 0).
            assert {labels["priority"] for labels, _ in running_series} == {"", "None", "0", "1", "2"}
            # a naive sum counts every request twice
            assert sum(v for _, v in running_series) == 2 * true_running
        elif variant.options.get("enable_metrics_for_all_schedulers"):
            assert {labels["tp_rank"] for labels, _ in running_series} == {str(r) for r in range(8)}
            assert {labels["tp_rank"] for labels, _ in decode_series} == {str(r) for r in range(8)}
        else:
            assert len(running_series) == len(queue_series) == len(decode_series) == 1

        # series.server_total
        assert server_total(running_series) == true_running
        assert server_total(queue_series) == true_waiting
        assert server_total(decode_series) == true_decode

        # the stall probe's reader: decode counter from /metrics, running from /v1/loads
        assert progress.decode_tokens == true_decode
        assert progress.running == true_running
        expected_source = "loads_aggregate" if variant.options["sglang_version"] == "0.5.9" else "loads_ranks"
        assert progress.running_source == expected_source

        # polite injection's reader, both sources
        for source in ("metrics", "loads"):
            reader = ServerLoadReader(sim.base_url, source, timeout=10)
            try:
                load = await reader.read()
            finally:
                await reader.aclose()
            assert (load.running, load.queued) == (true_running, true_waiting), source

        # logparse over the last Decode line
        decodes = [e for e in map(parse_line, err.getvalue().splitlines()) if isinstance(e, DecodeBatch)]
        last = decodes[-1]
        assert (last.running_req, last.queue_req) == (true_running, true_waiting)
        assert last.extra == ()
        if variant.options.get("enable_hisparse"):
            gpu_tokens, gpu_usage, _, cpu_usage = sim.hisparse_pools()
            assert last.used_tokens is None or last.used_tokens == gpu_tokens
            assert last.gpu_token_usage == round(gpu_usage, 2)
            assert last.cpu_token_usage == round(cpu_usage, 2)
            assert last.token_usage == max(round(gpu_usage, 2), round(cpu_usage, 2))
        else:
            assert last.used_tokens == engine.kv_used
            assert last.token_usage == round(engine.token_usage, 2)


# ---- crash texts -------------------------------------------------------------------------------

CRASHES = [
    # (version, fault, expected exit status, expected restart reason, detail fragment)
    ("0.5.23", "crash:text=tokenizer", -9, "unknown", "tokenizer_exception"),
    ("0.5.9", "crash:text=tokenizer", -9, "unknown", "tokenizer_exception"),
    ("0.5.23", "crash:text=nan", -9, "nan_in_sampler", "nan_detected"),
    ("0.5.9", "crash:text=nan", -9, "nan_in_sampler", "nan_in_sampler"),
    ("0.5.23", "crash:phase=startup,text=died_init", 1, "killed", "SIGKILL"),
    ("0.5.9", "crash:phase=startup,text=died_init", 1, "unknown", "rank_dead"),
    ("0.5.23", "crash:text=subprocess", -9, "unknown", "segfault"),
    ("0.5.23", "crash", -9, "nan_in_sampler", "nan_in_sampler"),
]


@pytest.mark.parametrize(
    ("version", "fault", "status", "reason", "detail"), CRASHES, ids=[f"{v}-{f}" for v, f, *_ in CRASHES]
)
def test_crash_texts_are_classified(
    sim_factory: Callable[..., SimProcess], version: str, fault: str, status: int, reason: str, detail: str
) -> None:
    startup = "phase=startup" in fault
    sim = sim_factory("--sglang-version", version, "--fault", fault, wait_ready=False)
    returncode = sim.wait_exit(timeout=60)
    assert returncode == status, sim.stderr_text()[-2000:]
    tail = sim.stderr_text().splitlines()[-200:]
    crash = classify_exit(ExitInfo.from_returncode(returncode), tail, time.time())
    assert crash.reason == reason, crash.detail
    assert detail in crash.detail
    if startup:
        assert "The server is fired up and ready to roll!" not in sim.stderr_text()


async def test_nan_sanitized_warning_is_logged_once_and_serving_goes_on() -> None:
    err = io.StringIO()
    async with (
        serve(speed=200, err=err, faults=("nan_sanitized",)) as sim,
        httpx.AsyncClient(base_url=sim.base_url, timeout=30) as client,
    ):
        await until(lambda: "values were sanitized" in err.getvalue(), what="the sanitized-NaN warning")
        r = await client.post(
            "/generate", json={"text": "What is 2+2?", "sampling_params": {"max_new_tokens": 8}}
        )
        assert r.status_code == 200
        # armed again at run time: "Logged once; further occurrences are silent."
        sim.arm_fault(sim.faults.get("nan_sanitized") or _fault("nan_sanitized"))
        await asyncio.sleep(0.05)
        assert sim.status == "up"
    events = [parse_line(line) for line in err.getvalue().splitlines()]
    sanitized = [e for e in events if isinstance(e, NanSanitized)]
    assert len(sanitized) == 1
    assert sanitized[0].where == "sampler: next_token_logits"


def _fault(spec: str) -> Any:
    from sglang_sentinel_sim.faults import parse_fault_spec

    return parse_fault_spec(spec)
