"""systemd integration: ``sd_notify`` messages and the watchdog, written straight to ``NOTIFY_SOCKET``.

The protocol is a datagram of ``KEY=VALUE`` lines on the unix socket named by ``$NOTIFY_SOCKET``
(a leading ``@`` means the abstract namespace). The maintained options are a C extension
(systemd-python, cysystemd) or ``sdnotify`` (2017, swallows every error, no watchdog support), so
this module speaks the protocol itself; it is a dozen lines of real logic.

Outside systemd (no ``NOTIFY_SOCKET``) every call is a no-op, so the daemon runs the same way in a
terminal, a container or a test.

The watchdog ping is sent by a task on the daemon's event loop: if the loop is blocked, the ping
stops and systemd kills and restarts the daemon, which is the point of ``WatchdogSec=``.
"""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Callable, Mapping, MutableMapping

from sglang_sentinel.log import get_logger

__all__ = ["NOTIFY_ENV_VARS", "Notifier", "clean_child_env", "run_watchdog", "watchdog_interval"]

# What a child must not inherit: SGLang (or the simulator) writing READY=1 on our socket would tell
# systemd the daemon is up; with NotifyAccess=main systemd ignores it, but a child has no business there.
NOTIFY_ENV_VARS = ("NOTIFY_SOCKET", "WATCHDOG_USEC", "WATCHDOG_PID")

_log = get_logger(__name__)


def _socket_address(raw: str) -> str | bytes:
    if raw.startswith("@"):
        # Abstract namespace: the name starts with a NUL byte and is not NUL-terminated.
        return b"\0" + raw[1:].encode()
    return raw


class Notifier:
    """Sends notifications to the service manager; a no-op when not started by systemd."""

    def __init__(self, socket_path: str | None) -> None:
        self._address: str | bytes | None = None
        self._sock: socket.socket | None = None
        if socket_path and (socket_path.startswith("/") or socket_path.startswith("@")):
            self._address = _socket_address(socket_path)
        elif socket_path:
            # vsock addresses ("vsock:CID:PORT") are for VMs and not something this daemon runs in.
            _log.warning("notify_socket_unsupported", notify_socket=socket_path)
        self.failures = 0

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> Notifier:
        env = os.environ if environ is None else environ
        return cls(env.get("NOTIFY_SOCKET"))

    @property
    def enabled(self) -> bool:
        return self._address is not None

    def send(self, **fields: str | int) -> bool:
        """Send one message (``send(READY=1, STATUS="...")``). Returns False if it could not be sent.

        A failure is logged and counted, never raised: losing a STATUS line must not take the daemon
        down, and a lost WATCHDOG=1 is what the watchdog is there to notice anyway.
        """
        if self._address is None:
            return False
        payload = "\n".join(f"{key}={_one_line(value)}" for key, value in fields.items()).encode()
        try:
            if self._sock is None:
                self._sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM | socket.SOCK_CLOEXEC)
                self._sock.setblocking(False)
            self._sock.sendto(payload, self._address)
        except OSError as exc:
            self.failures += 1
            _log.warning("notify_failed", error=str(exc), fields=sorted(fields))
            self.close()
            return False
        return True

    def ready(self, status: str | None = None) -> bool:
        return self.send(READY=1, **({"STATUS": status} if status else {}))

    def status(self, text: str) -> bool:
        return self.send(STATUS=text)

    def stopping(self, status: str | None = None) -> bool:
        return self.send(STOPPING=1, **({"STATUS": status} if status else {}))

    def reloading(self) -> bool:
        return self.send(RELOADING=1)

    def watchdog(self) -> bool:
        return self.send(WATCHDOG=1)

    def close(self) -> None:
        if self._sock is not None:
            self._sock.close()
            self._sock = None


def _one_line(value: str | int) -> str:
    # A newline would start a new KEY=VALUE assignment in the datagram.
    return str(value).replace("\n", " ")


def watchdog_interval(environ: Mapping[str, str] | None = None, pid: int | None = None) -> float | None:
    """Seconds between pings (half of ``WatchdogSec=``), or None when no watchdog is armed for us.

    ``WATCHDOG_PID``, when set, names the process the watchdog is meant for; a child that inherited
    the variables must not ping on its parent's behalf.
    """
    env = os.environ if environ is None else environ
    raw = env.get("WATCHDOG_USEC")
    if not raw:
        return None
    owner = env.get("WATCHDOG_PID")
    if owner and owner.strip() != str(os.getpid() if pid is None else pid):
        return None
    try:
        usec = int(raw)
    except ValueError:
        _log.warning("watchdog_usec_invalid", value=raw)
        return None
    if usec <= 0:
        return None
    return usec / 1_000_000 / 2


async def run_watchdog(
    notifier: Notifier, interval: float, healthy: Callable[[], bool] = lambda: True
) -> None:
    """Ping ``WATCHDOG=1`` every ``interval`` seconds from the event loop until cancelled.

    ``healthy`` lets the daemon withhold pings when its own checks say it is wedged (for example
    the scheduler has stopped): then systemd restarts it, which is the desired outcome.
    """
    while True:
        if healthy():
            notifier.watchdog()
        else:
            _log.warning("watchdog_ping_withheld")
        await asyncio.sleep(interval)


def clean_child_env(env: MutableMapping[str, str]) -> MutableMapping[str, str]:
    """Remove the notify/watchdog variables from an environment meant for a child process."""
    for key in NOTIFY_ENV_VARS:
        env.pop(key, None)
    return env
