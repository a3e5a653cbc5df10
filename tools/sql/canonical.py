"""Canonical text of a SQL statement, so that equivalent queries are recognised as duplicates.

It runs in the harness before the guard, on the model's text, so it is bounded like the guard:
a statement the guard's own pre-scan refuses (too long, too deeply nested, a comment, a
character it cannot classify) is never parsed here, and any parser failure, ``RecursionError``
included, falls back to the whitespace-folded text. The call never raises; the guard then
gives the classified refusal (``FORBIDDEN_QUERY``).
"""

from __future__ import annotations

import re

import sqlglot

from sre_diag.tools.sql.lexer import scan_raw

__all__ = ["MAX_CANONICAL_CHARS", "canonical_sql"]

# The guard's own bound on the model's text (sre_diag.tools.sql.guard.MAX_SQL_CHARS).
MAX_CANONICAL_CHARS = 4000
_WS = re.compile(r"\s+")


def canonical_sql(sql: str) -> str:
    """sqlglot's normalised MySQL rendering; whitespace-folded text when it does not parse."""
    folded = _WS.sub(" ", sql[: MAX_CANONICAL_CHARS * 4]).strip().rstrip(";").casefold()
    if len(sql) > MAX_CANONICAL_CHARS:
        return folded
    try:
        scan_raw(sql)  # bounds nesting depth before the recursive parser sees the text
        statements = sqlglot.parse(sql, read="mysql")
        rendered = [s.sql(dialect="mysql", normalize=True) for s in statements if s is not None]
    except Exception:  # LexRefusal, RecursionError, parser errors: the guard classifies it
        rendered = []
    return ";".join(rendered) if rendered else folded
