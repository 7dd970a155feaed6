"""The engine driven in virtual time: the exact scheduler of the server, without HTTP or sleeping.

Test support, not in the wheel (tests/ and benchmarks/ import it as ``support.sim_virtual``).
Used to fit and check profiles (``benchmarks/sim_fidelity.py``) and to predict what a load will
do: one 30-second benchmark of the default profile replays in milliseconds. It calls the same
planning and apply code as the asyncio loop, so a fit here holds for the served simulator.
"""

from __future__ import annotations

from dataclasses import dataclass

from sglang_sentinel_sim.engine import Engine, Request
from sglang_sentinel_sim.profiles import Profile
from sglang_sentinel_sim.text import Script

__all__ = ["VirtualResult", "simulate"]


@dataclass(frozen=True, slots=True)
class VirtualResult:
    arrival: float
    first_token: float
    finish: float
    prompt_tokens: int
    output_tokens: int

    @property
    def e2e(self) -> float:
        return self.finish - self.arrival

    @property
    def ttft(self) -> float:
        return self.first_token - self.arrival


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def simulate(
    profile: Profile, requests: list[tuple[float, int, int]], *, seed: int = 0
) -> list[VirtualResult]:
    """Run ``(arrival_s, prompt_tokens, output_tokens)`` requests (``ignore_eos``) to completion.

    Times are server seconds from 0. Returns one result per request, in input order.
    """
    clock = _Clock()
    engine = Engine(profile, speed=1.0, seed=seed, clock=clock)
    order = sorted(range(len(requests)), key=lambda i: requests[i][0])
    reqs: list[Request | None] = [None] * len(requests)
    empty = Script([], 0, 1)
    nxt = 0
    t = 0.0
    while True:
        while nxt < len(order) and requests[order[nxt]][0] <= t:
            i = order[nxt]
            arrival, n_in, n_out = requests[i]
            clock.now = arrival
            req = Request(f"v{i}", n_in, n_out, empty, ignore_eos=True)
            engine.submit(req)
            reqs[i] = req
            nxt += 1
        if not engine.busy:
            if nxt >= len(order):
                break
            t = requests[order[nxt]][0]
            continue
        duration = engine._plan_and_cost()
        engine.fwd_start = t
        t += duration
        clock.now = t
        engine._apply(t)
    out: list[VirtualResult] = []
    for done in reqs:
        if done is None:  # pragma: no cover - every index is submitted above
            raise RuntimeError("request never submitted")
        out.append(
            VirtualResult(
                done.arrival, done.first_token_at, done.finished_at, done.prompt_tokens, done.generated
            )
        )
    return out
