"""Driver values as JSON scalars, and the small text helpers of the row projection.

:func:`to_json_scalar` turns what aiomysql hands back (decimals, dates, ``TIME`` durations,
bytes, sets) into a JSON scalar; strings are bounded and redacted by the adapter afterwards.
"""

from __future__ import annotations

import math
from datetime import date, datetime, time, timedelta
from decimal import Decimal

from sre_diag.tools.schemas import JsonScalar

__all__ = ["cell_bytes", "to_json_scalar", "unique_names", "without_last_token"]


def without_last_token(text: str) -> str:
    """``text`` without its trailing run of non-blank characters (linear, from the end)."""
    end = len(text)
    while end and not text[end - 1].isspace():
        end -= 1
    return text[:end]


def cell_bytes(value: object) -> int:
    if isinstance(value, str | bytes | bytearray):
        return len(value)
    return 8


def to_json_scalar(value: object) -> JsonScalar:
    """A driver value as a JSON scalar (strings are not yet bounded or redacted)."""
    if value is None or isinstance(value, bool | int | str):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Decimal):
        return _decimal(value)
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, timedelta):
        return _duration(value)
    if isinstance(value, bytes | bytearray | memoryview):
        return f"<binary {len(value)} bytes>"
    if isinstance(value, set | frozenset):
        return ",".join(sorted(str(item) for item in value))
    return str(value)


def _decimal(value: Decimal) -> JsonScalar:
    """Integral decimals (``SUM`` of integers) as ints, others as floats, non-finite as text."""
    if not value.is_finite():
        return str(value)
    if value == value.to_integral_value() and abs(value) < 2**53:
        return int(value)
    return float(value)


def _duration(value: timedelta) -> str:
    """A MySQL ``TIME`` value (the driver's timedelta) as ``[-]HH:MM:SS[.ffffff]``."""
    sign = "-" if value < timedelta(0) else ""
    micros = abs(value) // timedelta(microseconds=1)
    seconds, fraction = divmod(micros, 1_000_000)
    hours, rest = divmod(seconds, 3600)
    minutes, secs = divmod(rest, 60)
    text = f"{sign}{hours:02d}:{minutes:02d}:{secs:02d}"
    return f"{text}.{fraction:06d}" if fraction else text


def unique_names(columns: list[str]) -> list[str]:
    """Column labels made unique (``id``, ``id#2``) so joined rows lose no cell."""
    seen: dict[str, int] = {}
    names: list[str] = []
    for column in columns:
        seen[column] = seen.get(column, 0) + 1
        names.append(column if seen[column] == 1 else f"{column}#{seen[column]}")
    return names
