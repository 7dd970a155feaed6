"""``--gpu-energy``, ``--gpus`` and ``--gpu-idle-seconds`` of ``sentinel bench`` and ``sweep``: the
flags, and the meter they ask for (:mod:`sglang_sentinel.collect.gpu.local` decides and meters).

``--config`` supplies the rest: ``[cost]`` (energy cost per million output tokens),
``[energy] gpus`` and ``mode = "off"`` (which turns ``auto`` off), ``[collectors.gpu]``'s backend
(``"fake"``: the replayed H200s, for demos and tests) and NVML deadlines. docs/energy.md.
"""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from sglang_sentinel.cli.common import CliError, bounded

if TYPE_CHECKING:
    from sglang_sentinel.collect.gpu.local import LocalEnergy

__all__ = ["add_energy_options", "open_energy"]


def _gpu_name(value: str) -> str:
    # As [energy] gpus: an NVML index or a GPU/MIG UUID (EnergySettings._gpu_names).
    if not (value.isdigit() or value.upper().startswith(("GPU-", "MIG-"))):
        raise argparse.ArgumentTypeError(
            f"{value!r} is neither an NVML index (0, 1, ...) nor a GPU UUID (GPU-...)"
        )
    return value


def add_energy_options(parser: argparse.ArgumentParser, *, idle_default: float) -> None:
    g = parser.add_argument_group("GPU energy of the server's GPUs on this host (docs/energy.md)")
    g.add_argument(
        "--gpu-energy",
        choices=("auto", "on", "off"),
        default="auto",
        help="auto: when the server is on this host and a GPU here runs a compute process (or --gpus "
        "is given); on: required, exit 2 when it cannot be measured",
    )
    g.add_argument(
        "--gpus",
        nargs="+",
        type=_gpu_name,
        default=None,
        metavar="GPU",
        help="the server's GPUs, NVML indices or UUIDs (default: [energy] gpus, else those running a "
        "compute process, else all)",
    )
    g.add_argument(
        "--gpu-idle-seconds",
        type=bounded(float, ge=0),
        default=idle_default,
        metavar="S",
        help=f"measure the GPUs' idle draw this long before the load, for the marginal energy per "
        f"token (0: not measured; default {idle_default:g})",
    )


def open_energy(args: argparse.Namespace, settings: Any, base_url: str, command: str) -> LocalEnergy:
    """The meter the flags ask for (``meter`` None: not metering, ``note`` says why, empty when
    turned off); when metering, a line on stderr says which GPUs (and why the command waits
    before its load: the idle window). ``CliError`` (exit 2) where ``on`` or ``--gpus`` cannot be
    met. Close it after the run."""
    from sglang_sentinel.collect.gpu.local import EnergyUnavailable, LocalEnergy, open_local_energy

    mode = args.gpu_energy
    if mode == "off" or (mode == "auto" and settings.energy.mode == "off" and not args.gpus):
        return LocalEnergy(None, "")  # asked not to: nothing to explain
    idle = args.gpu_idle_seconds
    try:
        local = open_local_energy(
            mode,
            tuple(args.gpus or ()),
            target_host=urlsplit(base_url).hostname or "",
            gpu=settings.collectors.gpu,
            energy=settings.energy,
            cost=settings.cost,
            baseline_reason="not measured (--gpu-idle-seconds 0)" if idle == 0 else "idle window not run",
        )
    except EnergyUnavailable as exc:
        raise CliError(f"--gpu-energy: {exc}", 2) from None
    if local.meter is not None:
        idle_text = f", idle draw over {idle:g} s first" if idle > 0 else ""
        print(f"{command}: GPU energy of {local.note}{idle_text}", file=sys.stderr)
    return local
