"""One structlog configuration for the whole process.

JSON lines when stderr is not a TTY (journald, files, CI), a readable console on a TTY. Records
from the standard library (aiohttp, httpx, apscheduler, ...) are routed through the same
processors so that every line of the daemon has one shape.
"""

from __future__ import annotations

import logging
import sys
from typing import Literal

import structlog

from sentinel.redact import scrub_event

__all__ = ["LogFormat", "configure_logging", "get_logger"]

LogFormat = Literal["auto", "json", "console"]

_SHARED: list[structlog.types.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.StackInfoRenderer(),
]


def configure_logging(level: str = "info", fmt: LogFormat = "auto") -> None:
    """Configure structlog and the stdlib root logger. Safe to call again (e.g. on SIGHUP)."""
    if fmt == "auto":
        fmt = "console" if sys.stderr.isatty() else "json"
    renderer: structlog.types.Processor
    if fmt == "json":
        renderer = structlog.processors.JSONRenderer()
        # Tracebacks become one "exception" field instead of many journald lines. Without frame
        # locals (structlog's default shows them): a local may be an Authorization header, a
        # password or an API key, and any client could otherwise write them into the journal.
        pre: list[structlog.types.Processor] = [
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            )
        ]
    else:
        # plain_traceback explicitly: with rich or better-exceptions installed structlog would
        # pick a formatter that prints frame locals.
        renderer = structlog.dev.ConsoleRenderer(
            colors=sys.stderr.isatty(), exception_formatter=structlog.dev.plain_traceback
        )
        pre = [structlog.processors.format_exc_info]
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=_SHARED,
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                *pre,
                scrub_event,  # last before rendering: sees every field, tracebacks included
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # aiohttp's access log is one line per request: far too chatty for a load generator's target.
    logging.getLogger("aiohttp.access").setLevel(logging.WARNING)
    logging.getLogger("httpx").setLevel(logging.WARNING)
    logging.getLogger("httpcore").setLevel(logging.WARNING)


def get_logger(name: str) -> structlog.stdlib.BoundLogger:
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
