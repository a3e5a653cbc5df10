"""The guard's verdicts: allowed (with the checked tree) or refused (with a stable reason).

:class:`RefusalReason` is short, stable and safe to log and to test against; :class:`Refusal` is
the internal short-circuit the checks raise at the first violation, turned into :class:`Refused`
by :func:`plugin.tools.sql.guard.check_sql`.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from sqlglot import exp

__all__ = ["Allowed", "GuardDecision", "Refusal", "RefusalReason", "Refused"]


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


@dataclass(frozen=True, slots=True)
class Allowed:
    """The statement may run; ``expression`` is the checked (and normalised) tree."""

    expression: exp.Query


@dataclass(frozen=True, slots=True)
class Refused:
    """The statement must not reach the server; ``detail`` is for logs only."""

    reason: RefusalReason
    detail: str = ""


GuardDecision = Allowed | Refused


class Refusal(Exception):
    """Internal short-circuit carrying the first refusal found."""

    def __init__(self, reason: RefusalReason, detail: str = "") -> None:
        super().__init__(reason.value)
        self.reason = reason
        self.detail = detail
