"""Result rows as ``query_mysql`` returns them: cells by position, masked, redacted, bounded.

A masked position is ``***`` whatever label the server gave it; every string is redacted
(:func:`sre_diag.tools.redact.redact`) and cut to ``max_cell_chars`` with a visible mark.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from sre_diag.tools.mysql.session import GROUP_CONCAT_MAX_LEN
from sre_diag.tools.mysql.values import to_json_scalar, unique_names, without_last_token
from sre_diag.tools.redact import redact
from sre_diag.tools.schemas import JsonScalar, MysqlRow
from sre_diag.tools.sql.columns import CAP_CHARS
from sre_diag.tools.sql.post import PostOp, apply_post

__all__ = ["MASK", "TRUNCATION_MARK", "RowProjection"]

MASK = "***"
TRUNCATION_MARK = "…[truncated]"


class RowProjection:
    """The projection of one adapter's rows (CPU work: the adapter runs it in a worker thread)."""

    def __init__(self, max_cell_chars: int) -> None:
        self.max_cell_chars = max_cell_chars

    def project(
        self,
        columns: list[str],
        rows: Sequence[Sequence[Any]],
        masked: tuple[bool, ...],
        post: tuple[PostOp | None, ...] = (),
    ) -> list[MysqlRow]:
        """Cells by position: a masked position is ``***`` whatever label the server gave it;
        a position with a post-redaction function gets it applied to the redacted text.

        CPU work (redaction of every cell): runs in a worker thread.
        """
        names = unique_names(columns)
        ops = post or tuple(None for _ in masked)
        return [
            MysqlRow(
                cells={
                    name: MASK if hidden else self._cell(value, op)
                    for name, hidden, value, op in zip(names, masked, row, ops, strict=True)
                }
            )
            for row in rows
        ]

    def _cell(self, value: object, op: PostOp | None = None) -> JsonScalar:
        scalar = to_json_scalar(value)
        if isinstance(scalar, str):
            return self._bounded_text(scalar, op)
        return scalar

    def _bounded_text(self, text: str, op: PostOp | None = None) -> str:
        """Redact, then cut to ``max_cell_chars`` with a visible mark.

        The text is pre-cut with headroom first so that redaction never scans megabytes, and
        redacted before the final cut so a secret is never split out of recognition. A value
        the server may have cut (``GROUP_CONCAT`` stops at ``group_concat_max_len`` bytes, and
        the statement chooses where that falls; a wide text column arrives cut by the guard's
        ``LEFT(col, CAP_CHARS)``) loses its last, possibly partial token before redaction
        whenever that cut lies inside what is redacted and shown.
        """
        limit = self.max_cell_chars
        window = limit * 4 + 256
        head = text[:window]
        server_cut = len(text) <= window and (
            len(text) == CAP_CHARS
            or len(text.encode("utf-8", "surrogatepass")) >= GROUP_CONCAT_MAX_LEN - 3
        )
        if server_cut:
            head = without_last_token(head)
        cleaned = redact(head)
        if op is not None:
            cleaned = apply_post(op, cleaned)
            if len(cleaned) <= limit and not server_cut and len(text) <= window:
                return cleaned
        if server_cut or len(cleaned) > limit or len(text) > window:
            return cleaned[:limit] + TRUNCATION_MARK
        return cleaned
