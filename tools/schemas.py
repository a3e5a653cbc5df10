"""Typed business inputs of the three tools and their whitelisted observation items.

Inputs are what the model sends inside the Envelope's ``input`` (CONTRACTS §3); unknown fields
are rejected. Each input knows its canonical form (for duplicate detection) and a short scope
label (for progress and Slack). Items are the only shapes an observation may carry.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime, timedelta
from enum import StrEnum
from typing import Annotated, Self

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, model_validator

_WS = re.compile(r"\s+")

JsonScalar = str | int | float | bool | None


class _Input(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    def canonical(self) -> str:
        """A stable text such that equivalent requests compare equal."""
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, ensure_ascii=False)

    def scope(self) -> str:
        """A short human label of what this request looks at."""
        raise NotImplementedError


class KnowledgeInput(_Input):
    """Search the runbooks."""

    query: Annotated[str, Field(min_length=1, max_length=500, description="what to look up")]
    top_k: Annotated[int, Field(ge=1, le=5, description="how many sections")] = 3

    @model_validator(mode="after")
    def _not_blank(self) -> Self:
        if not self.query.strip():
            raise ValueError("query must not be blank")
        return self

    def canonical(self) -> str:
        text = _WS.sub(" ", self.query).strip().casefold()
        return json.dumps({"query": text, "top_k": self.top_k}, ensure_ascii=False)

    def scope(self) -> str:
        return f"“{_WS.sub(' ', self.query).strip()[:60]}” top {self.top_k}"


class LogLevel(StrEnum):
    """Log levels a query may filter on."""

    ERROR = "ERROR"
    WARN = "WARN"
    INFO = "INFO"
    DEBUG = "DEBUG"


MAX_LOG_WINDOW = timedelta(hours=24)
# Instants a window may touch, in UTC: a day inside what ``datetime`` can hold, so that the
# adapters' hour arithmetic (and any window of at most 24 h) never overflows.
EARLIEST_INSTANT = datetime.min.replace(tzinfo=UTC) + timedelta(days=1)
LATEST_INSTANT = datetime.max.replace(tzinfo=UTC) - timedelta(days=1)


def _in_calendar(value: datetime, name: str) -> datetime:
    """``value`` in UTC, or a validation error when it has none (``0001-01-01T00:10+01:00``
    is before year 1 in UTC) or lies at the calendar's very edge."""
    try:
        utc = value.astimezone(UTC)
    except (OverflowError, ValueError):
        raise ValueError(f"{name} is outside the supported calendar") from None
    if not EARLIEST_INSTANT <= utc <= LATEST_INSTANT:
        raise ValueError(f"{name} is outside the supported calendar")
    return utc


SERVICE_PATTERN = r"^[A-Za-z0-9_.:-]+$"
SERVICE_CHARS = 100
SERVICE_NAME = re.compile(r"[A-Za-z0-9_.:-]{1,100}")
"""A name ``query_logs`` accepts as its ``service`` (use with ``fullmatch``)."""


class LogsInput(_Input):
    """Search one service's logs in a bounded time window."""

    service: Annotated[str, Field(min_length=1, max_length=SERVICE_CHARS, pattern=SERVICE_PATTERN)]
    start: Annotated[AwareDatetime, Field(description="RFC 3339 start, inclusive")]
    end: Annotated[AwareDatetime, Field(description="RFC 3339 end, exclusive")]
    contains: Annotated[str | None, Field(min_length=1, max_length=200)] = None
    level: LogLevel | None = None
    limit: Annotated[int, Field(ge=1, le=50)] = 20

    @model_validator(mode="after")
    def _window(self) -> Self:
        _in_calendar(self.start, "start")
        _in_calendar(self.end, "end")
        if self.start >= self.end:
            raise ValueError("start must be before end")
        if self.end - self.start > MAX_LOG_WINDOW:
            raise ValueError("window must be at most 24 hours")
        return self

    def canonical(self) -> str:
        return json.dumps(
            {
                "service": self.service,
                "start": self.start.astimezone(UTC).isoformat(),
                "end": self.end.astimezone(UTC).isoformat(),
                "contains": self.contains,
                "level": self.level,
                "limit": self.limit,
            },
            ensure_ascii=False,
        )

    def scope(self) -> str:
        parts = [self.service]
        if self.level is not None:
            parts.append(self.level.value)
        if self.contains is not None:
            parts.append(f"“{self.contains[:40]}”")
        start, end = self.start.astimezone(UTC), self.end.astimezone(UTC)
        parts.append(f"{start:%H:%M}–{end:%H:%M} UTC")
        return " · ".join(parts)


class MysqlInput(_Input):
    """One read-only SELECT against the business database."""

    sql: Annotated[str, Field(min_length=1, max_length=4000, description="one SELECT statement")]
    purpose: Annotated[str, Field(min_length=1, max_length=200, description="why this query")]

    def canonical(self) -> str:
        # Equivalence is about the statement, not the stated purpose.
        from sre_diag.tools.sql.canonical import canonical_sql

        return canonical_sql(self.sql)

    def scope(self) -> str:
        return _WS.sub(" ", self.purpose).strip()[:80]


class _Item(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class KnowledgeItem(_Item):
    """One runbook section."""

    title: str
    heading: str
    path: str
    score: float
    snippet: str


class LogItem(_Item):
    """One log line."""

    ts: str
    service: str
    level: str
    message: str


class LogBuckets(_Item):
    """Matching lines per fixed-width time bucket, the first starting at ``start``."""

    start: str
    width_seconds: int
    counts: list[int]


class LogPattern(_Item):
    """One message pattern (variable parts masked as ``<*>``) and when it was seen."""

    pattern: str
    count: int
    first_ts: str
    last_ts: str


class LogSummary(_Item):
    """``query_logs``' summary of every matching line of the window (CONTRACTS §4).

    ``exact`` is false where counts or patterns come from an estimate or a sample (Loki), or
    where the window held more distinct messages than are tracked.
    """

    matched: int
    exact: bool
    first_ts: str | None
    last_ts: str | None
    buckets: LogBuckets
    top_messages: list[LogPattern]


class MysqlRow(_Item):
    """One result row: column name to a bounded, masked cell."""

    cells: dict[str, JsonScalar]
