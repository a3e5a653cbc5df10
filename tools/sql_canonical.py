"""Canonical text of a SQL statement, so that equivalent queries are recognised as duplicates."""

from __future__ import annotations

import re

import sqlglot
from sqlglot.errors import SqlglotError

_WS = re.compile(r"\s+")


def canonical_sql(sql: str) -> str:
    """sqlglot's normalised MySQL rendering; whitespace-folded text when it does not parse."""
    try:
        statements = sqlglot.parse(sql, read="mysql")
        rendered = [s.sql(dialect="mysql", normalize=True) for s in statements if s is not None]
    except SqlglotError:
        rendered = []
    if not rendered:
        return _WS.sub(" ", sql).strip().rstrip(";").casefold()
    return ";".join(rendered)
