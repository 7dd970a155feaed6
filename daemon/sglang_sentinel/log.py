"""One structlog configuration for the whole process.

JSON lines when stderr is not a TTY (journald, files, CI), a readable console on a TTY. Records
from the standard library (aiohttp, httpx, apscheduler, ...) are routed through the same
processors so that every line of the daemon has one shape.

When stderr is the journal (systemd sets ``JOURNAL_STREAM`` to the stream's ``dev:inode``), every
line starts with its syslog level (``<3>`` error, ``<4>`` warning, ``<6>`` info, ``<7>`` debug):
journald's default ``SyslogLevelPrefix=yes`` strips it and files the line at that PRIORITY, so
``journalctl -p warning -u sentinel`` works. Anywhere else a line is plain JSON.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import MutableMapping
from typing import IO, Any, Literal

import structlog

from sglang_sentinel.redact import scrub_event

__all__ = [
    "CurrentStderrHandler",
    "LogFormat",
    "SyslogLevelPrefix",
    "configure_logging",
    "get_logger",
    "round_floats",
    "stream_is_journal",
]

LogFormat = Literal["auto", "json", "console"]

_SHARED: list[structlog.types.Processor] = [
    structlog.contextvars.merge_contextvars,
    structlog.stdlib.add_log_level,
    structlog.stdlib.add_logger_name,
    structlog.processors.TimeStamper(fmt="iso", utc=True),
    structlog.processors.StackInfoRenderer(),
]


# syslog(3) levels by structlog level name (sd-daemon(3): "<3>" at the start of a line).
_SYSLOG_LEVELS = {
    "critical": 2,
    "exception": 3,
    "error": 3,
    "warning": 4,
    "warn": 4,
    "info": 6,
    "debug": 7,
    "notset": 7,
}


def stream_is_journal(stream: IO[Any]) -> bool:
    """True when ``stream`` is the journald stream systemd connected (``JOURNAL_STREAM`` matches).

    Compared by device and inode, as sd_journal_stream_fd(3) says: a child whose stderr was
    redirected elsewhere inherits the variable but not the stream.
    """
    value = os.environ.get("JOURNAL_STREAM", "")
    dev, sep, ino = value.partition(":")
    if not sep:
        return False
    try:
        st = os.fstat(stream.fileno())
        return (st.st_dev, st.st_ino) == (int(dev), int(ino))
    except (OSError, ValueError, AttributeError):
        return False


class SyslogLevelPrefix:
    """Renderer wrapper: ``<N>`` (the syslog level of the record) before what ``inner`` renders."""

    def __init__(self, inner: structlog.types.Processor) -> None:
        self._inner = inner

    def __call__(self, logger: Any, method_name: str, event_dict: MutableMapping[str, Any]) -> str:
        level = str(event_dict.get("level", method_name)).lower()
        rendered = self._inner(logger, method_name, event_dict)
        if isinstance(rendered, bytes):
            rendered = rendered.decode("utf-8", "replace")
        return f"<{_SYSLOG_LEVELS.get(level, 6)}>{rendered}"


def _round(value: Any, digits: int) -> Any:
    if isinstance(value, float):
        return float(f"{value:.{digits}g}")
    return value


def round_floats(digits: int = 4) -> structlog.types.Processor:
    """Processor for the console: floats of an event shown to ``digits`` significant digits.

    A person reads ``elapsed_s=0.1234`` faster than ``elapsed_s=0.12340876501798630``; the
    figure is unchanged for a machine, so JSON lines (journald, files) keep full precision
    and only the console renderer gets this. Floats inside lists/tuples one level down are
    rounded too (a duration list); nested mappings are left as they are.
    """

    def processor(
        logger: Any, method_name: str, event_dict: MutableMapping[str, Any]
    ) -> MutableMapping[str, Any]:
        for key, value in event_dict.items():
            if isinstance(value, float):
                event_dict[key] = _round(value, digits)
            elif isinstance(value, (list, tuple)) and any(isinstance(v, float) for v in value):
                event_dict[key] = type(value)(_round(v, digits) for v in value)
        return event_dict

    return processor


class CurrentStderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """A stream handler that writes to whatever ``sys.stderr`` is when a line is written, as the
    stdlib's own last-resort handler does, not to the stream it was made with.

    A handler bound to one stream object outlives it when the process replaces ``sys.stderr`` (a
    test's captured stream, closed after the test; an embedding host that redirects it): every
    later line, asyncio's own included, then fails with "I/O operation on closed file"."""

    def __init__(self) -> None:
        logging.Handler.__init__(self)

    @property
    def stream(self) -> Any:
        return sys.stderr

    @stream.setter
    def stream(self, value: Any) -> None:
        """Ignored: the stream is always the current ``sys.stderr``."""


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
        pre = [structlog.processors.format_exc_info, round_floats()]
    if stream_is_journal(sys.stderr):
        renderer = SyslogLevelPrefix(renderer)
    structlog.configure(
        processors=[*_SHARED, structlog.stdlib.ProcessorFormatter.wrap_for_formatter],
        logger_factory=structlog.stdlib.LoggerFactory(),
        wrapper_class=structlog.stdlib.BoundLogger,
        cache_logger_on_first_use=False,
    )
    handler = CurrentStderrHandler()
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
    """The logger of one module: ``_log = get_logger(__name__)`` at module level, everywhere.

    The name is the module's, so a line's ``logger`` field says where it came from and the
    stdlib's per-logger levels work on sentinel's own tree (``sglang_sentinel.load``...).
    """
    logger: structlog.stdlib.BoundLogger = structlog.stdlib.get_logger(name)
    return logger
