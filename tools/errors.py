"""The evidence layer's errors: what a backend, a source or the SQL guard refused, as codes.

Each carries a code from :mod:`sre_diag.tools.base` (or the guard's :class:`RefusalReason`),
never the backend's text or the model's input. Each is a :class:`sre_diag.errors.RunError`.
"""

from __future__ import annotations

from enum import StrEnum

from sre_diag.errors import RunError
from sre_diag.tools.base import AdapterErrorCode

__all__ = [
    "BodyTooLarge",
    "BoundViolation",
    "EvidenceError",
    "LexRefusal",
    "LogSourceError",
    "LokiAnswerTooLarge",
    "OutOfTime",
    "PoolUnavailable",
    "Refusal",
    "RefusalReason",
    "Stopped",
    "WorkerFailed",
]


class EvidenceError(RunError):
    """An evidence adapter, its backend or the SQL guard could not give what was asked."""


class Stopped(EvidenceError):
    """The work was asked to stop (its caller is gone)."""


class OutOfTime(Stopped):
    """The work's own time budget ran out."""


class WorkerFailed(EvidenceError):
    """A child process of :mod:`sre_diag.tools.workers` died, sent an unreadable answer or
    failed with an unexpected error."""


class LogSourceError(EvidenceError):
    """A source failure reduced to a stable code; the cause is logged, never forwarded."""

    def __init__(self, code: AdapterErrorCode) -> None:
        super().__init__(code.value)
        self.code = code


class BodyTooLarge(LogSourceError):
    """An answer over its byte cap: reading stopped there (``UNAVAILABLE``, never ``INTERNAL``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(AdapterErrorCode.UNAVAILABLE)
        self.limit = limit


class LokiAnswerTooLarge(EvidenceError):
    """An answer over :data:`LOKI_BODY_BYTES` (reading stopped there)."""


class PoolUnavailable(EvidenceError):
    """The pool could not hand out a connection in time."""


class LexRefusal(EvidenceError):
    """The text holds something the scanner refuses to classify; ``what`` names it (for logs)."""

    def __init__(self, what: str) -> None:
        super().__init__(what)
        self.what = what




class RefusalReason(StrEnum):
    """Why a statement was refused; stable, short, safe to log and to test against."""

    PARSE_ERROR = "PARSE_ERROR"
    EMPTY = "EMPTY"
    MULTIPLE_STATEMENTS = "MULTIPLE_STATEMENTS"
    NOT_SELECT = "NOT_SELECT"
    COMMENT_HINT = "COMMENT_HINT"
    INTO_CLAUSE = "INTO_CLAUSE"
    LOCKING_READ = "LOCKING_READ"
    VARIABLE = "VARIABLE"
    FORBIDDEN_FUNCTION = "FORBIDDEN_FUNCTION"
    SYSTEM_SCHEMA = "SYSTEM_SCHEMA"
    OTHER_DATABASE = "OTHER_DATABASE"
    TABLE_NOT_ALLOWED = "TABLE_NOT_ALLOWED"
    SECRET_COLUMN = "SECRET_COLUMN"
    UNSUPPORTED_SYNTAX = "UNSUPPORTED_SYNTAX"
    LEXICAL = "LEXICAL"
    TOO_COMPLEX = "TOO_COMPLEX"
    STAR_NOT_TOP_LEVEL = "STAR_NOT_TOP_LEVEL"
    EXPENSIVE_PATTERN = "EXPENSIVE_PATTERN"
    RENDER_MISMATCH = "RENDER_MISMATCH"
    TEXT_EXTRACTION = "TEXT_EXTRACTION"
    EXPRESSION_TOO_LARGE = "EXPRESSION_TOO_LARGE"


class BoundViolation(EvidenceError):
    """The typed pass refuses: ``reason`` is the refusal's code, raised as it is shown."""

    def __init__(self, reason: RefusalReason, detail: str) -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.detail = detail


class Refusal(EvidenceError):
    """Internal short-circuit carrying the first refusal found."""

    def __init__(self, reason: RefusalReason, detail: str = "") -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.detail = detail
