"""Exec a command that dies with sentinel: ``python -m sglang_sentinel.supervise.pdeath PARENT -- ARGV...``.

The server runs in its own session (one killpg reaches every TP worker), so a SIGKILLed sentinel
would leave it running: an orphan holding the port and the GPUs that the next sentinel cannot
start past. This wrapper asks the kernel for ``PR_SET_PDEATHSIG`` (SIGKILL) and then ``exec``\\ s the
server, which keeps the setting (it is cleared only for set-uid binaries).

Why a wrapper rather than ``preexec_fn``: code between fork and exec in a process with threads (the
GPU worker, the exporter) may deadlock on a lock another thread held at fork; a fresh interpreter
has one thread. Caveats the runner relies on:

* the signal fires when the *thread* that forked exits, not the process: the runner forks from the
  event-loop thread, which lives as long as sentinel does;
* if sentinel died between fork and the ``prctl`` the signal would never come, so the wrapper
  checks that its parent is still ``PARENT`` after setting it, and exits otherwise;
* SGLang's own scheduler and detokenizer processes set the same signal against their parent, so
  killing the server's main process takes the rest of its tree with it.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

__all__ = ["set_parent_death_signal", "wrap"]

_PR_SET_PDEATHSIG = 1
# Exit statuses of a failed wrapper, as a shell reports them.
_EXIT_USAGE = 2
_EXIT_ORPHANED = 1
_EXIT_EXEC = 127


def set_parent_death_signal(sig: int = signal.SIGKILL) -> bool:
    """Ask the kernel to send ``sig`` to this process when its parent thread exits (Linux only)."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return int(libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0)) == 0
    except (OSError, AttributeError):
        return False


def wrap(argv: list[str], parent: int | None = None) -> list[str]:
    """``argv`` behind this wrapper, for a child of ``parent`` (default: this process)."""
    pid = os.getpid() if parent is None else parent
    return [sys.executable, "-m", "sglang_sentinel.supervise.pdeath", str(pid), "--", *argv]


def main(args: list[str]) -> int:
    if len(args) < 3 or args[1] != "--" or not args[0].isdigit():
        sys.stderr.write("usage: python -m sglang_sentinel.supervise.pdeath PARENT_PID -- ARGV...\n")
        return _EXIT_USAGE
    parent, argv = int(args[0]), args[2:]
    if not set_parent_death_signal():
        sys.stderr.write("sentinel: PR_SET_PDEATHSIG unavailable; the server may outlive sentinel\n")
    if os.getppid() != parent:
        return _EXIT_ORPHANED  # sentinel is already gone: nobody would ever stop this server
    try:
        os.execvp(argv[0], argv)
    except OSError as exc:
        sys.stderr.write(f"sentinel: cannot start {argv[0]}: {exc.strerror or exc}\n")
    return _EXIT_EXEC


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
