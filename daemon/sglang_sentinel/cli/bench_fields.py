"""What `sentinel bench` derives from bench_serving's flags beyond the dataset: the SLOs of
``--goodput`` and the logprob / routed-experts request fields.

Kept apart from ``bench.py`` (the parser and the run) so that each stays small.
"""

from __future__ import annotations

import argparse
import math
from typing import TYPE_CHECKING, Any

from sglang_sentinel.cli.common import CliError

if TYPE_CHECKING:
    from sglang_sentinel.load.spec import Backend

__all__ = ["goodput_slos", "logprob_body"]


def goodput_slos(items: list[str] | None) -> dict[str, float]:
    """``--goodput ttft:MS tpot:MS e2el:MS`` as bench_serving reads it; `CliError` (exit 2) otherwise."""
    slos: dict[str, float] = {}
    for item in items or []:
        key, sep, value = item.partition(":")
        try:
            ms = float(value)
        except ValueError:
            ms = math.nan
        if not sep or key not in ("ttft", "tpot", "e2el") or not (ms > 0 and math.isfinite(ms)):
            raise CliError(
                f"--goodput expects KEY:MS with KEY in ttft, tpot, e2el and MS > 0, got {item!r}", 2
            )
        slos[key] = ms
    return slos


def logprob_body(args: argparse.Namespace, backend: Backend) -> dict[str, Any]:
    """bench_serving 0.5.23's logprob and routed-experts fields, per route."""
    from sglang_sentinel.load.spec import Backend  # imported when a run is built, not by the parser

    body: dict[str, Any] = {}
    if backend is Backend.SGLANG:
        if args.return_logprob:
            body["return_logprob"] = True
            body["logprob_start_len"] = args.logprob_start_len
            if args.top_logprobs_num > 0:
                body["top_logprobs_num"] = args.top_logprobs_num
            if args.token_ids_logprob is not None:
                body["token_ids_logprob"] = args.token_ids_logprob
        if args.return_routed_experts:
            body["return_routed_experts"] = True
    elif backend is Backend.OPENAI_COMPLETIONS and args.return_logprob and args.top_logprobs_num > 0:
        body["logprobs"] = args.top_logprobs_num
    return body
