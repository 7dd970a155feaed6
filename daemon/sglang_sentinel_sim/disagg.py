"""Prefill/decode disaggregation roles: ``--disaggregation-mode prefill|decode``.

What SGLang does (0.5.9 ``srt/server_args.py``, 0.5.23 ``srt/disaggregation/``), and what the
simulator keeps of it:

- ``--disaggregation-mode null|prefill|decode`` (default null), ``--disaggregation-bootstrap-port``
  (default 8998), ``--disaggregation-transfer-backend`` (default mooncake; ``fake`` is SGLang's
  test backend). All three appear in ``/server_info`` as server args.
- A prefill server runs a *bootstrap server* on the bootstrap port (aiohttp,
  ``disaggregation/common/conn.py`` ``CommonKVBootstrapServer``): ``GET /health`` "OK";
  ``/route`` PUT registers a prefill rank, GET answers a decode server's lookup (400 "Missing
  inputs for bootstrap server." without its four query parameters, 503 until every rank
  registered); POST ``/register_dp_rank`` and ``/query_dp_ranks`` (room -> DP rank). The simulator
  has its one rank registered from the start and answers those routes in the same shapes;
  nothing is ever transferred.
- Both roles refuse a generation request without ``bootstrap_room`` (unless the transfer
  backend is ``fake``): 400, "Invalid request: Disaggregated request received without bootstrap
  room id." (``managers/scheduler.py``). A router in PD mode adds ``bootstrap_host``,
  ``bootstrap_port`` and ``bootstrap_room`` to the request it sends to *both* servers.
- The prefill server runs the prompt with ``max_new_tokens = 1`` (``PrefillBootstrapQueue
  ._process_req``) and, once the KV cache is sent, finishes it as ``FINISH_LENGTH(length=0)``.
  The simulator finishes it right after its prefill (no transfer to wait for).
- The decode server receives the prompt's KV instead of computing it: the simulator admits the
  prompt as if its KV were cached (all but the last token, which SGLang always recomputes), then
  decodes as usual.

Not simulated: the KV transfer itself (mooncake/nixl queues, their timings and failures), the
PD-specific scheduler log fields and queue gauges, a decode server's lookup of the prefill's
bootstrap server.
"""

from __future__ import annotations

import argparse
from typing import Any

__all__ = [
    "MODES",
    "NO_ROOM_MESSAGE",
    "add_arguments",
    "config_options",
    "missing_room",
]

MODES = ("null", "prefill", "decode")
NO_ROOM_MESSAGE = "Invalid request: Disaggregated request received without bootstrap room id."


def add_arguments(group: argparse._ArgumentGroup) -> None:
    group.add_argument("--disaggregation-mode", choices=MODES, default="null", help="PD role (default null)")
    group.add_argument(
        "--disaggregation-bootstrap-port",
        type=int,
        default=8998,
        help="prefill role: the bootstrap server's port (default 8998)",
    )
    group.add_argument(
        "--disaggregation-transfer-backend", default="mooncake", help="mooncake, nixl, fake, ..."
    )


def config_options(args: argparse.Namespace) -> dict[str, Any]:
    """The SimConfig fields of these flags."""
    return {
        "disaggregation_mode": args.disaggregation_mode,
        "disaggregation_bootstrap_port": args.disaggregation_bootstrap_port,
        "disaggregation_transfer_backend": args.disaggregation_transfer_backend,
    }


def missing_room(body: object, mode: str, backend: str) -> bool:
    """A disaggregated server's refusal of a request that carries no bootstrap room."""
    if mode == "null" or backend == "fake" or not isinstance(body, dict):
        return False
    room = body.get("bootstrap_room")
    if isinstance(room, list):
        return not room or any(r is None for r in room)
    return room is None
