"""``sentinel reset``: the operator's "try again" after a crash loop.

A server that crashed more than ``[server.restart] max_restarts`` times within ``window`` is left
in the failed state: restarting it forever would only burn GPU time and bury the first error.
Once the cause is fixed, this command asks the running daemon (``POST /reset`` on its exporter)
to forget the restart history and start the server again. ``--configured`` also ends a fallback
(``[server.fallback]``): the configured launch command is started again, now. The same as ``kill -USR1 <pid>``
(the pid is in ``sentinel status`` and ``<state_dir>/sentinel.pid``).

When the exporter has basic auth, ``/reset`` needs it like every other path: ``--user`` and
``--password-file`` (or credentials in ``--url``). Exit codes: 0 reset done, 1 the daemon
refused or is still starting, 2 bad usage, 3 the daemon cannot be reached.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from sglang_sentinel.cli.common import CliError, add_common_options
from sglang_sentinel.cli.status import EXIT_UNREACHABLE, exporter_url, positive_seconds

__all__ = ["register"]


def register(sub: Any) -> None:
    p: argparse.ArgumentParser = sub.add_parser(
        "reset",
        help="clear the crash-loop window of the running daemon and start its server again",
        description="Manual reset after a crash loop: the running daemon forgets its restart history "
        "and starts the server (POST /reset on its exporter; the same as SIGUSR1 to the daemon).",
    )
    add_common_options(p)
    p.add_argument(
        "--url", default=None, help="the daemon's exporter URL (default: from [exporter] host/port)"
    )
    p.add_argument("--user", default=None, help="basic-auth user, when the exporter has basic auth")
    p.add_argument(
        "--password-file",
        type=Path,
        default=None,
        help="file holding that user's password (never a flag value: ps and shell history show those)",
    )
    p.add_argument(
        "--ca-file",
        type=Path,
        default=None,
        help="CA bundle for an HTTPS exporter (default: system CAs; unverified on loopback only)",
    )
    p.add_argument(
        "--configured",
        action="store_true",
        help="also end a fallback: launch the configured command again (restarts a running server)",
    )
    p.add_argument("--timeout", type=positive_seconds, default=10.0, help="seconds (default 10)")
    p.set_defaults(handler=_handle)


def _handle(args: argparse.Namespace) -> int:
    import httpx

    url = (args.url or exporter_url(args.config)).rstrip("/")
    parsed = httpx.URL(url)
    auth: tuple[str, str] | None = None
    if args.user is not None or args.password_file is not None:
        if args.user is None or args.password_file is None:
            raise CliError("--user and --password-file go together", 2)
        try:
            password = args.password_file.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CliError(f"cannot read --password-file {args.password_file}: {exc.strerror}", 2) from None
        auth = (args.user, password)
    verify: bool | str = True
    if args.ca_file is not None:
        verify = str(args.ca_file)
    elif parsed.host in ("127.0.0.1", "::1", "localhost"):
        # The daemon's own certificate is often self-signed; on loopback nobody sits in between.
        verify = False
    try:
        path = "/reset?configured=1" if args.configured else "/reset"
        response = httpx.post(url + path, timeout=args.timeout, verify=verify, auth=auth)
    except httpx.HTTPError as exc:
        raise CliError(
            f"cannot reach the daemon at {parsed.copy_with(username=None, password=None)}: "
            f"{type(exc).__name__}: {exc}",
            EXIT_UNREACHABLE,
        ) from None
    if response.status_code == 401:
        raise CliError("401: the exporter has basic auth: pass --user and --password-file", 1)
    if response.status_code == 403:
        # Not loopback and no basic auth on the exporter: run it on the daemon's host.
        raise CliError(f"{url}/reset: refused: {response.text.strip()[:200]}", 1)
    if response.status_code == 404:
        raise CliError(f"{url}/reset: not found (not a sentinel daemon, or an older one)", EXIT_UNREACHABLE)
    try:
        body = response.json()
    except ValueError:
        body = {}
    if response.status_code == 503:
        raise CliError("the daemon is still starting; nothing to reset yet", 1)
    if response.status_code != 200 or not isinstance(body, dict) or not body.get("reset"):
        raise CliError(f"{url}/reset: HTTP {response.status_code}", 1)
    was = body.get("server_state", "unknown")
    if args.configured:
        print(f"reset: the configured launch starts again (the server was {was})")
    elif was == "failed":
        print("reset: the server was failed; the daemon is starting it again")
    else:
        print(f"reset: restart history cleared (the server was {was})")
    return 0
