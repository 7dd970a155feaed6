"""Fixtures of the daemon tests: a stand-in for systemd's notify socket, the daemons a test started."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Iterator

import pytest

from support.daemon_proc import DaemonProcess


class Receiver:
    """A service manager stand-in: records every datagram with its arrival time."""

    def __init__(self, address: str | bytes) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(address)
        self.sock.settimeout(0.1)
        self.messages: list[tuple[float, str]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                data = self.sock.recv(4096)
            except TimeoutError:
                continue
            except OSError:
                return
            self.messages.append((time.monotonic(), data.decode()))

    def wait_for(self, text: str, timeout: float = 5.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if any(text in m for _, m in self.messages):
                return
            time.sleep(0.01)
        raise AssertionError(f"{text!r} not received; got {self.messages}")

    def close(self) -> None:
        self._stop.set()
        self._thread.join(2)
        self.sock.close()


@pytest.fixture
def notify_receiver() -> Iterator[Callable[[str | bytes], Receiver]]:
    """Factory: bind a datagram socket at an address (path or abstract) and record what arrives."""
    made: list[Receiver] = []

    def make(address: str | bytes) -> Receiver:
        r = Receiver(address)
        made.append(r)
        return r

    yield make
    for r in made:
        r.close()


@pytest.fixture
def daemons() -> Iterator[list[DaemonProcess]]:
    """Append every :class:`DaemonProcess` a test starts: each is killed at teardown, whatever happened."""
    started: list[DaemonProcess] = []
    yield started
    for d in started:
        d.kill()
