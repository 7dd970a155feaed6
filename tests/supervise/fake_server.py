"""A tiny stand-in for an SGLang server process, for the supervisor's fast tests.

Run as ``python fake_server.py --port P [options]``. It behaves like SGLang where the supervisor
looks: the port refuses while "loading", /health answers 503 while "warming", then 200; canary
prompts get known answers; /metrics has a decode token counter; crashes print SGLang's log lines
and SIGKILL the process itself. ``--once FILE`` makes the fault happen only in the first life
(the file records that it happened), so restart-and-recover can be tested.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from aiohttp import web


def _args() -> argparse.Namespace:
    p = argparse.ArgumentParser()
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--refuse", type=float, default=0.0, help="seconds before listening")
    p.add_argument("--warm", type=float, default=0.0, help="seconds of /health 503 after listening")
    p.add_argument("--crash-after", type=float, default=None, help="seconds after ready, then crash")
    p.add_argument("--crash-line", action="append", default=[], help="log line printed before SIGKILL")
    p.add_argument("--exit-code", type=int, default=None, help="exit with this status instead of SIGKILL")
    p.add_argument("--garbage", action="store_true", help="canaries get '!!!!' answers")
    p.add_argument("--stall", action="store_true", help="decode counter frozen with 1 request running")
    p.add_argument("--health-503-after", type=float, default=None, help="503 storm after N seconds")
    p.add_argument("--ignore-sigterm", action="store_true")
    p.add_argument("--spawn-child", default=None, help="start a worker in our group; write its pid here")
    p.add_argument("--once", default=None, help="apply the fault only when this file does not exist")
    p.add_argument("--no-metrics", action="store_true")
    p.add_argument("--api-key", default=None, help="require 'Authorization: Bearer KEY' on /v1 routes")
    p.add_argument("--config", default=None, help="SGLang's options file (the supervisor puts the key there)")
    args = p.parse_args()
    if args.config:  # JSON-style YAML, as sentinel writes it
        for key, value in json.loads(Path(args.config).read_text()).items():
            if getattr(args, key.replace("-", "_")) is None:
                setattr(args, key.replace("-", "_"), value)
    return args


def main() -> None:
    a = _args()
    faulty = True
    if a.once:
        marker = Path(a.once)
        faulty = not marker.exists()
        marker.write_text("x")
    if a.ignore_sigterm:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
    if a.spawn_child:
        child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
        Path(a.spawn_child).write_text(str(child.pid))
    print("[2026-01-01 00:00:00] server_args=ServerArgs(model_path='fake')", flush=True)
    time.sleep(a.refuse)
    t_listen = time.monotonic()
    ready_at: list[float] = []
    decode = {"n": 0.0}
    warm: float = a.warm

    def ready() -> bool:
        return time.monotonic() - t_listen >= warm

    def storm() -> bool:
        after: float | None = a.health_503_after
        return faulty and after is not None and bool(ready_at) and time.monotonic() - ready_at[0] >= after

    async def health(request: web.Request) -> web.Response:
        if not ready() or storm():
            return web.Response(status=503)
        return web.Response(status=200)

    async def chat(request: web.Request) -> web.Response:
        if a.api_key and request.headers.get("Authorization") != f"Bearer {a.api_key}":
            return web.json_response({"error": "Unauthorized"}, status=401)
        body = await request.json()
        prompt = body["messages"][-1]["content"]
        if faulty and a.garbage:
            text = "!" * 40
        elif "2+2" in prompt:
            text = "2 + 2 = 4."
        elif "is_prime" in prompt:
            text = "def is_prime(n):\n    return n > 1 and all(n % i for i in range(2, n))"
        else:
            text = "Sure."
        if not (faulty and a.stall):
            decode["n"] += 10
        return web.json_response(
            {
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ]
            }
        )

    async def metrics(request: web.Request) -> web.Response:
        if a.no_metrics:
            return web.Response(status=404)
        if not (faulty and a.stall):
            decode["n"] += 1
        text = (
            "# TYPE sglang:realtime_tokens_total counter\n"
            f'sglang:realtime_tokens_total{{mode="decode",tp_rank="0"}} {decode["n"]}\n'
            "# TYPE sglang:num_running_reqs gauge\n"
            f'sglang:num_running_reqs{{tp_rank="0"}} {1 if a.stall else 0}\n'
        )
        return web.Response(text=text, content_type="text/plain")

    async def loads(request: web.Request) -> web.Response:
        return web.json_response({"aggregate": {"total_running_reqs": 1 if (faulty and a.stall) else 0}})

    async def lifecycle() -> None:
        await asyncio.sleep(max(0.0, t_listen + warm - time.monotonic()))
        ready_at.append(time.monotonic())
        print("[2026-01-01 00:00:01] The server is fired up and ready to roll!", flush=True)
        if faulty and a.crash_after is not None:
            await asyncio.sleep(a.crash_after)
            for line in a.crash_line:
                print(line, flush=True)
            if a.exit_code is not None:
                os._exit(a.exit_code)
            os.kill(os.getpid(), signal.SIGKILL)

    app = web.Application()
    app.router.add_get("/health", health)
    app.router.add_get("/health_generate", health)
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/metrics", metrics)
    app.router.add_get("/v1/loads", loads)

    async def on_startup(app: web.Application) -> None:
        app["lifecycle"] = asyncio.create_task(lifecycle())

    app.on_startup.append(on_startup)
    web.run_app(app, host=a.host, port=a.port, print=None, handle_signals=not a.ignore_sigterm)


if __name__ == "__main__":
    main()
