"""The `floor` client of `client_efficiency.py`: the least a Python client can spend per streamed token.

It takes `sentinel bench`'s arguments and sends the same requests (`sentinel bench`'s own
bodies, headers and keep-alive connections: the warm-up request alone, then `--num-prompts`
requests at `--max-concurrency`), and reads the responses the way `sglang_sentinel.load.transport`
does — non-blocking sockets in one epoll set, woken on readiness and polled every 1 ms while
reads come faster than that, each read a `recvmsg` with the `SO_TIMESTAMPNS` ancillary
buffer — but does nothing else with a read: no HTTP or SSE parsing, no timestamp decoding, no
records. It counts bytes, and a response ends when a read ends with the terminating chunk
(`0\\r\\n\\r\\n`; an SSE chunk ends in `\\n\\n\\r\\n`, so no event can look like it). So its
CPU per token is the kernel's and the syscalls' share plus an interpreter's minimum loop: what
any Python client pays, and the bound on how far below the others a Python client can go.

Prints the bytes it read; `client_efficiency.py` checks every request at the simulator.
Usage: python benchmarks/floor_client.py <sentinel bench arguments>
"""

from __future__ import annotations

import argparse
import select
import socket
import sys
import time
from urllib.parse import urlsplit

import httpx

from sglang_sentinel.cli.bench import build_spec, register
from sglang_sentinel.kernelstamp import ANCBUF_SIZE, SO_TIMESTAMPNS
from sglang_sentinel.load.backends import build_body
from sglang_sentinel.load.datasets import Prompt, PromptSource
from sglang_sentinel.load.session import request_headers
from sglang_sentinel.load.spec import Backend

_POLL_S = 0.001  # sglang_sentinel.load.transport._POLL_S
_READ_SIZE = 65536  # sglang_sentinel.load.transport._READ_SIZE
_END = b"0\r\n\r\n"


def requests(argv: list[str]) -> tuple[str, int, list[bytes], list[bytes], int]:
    """(host, port, warm-up requests, measured requests, max concurrency) as `sentinel bench` sends them."""
    ap = argparse.ArgumentParser()
    register(ap.add_subparsers())
    spec = build_spec(ap.parse_args(["bench", *argv]))
    model = spec.model or ""
    if spec.backend is not Backend.SGLANG and not model:
        models = httpx.get(spec.base_url + "/v1/models", timeout=30).json()["data"]
        model = models[0]["id"]
    parts = urlsplit(spec.base_url)
    host, port = parts.hostname or "127.0.0.1", parts.port or 80
    lines = [f"Host: {host}:{port}"] + [f"{k}: {v}" for k, v in request_headers(spec).items()]
    head = ("\r\n".join(lines) + "\r\n").encode("latin-1")
    path = (parts.path.rstrip("/") + spec.backend.path).encode()
    source = PromptSource(spec)

    def request(i: int, prompt: Prompt, warm: bool) -> bytes:
        rid = f"floor-{int(time.time() * 1e3):x}-{'w' if warm else ''}{i}"
        body = build_body(spec, prompt, model=model, rid=rid, output_len=prompt.output_len)
        return b"POST %s HTTP/1.1\r\n%sContent-Length: %d\r\n\r\n%s" % (path, head, len(body), body)

    warm = [request(i, p, True) for i, p in enumerate(source.warmup(spec.warmup_requests))]
    todo = [request(i, next(source), False) for i in range(spec.num_requests or 0)]
    return host, port, warm, todo, spec.max_concurrency or len(todo)


def serve(host: str, port: int, todo: list[bytes], concurrency: int) -> int:
    """Run `todo` over `concurrency` keep-alive connections; returns the bytes read."""
    todo = todo[::-1]  # pop() from the end, in order
    ep = select.epoll()
    socks: dict[int, socket.socket] = {}
    for _ in range(min(concurrency, len(todo))):
        sock = socket.create_connection((host, port))
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS or 0, 1)
        sock.setblocking(False)
        socks[sock.fileno()] = sock
        ep.register(sock.fileno(), select.EPOLLIN)
        sock.send(todo.pop())
    active = len(socks)
    total = 0
    last = -1.0
    timeout = -1.0  # -1: wait for readiness; 0: polling every _POLL_S
    poll = ep.poll
    while active:
        events = poll(timeout)
        for fd, _ in events:
            sock = socks[fd]
            try:
                data, _anc, _flags, _addr = sock.recvmsg(_READ_SIZE, ANCBUF_SIZE)
            except BlockingIOError:
                continue
            total += len(data)
            if data.endswith(_END) or not data:
                if not data:
                    raise SystemExit("the server closed a connection")
                if todo:
                    sock.send(todo.pop())
                else:
                    ep.unregister(fd)
                    active -= 1
        now = time.monotonic()
        if timeout == 0:
            if events:
                time.sleep(_POLL_S)
            else:
                timeout = -1
        elif now - last < _POLL_S:
            time.sleep(_POLL_S)
            timeout = 0
        last = now
    for sock in socks.values():
        sock.close()
    ep.close()
    return total


def main() -> None:
    host, port, warm, todo, concurrency = requests(sys.argv[1:])
    total = serve(host, port, warm, 1)
    total += serve(host, port, todo, concurrency)
    print(total)


if __name__ == "__main__":
    main()
