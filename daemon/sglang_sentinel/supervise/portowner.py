"""Who holds a TCP port: ``/proc/net/tcp{,6}`` → socket inode → the ``/proc/<pid>/fd`` that links it.

Used when the server's port is taken at start: "port in use" alone does not say whether it is a
leftover server of ours (reaped from the pidfile), an operator's process, or a socket in another
user's process we may not look into.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["PortHolder", "describe_holders", "port_holders"]

_LISTEN = "0A"
_CMDLINE_MAX = 200


@dataclass(frozen=True, slots=True)
class PortHolder:
    pid: int | None  # None: the socket exists but no process we can see links it
    command: str
    inode: int


def _listening_inodes(port: int, proc: Path) -> set[int]:
    inodes: set[int] = set()
    for name in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / name).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            _, _, hex_port = fields[1].rpartition(":")
            try:
                if int(hex_port, 16) == port and int(fields[9]) > 0:
                    inodes.add(int(fields[9]))
            except ValueError:
                continue
    return inodes


def _command(pid_dir: Path) -> str:
    try:
        raw = (pid_dir / "cmdline").read_bytes()
    except OSError:
        raw = b""
    text = raw.replace(b"\0", b" ").decode("utf-8", "replace").strip()
    if not text:
        try:
            text = f"[{(pid_dir / 'comm').read_text().strip()}]"
        except OSError:
            text = "?"
    return text[:_CMDLINE_MAX]


def port_holders(port: int, proc: Path = Path("/proc")) -> list[PortHolder]:
    """The processes with a listening socket on ``port`` (any address); empty if none is found."""
    inodes = _listening_inodes(port, proc)
    if not inodes:
        return []
    links = {f"socket:[{i}]": i for i in inodes}
    found: list[PortHolder] = []
    seen: set[int] = set()
    for entry in os.scandir(proc):
        if not entry.name.isdigit():
            continue
        fd_dir = Path(entry.path) / "fd"
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue  # gone, or another user's process
        for fd in fds:
            try:
                target = os.readlink(fd_dir / fd)
            except OSError:
                continue
            inode = links.get(target)
            if inode is not None and int(entry.name) not in seen:
                seen.add(int(entry.name))
                found.append(PortHolder(int(entry.name), _command(Path(entry.path)), inode))
    unseen = inodes - {h.inode for h in found}
    found.extend(PortHolder(None, "a process sentinel cannot inspect", i) for i in sorted(unseen))
    return found


def describe_holders(holders: list[PortHolder]) -> str:
    if not holders:
        return "no listening socket found (it may have just been released)"
    return "; ".join(f"pid {h.pid}: {h.command}" if h.pid is not None else h.command for h in holders)
