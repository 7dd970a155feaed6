"""Configuration of a multi-node SGLang group (section ``[group]``).

One agent per node, each with its own ``[group] node_rank``. ``nnodes = 1`` (the default) is a
single-node server and nothing here applies. Durations are seconds, sizes bytes.
"""

from __future__ import annotations

import stat
from pathlib import Path
from typing import Any

from pydantic import Field, field_validator, model_validator

from sglang_sentinel.redact import register_secret
from sglang_sentinel.section import Section

__all__ = ["MIN_TOKEN_LENGTH", "GroupSettings"]

# A shared secret shorter than this is guessable by the rate of failures the peer API allows.
MIN_TOKEN_LENGTH = 16


def _host_port(value: str) -> bool:
    host, sep, port = value.rpartition(":")
    return bool(sep and host.strip("[]") and port.isdigit() and 0 < int(port) < 65536)


def _load_token(path: Path) -> str:
    try:
        mode = path.stat().st_mode
        text = path.read_text(encoding="utf-8").strip()
    except (OSError, UnicodeDecodeError) as exc:
        why = getattr(exc, "strerror", None) or str(exc)
        raise ValueError(f"token_file {path}: {why}") from None
    if mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f"token_file {path}: readable by group or others (chmod 600 {path})")
    if "\n" in text or "\r" in text:
        raise ValueError(f"token_file {path}: the token spans several lines (one line expected)")
    if len(text) < MIN_TOKEN_LENGTH:
        raise ValueError(f"token_file {path}: the token needs at least {MIN_TOKEN_LENGTH} characters")
    return text


class GroupSettings(Section):
    nnodes: int = Field(default=1, ge=1)
    node_rank: int = Field(default=0, ge=0)
    # SGLang's --dist-init-addr: rank 0's host:port for torch.distributed's rendezvous.
    dist_init_addr: str = ""
    # Agent URLs of ranks 1..nnodes-1, in rank order (rank 0's agent calls them); e.g.
    # "http://node2:9400". A rank >= 1 calls nobody: its list is not used.
    peers: tuple[str, ...] = ()
    # The shared secret of peer calls (one line, mode 0600 or stricter; read with the config).
    token_file: Path | None = None
    # Under an orchestrator (LeaderWorkerSet, OME): observe and export only; the controller restarts.
    orchestrated: bool = False
    # How often rank 0 asks every peer for its state.
    poll_interval: float = Field(default=2.0, gt=0)
    # One peer call's limit.
    peer_timeout: float = Field(default=5.0, gt=0)
    # After a group stop: wait this long at most for every node's GPU memory to be released.
    release_timeout: float = Field(default=120.0, gt=0)
    # A node's GPUs count as released when each holds at most this much (NVML). Without NVML the
    # server process's exit is the release signal.
    release_threshold_bytes: int = Field(default=1024**3, ge=0)

    @property
    def enabled(self) -> bool:
        return self.nnodes > 1

    @property
    def coordinator(self) -> bool:
        """This agent decides group restarts (rank 0, not under an orchestrator)."""
        return self.enabled and self.node_rank == 0

    @model_validator(mode="before")
    @classmethod
    def _no_inline_token(cls, data: Any) -> Any:
        if isinstance(data, dict):
            if "token" in data:
                raise ValueError("token: set token_file instead (a config file gets pasted into tickets)")
            if data.get("token_file") == "":
                return {**data, "token_file": None}  # "" = unset, as for [server] api_key_file
        return data

    def read_token(self) -> str:
        """The shared secret from ``token_file`` ("" without one); ValueError naming the file.

        Not a field: the settings are shown (``sentinel config``), compared and copied, the
        token must not be. Checked when the config is loaded, read again where it is used."""
        if self.token_file is None:
            return ""
        token = _load_token(self.token_file)
        register_secret(token)  # masked in every log line from now on
        return token

    @field_validator("peers")
    @classmethod
    def _peer_urls(cls, peers: tuple[str, ...]) -> tuple[str, ...]:
        import httpx

        out = []
        for url in peers:
            try:
                u = httpx.URL(url)
            except httpx.InvalidURL:
                raise ValueError(f"{url!r} is not a URL") from None
            if u.scheme not in ("http", "https") or not u.host or u.port is None:
                raise ValueError(f"{url!r}: want http(s)://HOST:PORT (the peer agent's exporter)")
            if u.userinfo or u.query or u.path not in ("", "/"):
                raise ValueError(f"{url!r}: no user, path or query (just http(s)://HOST:PORT)")
            out.append(url.rstrip("/"))
        return tuple(out)

    @model_validator(mode="after")
    def _consistent(self) -> GroupSettings:
        token = self.read_token()
        if not self.enabled:
            return self
        if self.node_rank >= self.nnodes:
            raise ValueError(f"node_rank must be 0..{self.nnodes - 1} (got {self.node_rank})")
        if not _host_port(self.dist_init_addr):
            raise ValueError(f"dist_init_addr must be HOST:PORT of rank 0 (got {self.dist_init_addr!r})")
        if self.node_rank == 0 and len(self.peers) != self.nnodes - 1:
            raise ValueError(
                f"peers: rank 0 needs the agent URL of each of ranks 1..{self.nnodes - 1} "
                f"({self.nnodes - 1} URL(s), got {len(self.peers)})"
            )
        if not token:
            raise ValueError("token_file: required in a group (every peer call carries the token)")
        return self
