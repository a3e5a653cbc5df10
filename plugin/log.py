"""Process logging: ``DIAG_LOG_FORMAT`` (``text`` | ``json``) and ``DIAG_LOG_LEVEL`` on stderr.

``json`` writes one object a line: ``time`` (RFC 3339 with zone), ``level``, ``logger``,
``message`` and, on every line logged inside a run, ``run_id``. The run id comes from a
context variable the harness binds when a run starts (:func:`bind_run_id`); asyncio tasks copy
it when they are created, so the framework's tasks of the run carry it too.

Third-party loggers (HTTP clients, the model SDK, LlamaIndex, Slack, the MySQL driver, the BM25
index ``bm25s`` and the tokenizer ``jieba``) are held at ``WARNING`` unless
``DIAG_LOG_LEVEL=DEBUG``: httpx's request lines and library chatter (bm25s's "Building index
from …" lines) only appear when asked for. Their levels are set, and the process handler also
drops their records below that level, since a library may set its own level when it is
imported later (bm25s sets ``DEBUG`` on import).

A failure the product handles is logged with :func:`log_failure`: one line naming what failed
and the failure's stable short reason (:func:`failure_reason`, the exception's type name), never
the exception's message or traceback, which may carry a DSN, a token or text from outside.
"""

from __future__ import annotations

import json
import logging
import sys
from contextvars import ContextVar
from datetime import UTC, datetime
from typing import TextIO

__all__ = [
    "THIRD_PARTY_LOGGERS",
    "JsonFormatter",
    "bind_run_id",
    "build_handler",
    "configure_logging",
    "current_run_id",
    "failure_reason",
    "log_failure",
]

THIRD_PARTY_LOGGERS = (
    "httpx",
    "httpcore",
    "openai",
    "llama_index",
    "workflows",
    "slack_bolt",
    "slack_sdk",
    "aiomysql",
    "urllib3",
    "aiohttp",
    "asyncio",
    "jieba",
    "bm25s",
)

_RUN_ID: ContextVar[str | None] = ContextVar("diag_run_id", default=None)
_TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s%(run_tag)s %(message)s"
_HANDLER_NAME = "diag-stderr"


def bind_run_id(run_id: str | None) -> None:
    """Tag every log line of the current task (and tasks it starts later) with ``run_id``."""
    _RUN_ID.set(run_id)


def current_run_id() -> str | None:
    return _RUN_ID.get()


def failure_reason(exc: BaseException) -> str:
    """A failure's stable short reason: the name of its exception type, never its message."""
    return type(exc).__name__


def log_failure(
    logger: logging.Logger, level: int, message: str, *args: object, exc: BaseException
) -> None:
    """Log ``message`` at ``level``; its last ``%s`` is ``exc``'s short reason (after ``args``).

    The exception's message and traceback are never logged: they may carry a secret or
    untrusted text, and the reason is what an operator matches on.
    """
    logger.log(level, message, *args, failure_reason(exc), stacklevel=2)


class _RunIdFilter(logging.Filter):
    """Adds ``run_id`` (and ``run_tag`` for the text format) to every record."""

    def filter(self, record: logging.LogRecord) -> bool:
        run_id = _RUN_ID.get()
        record.run_id = run_id
        record.run_tag = f" [{run_id}]" if run_id else ""
        return True


class _QuietLibraries(logging.Filter):
    """Drops third-party records below ``level``, whatever level the library set itself."""

    def __init__(self, level: int) -> None:
        super().__init__()
        self.level = level

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno >= self.level:
            return True
        return record.name.split(".", 1)[0] not in THIRD_PARTY_LOGGERS


class JsonFormatter(logging.Formatter):
    """One JSON object a line; an exception is named by its type, never dumped raw."""

    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        run_id = getattr(record, "run_id", None)
        if run_id:
            entry["run_id"] = run_id
        if record.exc_info and record.exc_info[0] is not None:
            entry["exc_type"] = record.exc_info[0].__name__
        return json.dumps(entry, ensure_ascii=False, default=str)


def build_handler(
    log_format: str = "text", stream: TextIO | None = None, *, library_level: int = logging.DEBUG
) -> logging.Handler:
    """A stream handler in the chosen format that tags records with the current run id and
    drops third-party records below ``library_level``."""
    handler = logging.StreamHandler(stream or sys.stderr)
    handler.set_name(_HANDLER_NAME)
    handler.addFilter(_QuietLibraries(library_level))
    handler.addFilter(_RunIdFilter())
    formatter = JsonFormatter() if log_format == "json" else logging.Formatter(_TEXT_FORMAT)
    handler.setFormatter(formatter)
    return handler


def configure_logging(level: str = "INFO", log_format: str = "text") -> None:
    """(Re)configure the root logger: one stderr handler in the chosen format and level."""
    root = logging.getLogger()
    for handler in list(root.handlers):
        if handler.get_name() == _HANDLER_NAME:
            root.removeHandler(handler)
    numeric = logging.getLevelName(level.upper())
    root.setLevel(numeric if isinstance(numeric, int) else logging.INFO)
    quiet = logging.DEBUG if root.level <= logging.DEBUG else max(logging.WARNING, root.level)
    root.addHandler(build_handler(log_format, library_level=quiet))
    for name in THIRD_PARTY_LOGGERS:
        logging.getLogger(name).setLevel(quiet)
