"""Time to detect and recover from each simulator fault, with the DEFAULT check settings.

    .venv/bin/python benchmarks/supervise_recovery.py [--speed 100]

The supervisor runs ``sentinel sim --speed S`` as its child with every check interval, timeout,
stall threshold and backoff of the default ``[server]`` configuration divided by S, so the
simulated deployment and the supervisor run S times faster together. Each fault is injected
through the sim's control API (or, for a port held by another process, before the start);
the table shows which restart reason was recorded, the time from injection to the ``restarting``
state (detection) in real seconds and converted back to deployment seconds (× S), and the time
until ``ready`` again (real seconds: dominated by the simulator's process start-up, which does not
scale — a real GLM-5 start takes minutes).

What this shows: every fault is caught by the check meant for it, and well before SGLang's own
300-450 s watchdog. The machine is shared and noisy: detection is quantised by check intervals,
so expect run-to-run differences of about one interval.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import socket
import time
from typing import Any

import httpx

from sglang_sentinel.supervise import ServerState, Supervisor
from sglang_sentinel.supervise.settings import ServerSettings

SPECS = {
    "crash": "crash",
    "oom": "oom:usage=0",
    "hang": "hang:watchdog=0",
    "stall": "stall:duration=100000",
    "garbage": "garbage",
    "503 storm": "http_503",
}


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scaled_settings(speed: float, port: int, control_port: int) -> ServerSettings:
    d = ServerSettings()
    c = d.checks

    def check(x: Any, **extra: Any) -> dict[str, Any]:
        out = {"interval": x.interval / speed, "timeout": x.timeout / speed, "failures": x.failures, **extra}
        if x.retry_interval is not None:
            out["retry_interval"] = x.retry_interval / speed
        return out

    return ServerSettings.model_validate(
        {
            "port": port,
            "profile": "bench",
            "profiles": {
                "bench": {
                    "kind": "sim",
                    "sim_speed": speed,
                    "extra_args": ["--control-port", str(control_port), "--lifetime", "600"],
                }
            },
            "startup_poll_interval": d.startup_poll_interval / speed,
            "stop_timeout": max(d.stop_timeout / speed, 2.0),
            "restart": {
                "backoff_initial": d.restart.backoff_initial / speed,
                "backoff_max": d.restart.backoff_max / speed,
                "max_restarts": 100,
            },
            "checks": {
                "health": check(c.health),
                "health_generate": check(c.health_generate),
                "stall": check(c.stall, stall_after=c.stall.stall_after / speed),
                "canary": check(c.canary),
            },
        }
    )


async def one(speed: float, fault: str) -> tuple[str, str, float, float]:
    port, control_port = free_port(), free_port()
    sup = Supervisor(scaled_settings(speed, port, control_port))
    blocker: socket.socket | None = None
    load: list[asyncio.Task[Any]] = []
    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}")
    try:
        if fault == "port taken":
            blocker = socket.socket()
            blocker.bind(("127.0.0.1", port))
            blocker.listen()
            t0 = time.monotonic()
            await sup.start()
            await sup.wait_for_state(ServerState.RESTARTING, timeout_s=60)
            detect = time.monotonic() - t0
            blocker.close()
        else:
            await sup.start()
            await sup.wait_for_state(ServerState.READY, timeout_s=60)
            await asyncio.sleep(0.5)
            if fault == "stall":
                body = {
                    "text": "Tell me a long story.",
                    "sampling_params": {"max_new_tokens": 8000, "ignore_eos": True},
                }
                load = [
                    asyncio.create_task(client.post("/generate", json=body, timeout=60)) for _ in range(4)
                ]
                await asyncio.sleep(0.3)
            t0 = time.monotonic()
            if fault == "kill -9":
                pid = sup._runner.pid if sup._runner else None
                assert pid is not None
                os.kill(pid, signal.SIGKILL)
            else:
                spec = SPECS[fault]
                resp = await client.post(f"http://127.0.0.1:{control_port}/faults", json={"spec": spec})
                resp.raise_for_status()
                if fault == "oom":  # usage=0 fires on the next forward step: make one
                    load = [asyncio.create_task(client.post("/generate", json={"text": "hi"}, timeout=60))]
            await sup.wait_for_state(ServerState.RESTARTING, timeout_s=120)
            detect = time.monotonic() - t0
        t1 = time.monotonic()
        await sup.wait_for_state(ServerState.READY, timeout_s=120)
        recover = time.monotonic() - t1
        reasons = [r for r, n in sup.restarts.items() if n]
        return fault, ",".join(reasons), detect, recover
    finally:
        for t in load:
            t.cancel()
        await asyncio.gather(*load, return_exceptions=True)
        await client.aclose()
        if blocker is not None:
            blocker.close()
        await sup.stop()


async def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--speed", type=float, default=100.0)
    args = ap.parse_args()
    faults = ["kill -9", "crash", "oom", "hang", "stall", "garbage", "503 storm", "port taken"]
    rows = [await one(args.speed, f) for f in faults]
    print(
        f"speed {args.speed:g}: check intervals, timeouts, thresholds and backoff = defaults / {args.speed:g}"
    )
    print(f"{'fault':<11} {'restart reason':<16} {'detect s':>9} {'= deploy s':>10} {'ready again s':>13}")
    for fault, reason, detect, recover in rows:
        print(f"{fault:<11} {reason:<16} {detect:>9.2f} {detect * args.speed:>10.0f} {recover:>13.2f}")


if __name__ == "__main__":
    asyncio.run(main())
