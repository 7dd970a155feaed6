"""Command-line options that name the server a subcommand loads: URL, backend and API key.

Shared by every subcommand that sends requests to an SGLang server (``sentinel bench``,
``sentinel sweep``), so the flags, their precedence and the key handling are the same in each.
The API key is read from a file or the environment, never taken as a flag value: a flag would
leave it in shell history and ``ps`` output. It is never printed.
"""

from __future__ import annotations

import argparse
import os
from pathlib import Path

from sglang_sentinel.cli.common import CliError

__all__ = ["API_KEY_ENVS", "add_target_options", "read_api_key", "target_base_url"]

# Looked up in this order when no --api-key-file is given; OPENAI_API_KEY because bench_serving
# and the OpenAI clients read it, so an operator's existing environment keeps working.
API_KEY_ENVS = ("SENTINEL_API_KEY", "OPENAI_API_KEY")


def add_target_options(
    group: argparse._ArgumentGroup,
    *,
    host: str | None = None,
    port: int | None = None,
    key_fallback: str | None = None,
) -> None:
    """Add --backend, --base-url, --host, --port and --api-key-file to ``group``.

    ``host``/``port`` are the flags' defaults (None: the caller supplies them from its config
    in :func:`target_base_url`); ``key_fallback`` names where the key comes from when neither
    the file nor the environment has one, for the help text.
    """
    group.add_argument(
        "--backend", default="sglang", help="sglang (native /generate), sglang-oai-chat, sglang-oai"
    )
    group.add_argument("--base-url", default=None, help="server URL (overrides --host/--port)")
    group.add_argument("--host", default=host)
    group.add_argument("--port", type=int, default=port)
    fallback = f", else {key_fallback}" if key_fallback else ""
    group.add_argument(
        "--api-key-file",
        type=Path,
        default=None,
        help=f"file holding the API key (default: ${' or $'.join(API_KEY_ENVS)}{fallback}); never printed",
    )


def target_base_url(args: argparse.Namespace, host: str, port: int) -> str:
    """--base-url, else ``http://HOST:PORT`` from the flags, else from ``host``/``port``."""
    if args.base_url:
        return str(args.base_url)
    return f"http://{args.host or host}:{args.port or port}"


def read_api_key(path: Path | None, configured: str | None = None) -> str | None:
    """The key from ``path``, else the first non-empty :data:`API_KEY_ENVS`, else ``configured``.

    An unreadable or empty file is a usage error (``CliError``, exit 2): silently falling back
    to another key would send the wrong credentials.
    """

    if path is not None:
        try:
            key = path.read_text(encoding="utf-8").strip()
        except OSError as exc:
            raise CliError(f"cannot read --api-key-file {path}: {exc.strerror}", 2) from None
        if not key:
            raise CliError(f"--api-key-file {path} is empty", 2)
        return key
    for name in API_KEY_ENVS:
        value = os.environ.get(name, "").strip()
        if value:
            return value
    return configured or None
