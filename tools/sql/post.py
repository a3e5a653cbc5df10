"""Text functions the adapter applies AFTER redaction: ``LEFT``, ``RIGHT``, ``SUBSTRING_INDEX``,
``LOWER``, ``UPPER`` of a bare text column in the outermost select list.

Cutting or re-casing column text on the server would hand redaction a piece it cannot recognise
(``LEFT(note, 12)`` keeps ``sk_live_abcd`` of a key whose pattern needs more, a delimiter chosen
inside a token splits it). So such a projection is sent as the column itself, whole (under the
guard's own cap), and the adapter redacts the value first and then cuts or re-cases the redacted
text: the model gets what it asked for, computed on what it may see. The rewriting itself is
:mod:`sre_diag.tools.sql.lift` (this module needs no parser: the adapter imports it).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = ["PostKind", "PostOp", "apply_post"]


class PostKind(StrEnum):
    """Which function the adapter applies to the redacted text."""

    LEFT = "LEFT"
    RIGHT = "RIGHT"
    SUBSTRING_INDEX = "SUBSTRING_INDEX"
    LOWER = "LOWER"
    UPPER = "UPPER"


@dataclass(frozen=True, slots=True)
class PostOp:
    """One function over one output position: ``count`` characters or parts, ``delimiter``."""

    kind: PostKind
    count: int = 0
    delimiter: str = ""


def apply_post(op: PostOp, text: str) -> str:
    """The function's MySQL meaning, on the redacted text."""
    if op.kind is PostKind.LEFT:
        return text[: max(op.count, 0)]
    if op.kind is PostKind.RIGHT:
        return text[-op.count :] if op.count > 0 else ""
    if op.kind is PostKind.LOWER:
        return text.lower()
    if op.kind is PostKind.UPPER:
        return text.upper()
    parts = text.split(op.delimiter)
    if op.count > 0:
        return op.delimiter.join(parts[: op.count])
    return op.delimiter.join(parts[op.count :]) if op.count < 0 else ""
