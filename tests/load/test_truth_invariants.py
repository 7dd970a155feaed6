"""What the load engine guarantees against the simulator's ground truth, request by request, for
every backend at low and at saturating load: exact token counts, and times that can only be
longer than the server's own (the start stamp is taken before the send; a token's stamp after
its bytes reached the client). Timing *tolerances* are the benchmark's business
(benchmarks/load_accuracy.py --scenarios backends): on a busy box they are not a guarantee."""

from __future__ import annotations

import math
from typing import Any

import pytest

from sglang_sentinel.load import ArrivalProcess, Backend, LoadSpec, RandomDataset, run_load
from support.peaks import guaranteed_peak

pytestmark = [pytest.mark.asyncio, pytest.mark.slow]

# The truth's times are Unix-second doubles (~1.7e9): their difference is exact to ~0.5 us.
_FLOAT_RESOLUTION_S = 2e-6


@pytest.mark.parametrize("backend", [Backend.SGLANG, Backend.OPENAI_COMPLETIONS, Backend.OPENAI_CHAT])
@pytest.mark.parametrize("load", ["low", "saturating"])
async def test_counts_exact_and_times_never_below_the_truth(
    sim_factory: Any, backend: Backend, load: str
) -> None:
    # 16 running slots: 48 requests at once queue at the server (saturating); Poisson at 20/s
    # against a server that finishes a 24-token request in ~0.1 s leaves it mostly idle (low).
    sim = sim_factory(
        "--skip-server-warmup", "--speed", "20", "--max-running-requests", "16", "--stream-interval", "1"
    )
    arrival = ArrivalProcess.BURST if load == "saturating" else ArrivalProcess.POISSON
    spec = LoadSpec(
        base_url=sim.base_url,
        backend=backend,
        dataset=RandomDataset(48, 24, 1.0),
        arrival=arrival,
        request_rate=20.0 if arrival == ArrivalProcess.POISSON else math.inf,
        num_requests=48,
        warmup_requests=0,
        seed=5,
    )
    result = await run_load(spec)
    m = result.metrics
    assert m.completed == 48, result.measured[0].error
    truth = {r["rid"]: r for r in sim.control("/requests")["requests"]}
    assert {r.rid for r in result.measured} <= truth.keys()
    for rec in result.measured:
        tr = truth[rec.rid]
        assert tr["status"] == "ok"
        assert tr["stream"] is True
        # Token counts: exact, whichever route reported them.
        assert rec.output_len == tr["completion_tokens"] == 24, (rec.rid, rec.output_len, tr)
        assert sum(rec.chunk_tokens) == tr["completion_tokens"], rec.rid
        if rec.prompt_tokens is not None:
            assert rec.prompt_tokens == tr["prompt_tokens"], rec.rid
        # Every event the simulator wrote with tokens is one the client counted, and no more
        # (merged steps included; 24 tokens stay inside the default profile's 48-token thinking
        # part, so no chat write holds a reasoning and a content event together).
        assert len(rec.chunk_times) == tr["token_events"], (rec.rid, len(rec.chunk_times), tr["token_events"])
        # Times: never below the server's own, measured from its socket.
        assert rec.ttft is not None
        assert rec.latency is not None
        assert rec.ttft >= tr["ttft_s"] - _FLOAT_RESOLUTION_S, (rec.rid, rec.ttft, tr["ttft_s"])
        assert rec.latency >= tr["e2e_s"] - _FLOAT_RESOLUTION_S, (rec.rid, rec.latency, tr["e2e_s"])
        assert rec.latency >= rec.ttft
        assert rec.chunk_times == sorted(rec.chunk_times)
    assert m.total_output_tokens == sum(truth[r.rid]["completion_tokens"] for r in result.measured)
    if load == "saturating":
        # A burst dispatches all 48 before any is served (no admission gate: each could be sent at
        # once), 16 at a time at the server: 48 in flight on an idle box (support/peaks.py).
        assert all(r.ready == r.planned == 0.0 for r in result.measured)
        spans = [(r.sent, r.end) for r in result.measured]
        assert guaranteed_peak(spans, 48) <= m.peak_in_flight <= 48, m.peak_in_flight
