"""bench_serving's `--print-requests`: a line on stdout as each request starts and ends.

bench_serving 0.5.23 (chat backend only, as here) prints
``rid=<id> time=<epoch s> message="request start" request_func_input="RequestFuncInput(...)"``
and ``rid=<id> time=<epoch s> time_delta=<s> message="request end" output="RequestFuncOutput(...)"``,
the prompt and the generated text shown as ``'...'``. Same lines here; the rid is the one the
request carries (bench_serving's is a fresh uuid that the server never sees), and the reprs hold
the fields sentinel has, named as in bench_serving's dataclasses.
"""

from __future__ import annotations

import json
import sys
import time
from typing import TextIO

from sglang_sentinel.load.records import RequestRecord
from sglang_sentinel.load.spec import LoadSpec

__all__ = ["RequestPrinter"]


class RequestPrinter:
    def __init__(self, spec: LoadSpec, model: str, out: TextIO | None = None) -> None:
        self._spec = spec
        self._model = model
        self._out = out
        self._started: dict[str, float] = {}

    def _print(self, line: str) -> None:
        print(line, file=self._out if self._out is not None else sys.stdout, flush=True)

    def start(self, rec: RequestRecord, body: bytes) -> None:
        now = time.time()
        self._started[rec.rid] = now
        extra = {k: v for k, v in json.loads(body).items() if k not in ("messages", "model", "rid")}
        fields = (
            "prompt='...'",
            f"api_url={self._spec.url!r}",
            f"prompt_len={rec.prompt_len}",
            f"output_len={rec.planned_output_len}",
            f"model={self._model!r}",
            f"extra_request_body={extra!r}",
            f"routing_key={rec.routing_key!r}",
        )
        self._print(
            f'rid={rec.rid} time={now} message="request start" '
            f'request_func_input="RequestFuncInput({", ".join(fields)})"'
        )

    def end(self, rec: RequestRecord) -> None:
        now = time.time()
        start = self._started.pop(rec.rid, now)
        fields = (
            "generated_text='...'",
            f"success={rec.success}",
            f"latency={rec.latency or 0.0}",
            f"ttft={rec.ttft or 0.0}",
            f"itl={rec.itl!r}",
            f"prompt_len={rec.prompt_tokens or rec.prompt_len}",
            f"error={rec.error or ''!r}",
            f"output_len={rec.output_len}",
            f"cached_tokens={rec.cached_tokens or 0}",
        )
        self._print(
            f'rid={rec.rid} time={now} time_delta={now - start} message="request end" '
            f'output="RequestFuncOutput({", ".join(fields)})"'
        )
