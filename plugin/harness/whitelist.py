"""The per-tool whitelist projection at the Tool boundary (CONTRACTS §4).

Every successful adapter result passes here before it becomes an observation: the harness
itself, not each adapter's discipline, guarantees what a READY observation may carry. For each
tool only its own item shape is read — by field name, from an item model or a mapping; any other
field an item holds (a password, a raw backend response, a traceback) is never read, so it can
never reach the model. Every field read is bounded: text cut to its bound with a visible mark,
numbers finite and within range, lists cut to their length. An item the tool's shape cannot be
read from — another tool's item, a field missing or of the wrong type, an object that is no
item at all — makes the whole result unusable: :class:`Unprojectable`, which the interceptor
answers ``ERROR INTERNAL`` (its reason names the field, never a value).

``query_logs`` alone carries a ``summary`` and ``first_items`` (the oldest matching lines, in
the items' shape); another tool's result carrying them has them dropped, like any unknown field.

The bounds are at least what the shipped adapters produce (``tests/harness`` checks it against
their own constants), so a well-behaved adapter's result passes unchanged.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel

from sre_diag.errors import RunError
from sre_diag.tools.base import Ready, ToolName
from sre_diag.tools.schemas import (
    JsonScalar,
    KnowledgeItem,
    LogBuckets,
    LogItem,
    LogPattern,
    LogSummary,
    MysqlRow,
)

__all__ = [
    "BOUNDS",
    "MAX_FIRST_ITEMS",
    "MAX_ITEMS",
    "TRUNCATION_MARK",
    "Projected",
    "Unprojectable",
    "project",
]

TRUNCATION_MARK = "…[truncated]"

MAX_ITEMS = 1000
"""Items read from one result (``DIAG_MYSQL_MAX_ROWS`` is at most 1000); more are left out."""
MAX_FIRST_ITEMS = 3
"""``first_items`` read from a ``query_logs`` result (CONTRACTS §4: up to 3)."""

BOUNDS: Mapping[str, int] = {
    "label": 200,  # a runbook title or heading
    "path": 1024,  # a runbook path inside the knowledge folder
    "snippet": 400,
    "ts": 64,  # an RFC 3339 timestamp
    "log_label": 100,  # a service or level as shown
    "message": 500,
    "column": 300,  # a column label (MySQL allows 256 characters) and its "#2" suffix
    "cell": 1000,
    "cells": 512,  # columns of one row
    "pattern": 160,
    "buckets": 60,
    "top_messages": 5,
}
"""Characters of each text, and lengths of each list, a projected field may have."""

_MAX_INT = 2**64
"""The largest magnitude of an integer field (a MySQL ``BIGINT UNSIGNED``)."""


class Unprojectable(RunError):
    """An adapter result that does not fit its tool's whitelist; ``reason`` names the field
    or the shape, never a value."""

    def __init__(self, reason: str) -> None:
        self.reason = reason
        super().__init__(reason)


@dataclass(frozen=True, slots=True)
class Projected:
    """A result as the whitelist lets it through."""

    items: tuple[BaseModel, ...]
    truncated: bool
    summary: LogSummary | None = None
    first_items: tuple[BaseModel, ...] = ()


_MISSING = object()


def _field(item: object, name: str) -> Any:
    """One field of an item, read by name and nothing else of it."""
    if isinstance(item, Mapping):
        value = item.get(name, _MISSING)
    elif isinstance(item, BaseModel):
        value = getattr(item, name, _MISSING)
    else:
        raise Unprojectable(f"{type(item).__name__} is not an item")
    if value is _MISSING:
        raise Unprojectable(f"field {name} missing")
    return value


def _text(value: object, limit: int, name: str) -> str:
    if not isinstance(value, str):
        raise Unprojectable(f"field {name} is not text")
    if len(value) <= limit:
        return value[:]  # a plain str whatever subclass came
    return value[: limit - len(TRUNCATION_MARK)] + TRUNCATION_MARK


def _optional_text(value: object, limit: int, name: str) -> str | None:
    return None if value is None else _text(value, limit, name)


def _count(value: object, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < _MAX_INT:
        raise Unprojectable(f"field {name} is not a count")
    return int(value)


def _flag(value: object, name: str) -> bool:
    if not isinstance(value, bool):
        raise Unprojectable(f"field {name} is not a boolean")
    return bool(value)


def _number(value: object, name: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise Unprojectable(f"field {name} is not a number")
    number = float(value)
    if not math.isfinite(number):
        raise Unprojectable(f"field {name} is not a finite number")
    return number


def _list(value: object, limit: int, name: str) -> list[Any]:
    if isinstance(value, str | bytes) or not isinstance(value, Sequence):
        raise Unprojectable(f"field {name} is not a list")
    return list(value[:limit])


def _scalar(value: object) -> JsonScalar:
    """One MySQL cell: null, a boolean, a bounded integer, a finite number or bounded text."""
    if value is None or isinstance(value, bool):
        return value
    if isinstance(value, int):
        if abs(value) > _MAX_INT:
            raise Unprojectable("a cell's integer is out of range")
        return int(value)
    if isinstance(value, float):
        return _number(value, "cell")
    return _text(value, BOUNDS["cell"], "cell")


# -- the three item shapes ------------------------------------------------------------------


def _knowledge(item: object) -> KnowledgeItem:
    return KnowledgeItem(
        title=_text(_field(item, "title"), BOUNDS["label"], "title"),
        heading=_text(_field(item, "heading"), BOUNDS["label"], "heading"),
        path=_text(_field(item, "path"), BOUNDS["path"], "path"),
        score=_number(_field(item, "score"), "score"),
        snippet=_text(_field(item, "snippet"), BOUNDS["snippet"], "snippet"),
    )


def _log(item: object) -> LogItem:
    return LogItem(
        ts=_text(_field(item, "ts"), BOUNDS["ts"], "ts"),
        service=_text(_field(item, "service"), BOUNDS["log_label"], "service"),
        level=_text(_field(item, "level"), BOUNDS["log_label"], "level"),
        message=_text(_field(item, "message"), BOUNDS["message"], "message"),
    )


def _row(item: object) -> MysqlRow:
    cells = _field(item, "cells")
    if not isinstance(cells, Mapping):
        raise Unprojectable("field cells is not an object")
    projected: dict[str, JsonScalar] = {}
    for key, value in list(cells.items())[: BOUNDS["cells"]]:
        projected[_text(key, BOUNDS["column"], "column")] = _scalar(value)
    return MysqlRow(cells=projected)


_SHAPES: Mapping[ToolName, tuple[type[BaseModel], Callable[[object], BaseModel]]] = {
    ToolName.LOOKUP_KNOWLEDGE: (KnowledgeItem, _knowledge),
    ToolName.QUERY_LOGS: (LogItem, _log),
    ToolName.QUERY_MYSQL: (MysqlRow, _row),
}

# Models that are never an item of any tool.
_NOT_ITEMS: tuple[type[BaseModel], ...] = (LogSummary, LogBuckets, LogPattern)


def _item(tool: ToolName, item: object) -> BaseModel:
    own, read = _SHAPES[tool]
    foreign = tuple(shape for name, (shape, _) in _SHAPES.items() if name is not tool)
    if isinstance(item, foreign + _NOT_ITEMS) and not isinstance(item, own):
        raise Unprojectable(f"{type(item).__name__} is another tool's item")
    return read(item)


def _items(tool: ToolName, value: object, limit: int, name: str) -> tuple[list[BaseModel], bool]:
    """The items of a list field, and whether any was left out for the bound."""
    whole = _list(value, limit + 1, name)
    return [_item(tool, item) for item in whole[:limit]], len(whole) > limit


# -- the query_logs summary -----------------------------------------------------------------


def _pattern(value: object) -> LogPattern:
    return LogPattern(
        pattern=_text(_field(value, "pattern"), BOUNDS["pattern"], "pattern"),
        count=_count(_field(value, "count"), "count"),
        first_ts=_text(_field(value, "first_ts"), BOUNDS["ts"], "first_ts"),
        last_ts=_text(_field(value, "last_ts"), BOUNDS["ts"], "last_ts"),
    )


def _buckets(value: object) -> LogBuckets:
    counts = _list(_field(value, "counts"), BOUNDS["buckets"], "counts")
    return LogBuckets(
        start=_text(_field(value, "start"), BOUNDS["ts"], "start"),
        width_seconds=_count(_field(value, "width_seconds"), "width_seconds"),
        counts=[_count(count, "counts") for count in counts],
    )


def _summary(value: object) -> LogSummary:
    top = _list(_field(value, "top_messages"), BOUNDS["top_messages"], "top_messages")
    return LogSummary(
        matched=_count(_field(value, "matched"), "matched"),
        exact=_flag(_field(value, "exact"), "exact"),
        first_ts=_optional_text(_field(value, "first_ts"), BOUNDS["ts"], "first_ts"),
        last_ts=_optional_text(_field(value, "last_ts"), BOUNDS["ts"], "last_ts"),
        buckets=_buckets(_field(value, "buckets")),
        top_messages=[_pattern(pattern) for pattern in top],
    )


def project(tool: ToolName, result: Ready) -> Projected:
    """``result`` through ``tool``'s whitelist; raises :class:`Unprojectable`."""
    items, more = _items(tool, result.items, MAX_ITEMS, "items")
    truncated = bool(result.truncated) or more
    if tool is not ToolName.QUERY_LOGS:
        return Projected(tuple(items), truncated)
    summary = None if result.summary is None else _summary(result.summary)
    first, more_first = _items(tool, result.first_items, MAX_FIRST_ITEMS, "first_items")
    return Projected(tuple(items), truncated or more_first, summary, tuple(first))
