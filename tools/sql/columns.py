"""The allowed tables' columns as the SQL guard's typed pass sees them (no sqlglot needed).

Each column of ``information_schema.COLUMNS`` becomes a :class:`ColumnShape`: its kind (free
text, a label, a number, a time) and the most bytes one value can carry. ``query_mysql`` reads
them with the account's privilege verdict, before any statement is checked, so a run that never
checks a statement never imports the parser (:mod:`sre_diag.tools.sql.bounds` is the typed pass
itself and re-exports these names).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "CAP_BYTES",
    "CAP_CHARS",
    "NUMBER_BYTES",
    "TEMPORAL_BYTES",
    "ColumnShape",
    "Schema",
    "ValueKind",
    "column_shape",
]

# A bare outermost text column wider than this is sent as ``LEFT(col, CAP_CHARS) AS col``: the
# guard's own cut, from the value's start, far past what the adapter redacts and shows.
CAP_CHARS = 4096
CAP_BYTES = CAP_CHARS * 4
NUMBER_BYTES = 40
"""The most bytes a number (or a value computed only from numbers) can carry."""
TEMPORAL_BYTES = 64
"""The most bytes a date, time or timestamp can carry."""


class ValueKind(StrEnum):
    """How a column's values behave for the typed pass."""

    TEXT = "TEXT"  # free text or bytes: may hold a credential (tainted)
    LABEL = "LABEL"  # ENUM / SET: values fixed by the DDL
    NUMBER = "NUMBER"
    TEMPORAL = "TEMPORAL"


@dataclass(frozen=True, slots=True)
class ColumnShape:
    """One column of an allowed table: its name, kind, largest value in bytes, and whether it
    is classified secret (by its schema name or ``DIAG_MYSQL_SECRET_COLUMNS``)."""

    name: str
    kind: ValueKind
    max_bytes: int
    secret: bool = False


Schema = Mapping[str, tuple[ColumnShape, ...]]

_TEXT_TYPES = frozenset({
    "char", "varchar", "tinytext", "text", "mediumtext", "longtext", "json", "binary",
    "varbinary", "tinyblob", "blob", "mediumblob", "longblob", "inet6", "uuid", "geometry",
})  # fmt: skip
_TEMPORAL_TYPES = frozenset({"date", "datetime", "timestamp", "time", "year"})
_NUMBER_TYPES = frozenset({
    "tinyint", "smallint", "mediumint", "int", "integer", "bigint", "decimal", "numeric",
    "float", "double", "real", "bit", "bool", "boolean",
})  # fmt: skip


def column_shape(
    name: str, data_type: str, octet_length: int | None, *, secret: bool = False
) -> ColumnShape:
    """The shape of a column from ``information_schema.COLUMNS`` (unknown types are text)."""
    kind_name = data_type.strip().lower()
    if kind_name in _NUMBER_TYPES:
        return ColumnShape(name, ValueKind.NUMBER, NUMBER_BYTES, secret)
    if kind_name in _TEMPORAL_TYPES:
        return ColumnShape(name, ValueKind.TEMPORAL, TEMPORAL_BYTES, secret)
    size = octet_length if octet_length is not None and octet_length > 0 else 2**32
    kind = ValueKind.LABEL if kind_name in {"enum", "set"} else ValueKind.TEXT
    return ColumnShape(name, kind, size, secret)
