"""A SIGTERM that arrives before ``sentinel run``'s event loop takes the signal over.

Until the daemon installs its loop's handlers, ``sentinel run`` handles SIGTERM by raising
SystemExit(0) (nothing has started: stopping is exiting). A raise is not always delivered: a signal
handled while the interpreter runs a callback it guards (a weakref callback of the import system,
a ``__del__``) ends as "Exception ignored in: ..." and the process goes on starting. So the handler
also records the request here, and the daemon, once its own handlers are in, stops at once when
one is recorded: a stop requested at any moment is never lost.
"""

from __future__ import annotations

import threading
from typing import NoReturn

__all__ = ["handle_sigterm", "requested"]

_requested = threading.Event()


def handle_sigterm(signum: int, frame: object) -> NoReturn:
    _requested.set()
    raise SystemExit(0)


def requested() -> bool:
    """Whether a SIGTERM arrived before the daemon's loop handled the signal itself."""
    return _requested.is_set()
