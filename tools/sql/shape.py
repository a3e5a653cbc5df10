"""The shape of one SQL expression, and the fixed limits of the typed pass checked on shapes.

A :class:`Shape` says what an expression can carry: column text (``tainted``), at most ``size``
bytes, and whether column text may stand beside another value (``mixed``). This module holds the
value, the fixed limits (never shown to the model: a refusal names the class only), the refusal
classes the typed pass raises, and the small rules that combine shapes or check them against
the limits: how candidates join, where column text may be glued to a literal, how large a date
format's output can be, how much string matching may cost. They need no walk of the statement;
:mod:`sre_diag.tools.sql.bounds` walks the checked tree, gives every expression its shape and
applies these rules.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from sqlglot import exp

from sre_diag.tools.errors import BoundViolation, RefusalReason

__all__ = [
    "COMPLEX",
    "EXPENSIVE",
    "MAX_CAST_LENGTH",
    "MAX_KEY_BYTES",
    "MAX_MATCH_WORK",
    "MAX_ROW_BYTES",
    "MAX_STRING_ARG_BYTES",
    "TEXT_EXTRACTION",
    "TOO_LARGE",
    "UNEXPANDABLE",
    "Shape",
    "bounded_arg",
    "bounded_args",
    "bounded_key",
    "bounded_work",
    "compared",
    "concatenated",
    "first_int",
    "format_size",
    "join_shapes",
    "literal_underscores",
    "require_safe_separator",
    "union_shapes",
    "untainted",
    "whole_of",
]

# Fixed limits (never shown to the model: the refusal names the class only).
MAX_ROW_BYTES = 64 * 1024
MAX_STRING_ARG_BYTES = 8 * 1024
MAX_KEY_BYTES = 8 * 1024
MAX_MATCH_WORK = 2 * 1024 * 1024
MAX_CAST_LENGTH = 1024
# Characters that never occur inside a token redaction recognises: gluing them to column text
# keeps the token's boundaries.
_SAFE_NEIGHBOURS = frozenset(" \t\n,;|@#()[]{}<>!?")
# The largest output of one DATE_FORMAT directive (``%W`` Wednesday, ``%M`` September).
_DIRECTIVE_BYTES = 10

TEXT_EXTRACTION = RefusalReason.TEXT_EXTRACTION
TOO_LARGE = RefusalReason.EXPRESSION_TOO_LARGE
UNEXPANDABLE = RefusalReason.UNSUPPORTED_SYNTAX
EXPENSIVE = RefusalReason.EXPENSIVE_PATTERN
COMPLEX = RefusalReason.TOO_COMPLEX


@dataclass(frozen=True, slots=True)
class Shape:
    """What an expression can carry: text from a column (``tainted``) and at most ``size`` B;
    ``mixed``: column text that may also be another value (a literal of the statement), which
    must never be compared with it (MIN/MAX, ORDER BY, GROUP BY, DISTINCT)."""

    tainted: bool
    size: int
    mixed: bool = False


def whole_of(args: list[Shape]) -> Shape:
    """One of the arguments, whole: column text stays column text, and is ``mixed`` when another
    argument is not column text (``IF(c, note, 'guess')``)."""
    tainted = any(a.tainted for a in args)
    mixed = any(a.mixed for a in args) or (tainted and not all(a.tainted for a in args))
    return Shape(tainted, max((a.size for a in args), default=0), mixed)


def join_shapes(a: Shape, b: Shape) -> Shape:
    """Two candidates for one name (the pass does not scope names): what either can carry."""
    return Shape(a.tainted or b.tainted, max(a.size, b.size), a.mixed or b.mixed)


def union_shapes(a: Shape, b: Shape) -> Shape:
    """One position of a set operation: column text beside another value is ``mixed``."""
    mixed = a.mixed or b.mixed or a.tainted != b.tainted
    return Shape(a.tainted or b.tainted, max(a.size, b.size), mixed)


def untainted(args: list[Shape], what: str) -> None:
    if any(arg.tainted for arg in args):
        raise BoundViolation(TEXT_EXTRACTION, f"{what} over column text")


def compared(args: list[Shape], what: str) -> None:
    """Column text that may be one of the statement's own values must not be ordered against
    them: the order (or the MIN/MAX) would say how the text compares with a guess."""
    if any(arg.mixed for arg in args):
        raise BoundViolation(TEXT_EXTRACTION, f"{what} compares column text with other values")


def format_size(node: exp.Expr) -> int:
    """Bytes a date format can produce; the format must be a string literal."""
    if not (isinstance(node, exp.Literal) and node.is_string):
        raise BoundViolation(TEXT_EXTRACTION, "a format must be a string literal")
    text, size, index = str(node.this), 0, 0
    while index < len(text):
        if text[index] == "%" and index + 1 < len(text):
            size, index = size + _DIRECTIVE_BYTES, index + 2
            continue
        size, index = size + len(text[index].encode()), index + 1
    return size + 2


def literal_underscores(text: str) -> str:
    """``DB_POOL%`` → ``DB\\_POOL%``: an underscore matches itself, never any character."""
    out: list[str] = []
    index = 0
    while index < len(text):
        char = text[index]
        if char == "\\" and index + 1 < len(text):
            out.append(text[index : index + 2])
            index += 2
            continue
        out.append("\\_" if char == "_" else char)
        index += 1
    return "".join(out)


def first_int(params: Iterable[exp.Expr]) -> int | None:
    for param in params:
        value = param.this if isinstance(param, exp.DataTypeParam) else param
        if isinstance(value, exp.Literal) and str(value.this).isdigit():
            return int(value.this)
    return None


def bounded_arg(size: int) -> None:
    if size > MAX_STRING_ARG_BYTES:
        raise BoundViolation(TOO_LARGE, "string argument too large")


def bounded_args(args: list[Shape]) -> None:
    for arg in args:
        bounded_arg(arg.size)


def bounded_work(work: int, what: str) -> None:
    if work > MAX_MATCH_WORK:
        raise BoundViolation(TOO_LARGE, f"{what}: string matching too expensive")


def bounded_key(size: int, what: str) -> None:
    if size > MAX_KEY_BYTES:
        raise BoundViolation(TOO_LARGE, f"{what} too large")


def require_safe_separator(separator: exp.Expr) -> None:
    if not _safe_literal(separator, first=True) or not _safe_literal(separator, first=False):
        raise BoundViolation(TEXT_EXTRACTION, "separator next to column text")


def _safe_literal(node: exp.Expr | None, *, first: bool) -> bool:
    """A string literal whose character next to the column text keeps redaction's context."""
    if not (isinstance(node, exp.Literal) and node.is_string and node.this):
        return False
    return (node.this[0] if first else node.this[-1]) in _SAFE_NEIGHBOURS


def concatenated(parts: list[tuple[exp.Expr, Shape]]) -> Shape:
    """Column text may only be glued to literals that begin/end with a safe separator."""
    for index, (_, shape) in enumerate(parts):
        bounded_arg(shape.size)
        if not shape.tainted:
            continue
        before = parts[index - 1][0] if index > 0 else None
        after = parts[index + 1][0] if index + 1 < len(parts) else None
        if before is not None and not _safe_literal(before, first=False):
            raise BoundViolation(TEXT_EXTRACTION, "column text glued to another value")
        if after is not None and not _safe_literal(after, first=True):
            raise BoundViolation(TEXT_EXTRACTION, "column text glued to another value")
    return Shape(any(s.tainted for _, s in parts), sum(s.size for _, s in parts))
