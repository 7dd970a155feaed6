"""Targets from a Prometheus file_sd JSON file, for ``[fleet] file_sd``.

The same file can feed Prometheus's ``file_sd_configs`` (scraping ``/probe`` through the fleet,
deploy/fleet/) and the fleet itself. Each entry names one target::

    [{"targets": ["10.0.0.5:30000"], "labels": {"name": "gpu-a", "kind": "server"}}]

``name`` is required and is what ``/probe?target=`` takes; ``kind`` is ``auto`` (default), ``server`` or
``router``; ``canaries`` ``"false"`` turns them off, ``router_metrics_url`` is a router's metrics
listener (its breakers); other labels are Prometheus's business. An entry with several addresses is refused:
one name per target, decided by whoever writes the file, never derived from discovery.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from sglang_sentinel.fleet.settings import FleetTarget

__all__ = ["FileSdError", "parse_file_sd", "read_file_sd"]


class FileSdError(Exception):
    """The file cannot be used; the message names the file and the entry."""


def _url(address: str) -> str:
    return address if address.startswith(("http://", "https://")) else f"http://{address}"


def parse_file_sd(data: Any, origin: str = "file_sd") -> tuple[FleetTarget, ...]:
    if not isinstance(data, list):
        raise FileSdError(f"{origin}: expected a JSON list of target groups")
    out: list[FleetTarget] = []
    for i, group in enumerate(data):
        where = f"{origin}: entry {i}"
        if not isinstance(group, dict):
            raise FileSdError(f"{where}: not an object")
        addrs, labels = group.get("targets"), group.get("labels", {})
        if not isinstance(addrs, list) or not all(isinstance(a, str) for a in addrs):
            raise FileSdError(f"{where}: 'targets' must be a list of strings")
        if not isinstance(labels, dict) or not isinstance(labels.get("name"), str):
            raise FileSdError(f"{where}: labels.name is required (the target's name)")
        if "api_key" in labels:
            # Prometheus reads the same file: its labels become series labels, visible to anyone
            # who can query. A key belongs in the fleet's TOML ([[fleet.targets]] api_key).
            raise FileSdError(f"{where}: labels.api_key is refused (a secret in Prometheus labels)")
        if len(addrs) != 1:
            raise FileSdError(f"{where}: exactly one address per entry (one name each), got {len(addrs)}")
        try:
            out.append(
                FleetTarget(
                    name=labels["name"],
                    url=_url(addrs[0]),
                    kind=labels.get("kind", "auto"),
                    canaries=str(labels.get("canaries", "true")).lower() != "false",
                    router_metrics_url=labels.get("router_metrics_url", ""),
                )
            )
        except ValidationError as exc:
            first = exc.errors(include_url=False)[0]
            field = ".".join(str(p) for p in first["loc"])
            raise FileSdError(f"{where}: {field}: {first['msg']}") from None
    names = [t.name for t in out]
    dup = sorted({n for n in names if names.count(n) > 1})
    if dup:
        raise FileSdError(f"{origin}: target names must be unique, repeated: {', '.join(dup)}")
    return tuple(out)


def read_file_sd(path: Path) -> tuple[FleetTarget, ...]:
    try:
        data = json.loads(path.read_bytes())
    except OSError as exc:
        raise FileSdError(f"{path}: {exc.strerror or exc}") from None
    except ValueError as exc:
        raise FileSdError(f"{path}: invalid JSON: {exc}") from None
    return parse_file_sd(data, str(path))
