"""SGLang's own log lines, byte for byte in the layout of v0.5.9.

SGLang configures ``[%Y-%m-%d %H:%M:%S<prefix>] <message>`` (no level name) and writes to
stderr; the scheduler prefix for TP>1 without DP/EP is `` TP<rank>``; uvicorn's access lines
go to stdout as ``[...] INFO:     <ip>:<port> - "<METHOD> <path> HTTP/1.1" <status> <phrase>``.
These lines are the simulator's whole log output: supervisors and log collectors parse them
exactly as they parse a real server's, so nothing else (no JSON, no structlog) is mixed in.
"""

from __future__ import annotations

import sys
import time
from http import HTTPStatus
from typing import TextIO

__all__ = ["SGLangLog"]


class SGLangLog:
    def __init__(
        self,
        err: TextIO | None = None,
        out: TextIO | None = None,
        *,
        tp_size: int = 1,
        log_ms: bool = False,
        access_log: bool = True,
    ) -> None:
        self._err = err if err is not None else sys.stderr
        self._out = out if out is not None else sys.stdout
        self.tp_size = tp_size
        self.log_ms = log_ms
        self.access_log = access_log
        self.lines_written = 0

    def _stamp(self, prefix: str) -> str:
        now = time.time()
        text = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(now))
        if self.log_ms:
            text += f".{int(now * 1000) % 1000:03d}"
        return f"[{text}{prefix}] "

    def _write(self, stream: TextIO, line: str) -> None:
        try:
            stream.write(line)
            stream.flush()
        except (OSError, ValueError):
            # A closed pipe must never take the simulated server down with it.
            return
        self.lines_written += 1

    def main(self, message: str) -> None:
        """A line from the main process (tokenizer manager, HTTP server): no rank prefix."""
        self._write(self._err, self._stamp("") + message + "\n")

    def rank(self, rank: int, message: str) -> None:
        prefix = f" TP{rank}" if self.tp_size > 1 else ""
        self._write(self._err, self._stamp(prefix) + message + "\n")

    def scheduler(self, message: str) -> None:
        """A line from the TP0 scheduler (batch lines, retraction warnings, exceptions)."""
        self.rank(0, message)

    def all_ranks(self, message: str) -> None:
        for rank in range(self.tp_size):
            self.rank(rank, message)

    def raw(self, text: str) -> None:
        """Unprefixed text (traceback bodies continue the previous record without a stamp)."""
        if not text.endswith("\n"):
            text += "\n"
        self._write(self._err, text)

    def access(self, peer: str, method: str, path: str, status: int) -> None:
        if not self.access_log:
            return
        try:
            phrase = HTTPStatus(status).phrase
        except ValueError:
            phrase = ""
        self._write(
            self._out, f'{self._stamp("")}INFO:     {peer} - "{method} {path} HTTP/1.1" {status} {phrase}\n'
        )
