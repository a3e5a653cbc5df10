"""What a log source returns and how it fails: records, pages, the source protocol.

A :class:`LogSource` searches one service's lines in a window and answers a :class:`LogPage`
(at most ``limit`` :class:`LogRecord` newest first, with the summary of every match), or raises
:class:`LogSourceError` carrying a stable code, never backend text.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Protocol

from sre_diag.tools.base import ProbeReport
from sre_diag.tools.errors import LogSourceError
from sre_diag.tools.schemas import LogsInput, LogSummary

__all__ = [
    "FIRST_ITEMS",
    "MASK_SECONDS",
    "MAX_LINE_BYTES",
    "LogPage",
    "LogRecord",
    "LogSource",
    "LogSourceError",
    "newest_page",
]

MAX_LINE_BYTES = 64 * 1024
FIRST_ITEMS = 3  # the oldest matches a page carries beside the newest (the onset)
MASK_SECONDS = 5.0  # masking one summary's pattern keys, at most (then exact: false)


@dataclass(frozen=True, slots=True)
class LogRecord:
    """One matched line as a source returns it, before projection."""

    ts: datetime
    service: str
    level: str
    message: str


@dataclass(frozen=True, slots=True)
class LogPage:
    """At most ``limit`` records, newest first; ``truncated`` when more matched; the
    ``summary`` of every match (see :mod:`sre_diag.tools.logs.summary`); ``first_items``, the
    oldest :data:`FIRST_ITEMS` matches, oldest first (ties in the order read)."""

    items: list[LogRecord]
    truncated: bool
    summary: LogSummary | None = None
    first_items: list[LogRecord] = field(default_factory=list)


class LogSource(Protocol):
    """Where log lines come from."""

    async def search(self, q: LogsInput) -> LogPage:
        """Return matches newest first; raise :class:`LogSourceError` on failure."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...

    async def probe(self) -> ProbeReport:
        """For ``check``: reach the source once, bounded (:mod:`sre_diag.tools.logs.probe`)."""
        ...


def newest_page(records: list[LogRecord], limit: int) -> LogPage:
    """The newest ``limit`` of ``records`` and their oldest :data:`FIRST_ITEMS` (both stable:
    ties in the order given)."""
    ordered = sorted(records, key=lambda r: r.ts, reverse=True)
    return LogPage(
        items=ordered[:limit],
        truncated=len(ordered) > limit,
        first_items=sorted(records, key=lambda r: r.ts)[:FIRST_ITEMS],
    )
