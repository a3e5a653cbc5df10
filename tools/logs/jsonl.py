"""The folder log source: ``<folder>/<service>/<YYYY-MM-DD>/<HH>.jsonl``, scanned per window.

Folder layout (:class:`JsonlLogSource`)::

    <folder>/<service>/<YYYY-MM-DD>/<HH>.jsonl      one file per service and UTC hour

Each line is one JSON object: ``ts`` (RFC 3339 with offset), ``service``, ``level``
(``ERROR``/``WARN``/``INFO``/``DEBUG``), ``message``, optionally ``trace_id`` and any other
attributes (ignored here). A line belongs to the file of its own UTC hour. Lines are usually
sorted by ``ts`` but need not be. The point of the layout is that cost follows the window, not
the history: a query opens only the files of the hours its window touches, newest hour first —
every one of them, because the ``summary`` (:mod:`plugin.tools.logs.summary`) counts every matching
line
of the window exactly, while the items are the newest ``limit`` matches. A file is read 256 KB
at a time; a level or ``contains`` filter is first looked for in the raw bytes
(:class:`Prefilter`), candidates are parsed with orjson (``json.loads`` decides what orjson
refuses), and a batch of regular lines is counted with C loops rather than a Python step per
line (:func:`_fast_batch`; the bench measures the busiest generated hour, 240k lines).
Malformed lines (bad JSON, missing or mistyped fields, naive timestamps, over-long lines) are
skipped and counted, never fatal. Only regular files reached from the folder without following a
link are opened (:func:`open_inside`), and at most the size they had when opened is read. The scan
runs in a worker thread (:func:`plugin.tools.threads.in_thread`) that a cancelled query stops within
one block.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import chain
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import IO, cast

import orjson

from plugin.log import log_failure
from plugin.tools.base import AdapterErrorCode, ProbeReport
from plugin.tools.logs.files import open_inside
from plugin.tools.logs.prefilter import Match, Row, keep_all
from plugin.tools.logs.probe import probe_folder
from plugin.tools.logs.source import (
    MASK_SECONDS,
    MAX_LINE_BYTES,
    LogPage,
    LogRecord,
    LogSourceError,
)
from plugin.tools.logs.summary import Grid, Tally, pattern_keys
from plugin.tools.schemas import SERVICE_NAME, LogsInput
from plugin.tools.threads import OutOfTime, Stop, in_thread

__all__ = [
    "CHUNK_BYTES",
    "SCAN_SECONDS",
    "JsonlLogSource",
    "ReadStats",
    "parse_line",
]

# The package's logger: lines keep the name they had before the package was split.
logger = logging.getLogger(__package__)

CHUNK_BYTES = 256 * 1024  # one C call over a batch holds the GIL for ~1 ms at most
SCAN_SECONDS = 30.0  # one query's scan of the folder, at most (then TIMEOUT)


@dataclass(slots=True)
class ReadStats:
    """Counters a folder source exposes so tests and operators can see what a query cost."""

    files_opened: int = 0
    lines_read: int = 0
    malformed_lines: int = 0
    last_files: tuple[str, ...] = ()


class _Newest:
    """The newest ``keep`` matches seen so far, as a stable sort by time (newest first) of all
    of them would order them, without keeping or sorting all of them."""

    __slots__ = ("floor", "keep", "rows")

    def __init__(self, keep: int) -> None:
        self.keep = keep
        self.rows: list[Row] = []
        self.floor: datetime | None = None  # a match not newer than this cannot make the page

    def add(self, row: Row) -> None:
        if self.floor is not None and row[0] <= self.floor:
            return
        self.rows.append(row)
        if len(self.rows) >= 4 * self.keep + 64:
            self._compact()

    def _compact(self) -> None:
        self.rows.sort(key=lambda row: row[0], reverse=True)
        del self.rows[self.keep :]
        if len(self.rows) == self.keep:
            self.floor = self.rows[-1][0]

    def records(self) -> list[LogRecord]:
        self._compact()
        return [LogRecord(ts=ts, service=s, level=lv, message=m) for ts, s, lv, m in self.rows]


@dataclass(slots=True)
class _Scan:
    tally: Tally
    newest: _Newest
    files: list[str] = field(default_factory=list)
    lines: int = 0
    malformed: int = 0

    def lines_matched(self, rows: list[Row]) -> None:
        """Matching rows sorted newest first (ties in the order read)."""
        self.tally.add_sorted([row[0] for row in rows], pattern_keys([row[3] for row in rows]))
        for row in rows[: self.newest.keep]:
            self.newest.add(row)


def _hours(start: datetime, end: datetime) -> list[datetime]:
    """The UTC hours touched by ``[start, end)``, newest first."""
    first = start.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    last = (end.astimezone(UTC) - timedelta(microseconds=1)).replace(
        minute=0, second=0, microsecond=0
    )
    hours = []
    while last >= first:
        hours.append(last)
        last -= timedelta(hours=1)
    return hours


def _line_batches(handle: IO[bytes], size: int) -> Iterator[list[bytes | None]]:
    """The lines (without newline) of the file's first ``size`` bytes — its size when it was
    opened: a file growing while it is read, or one that says it is empty and is not, costs
    no more — read :data:`CHUNK_BYTES` at a time; ``None`` for a line longer than
    :data:`MAX_LINE_BYTES` (skipped, never held whole)."""
    carry, overlong = b"", False
    left = size
    while left > 0 and (block := handle.read(min(CHUNK_BYTES, left))):
        left -= len(block)
        parts = block.split(b"\n")
        batch: list[bytes | None] = []
        for i, part in enumerate(parts[:-1]):
            if i == 0:
                line, carry = carry + part, b""
                if overlong:
                    batch.append(None)
                    overlong = False
                    continue
            else:
                line = part
            batch.append(line if len(line) <= MAX_LINE_BYTES else None)
        carry = (carry + parts[-1]) if len(parts) == 1 else parts[-1]
        if overlong or len(carry) > MAX_LINE_BYTES:
            carry, overlong = b"", True
        yield batch
    if overlong:
        yield [None]
    elif carry:
        yield [carry]


def _fields(raw: bytes) -> Row | None:
    """One JSON line's ``ts`` (as a UTC instant), ``service``, ``level`` and ``message``, or
    ``None`` if malformed (see :func:`parse_line`).

    orjson parses first; what it refuses (``NaN``, a BOM, UTF-16/32, escaped lone surrogates,
    numbers out of its range, invalid lines) goes to ``json.loads``, so the accepted lines and
    their values are exactly ``json.loads``'s.
    """
    try:
        try:
            obj = orjson.loads(raw)
        except orjson.JSONDecodeError:
            obj = json.loads(raw)
        ts_text, service, level, message = obj["ts"], obj["service"], obj["level"], obj["message"]
        if not (
            isinstance(ts_text, str)
            and isinstance(service, str)
            and isinstance(level, str)
            and isinstance(message, str)
        ):
            return None
        ts = datetime.fromisoformat(ts_text)
        if ts.tzinfo is None or ts.utcoffset() is None:
            return None
        utc = ts if ts.tzinfo is UTC else ts.astimezone(UTC)
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return None
    return utc, service, level, message


def parse_line(raw: bytes) -> LogRecord | None:
    """Parse one JSON line; ``None`` if malformed: bad JSON (also nested too deep to parse), a
    missing or mistyped field, a naive ``ts`` or one that is not a real UTC instant (year 0,
    year 10000, an offset pushing year 1 or 9999 out of range)."""
    row = _fields(raw)
    if row is None:
        return None
    return LogRecord(ts=row[0], service=row[1], level=row[2], message=row[3])


_FIELDS = itemgetter("ts", "service", "level", "message")
_TZINFO = attrgetter("tzinfo")
_TS = itemgetter(0)


def _fast_batch(batch: list[bytes | None], match: Match, scan: _Scan) -> bool:
    """Scan a batch of regular lines with C loops (``map``, ``zip``, ``sorted``) instead of
    one Python step per line; ``False``, with nothing recorded, when any line is irregular
    (over-long, blank, refused by orjson, a field missing or not a string, a timestamp not in
    UTC or not ISO, another service): the caller then scans the batch line by line.

    On a batch it accepts, the outcome is exactly the line-by-line one: orjson accepts a subset
    of what ``json.loads`` does and decodes it to the same values.
    """
    if None in batch:
        return False
    raws = cast(list[bytes], batch)
    lines = raws if match.keeps is keep_all else list(filter(match.keeps, raws))
    if not lines:
        return True
    try:
        ts_texts, services, levels, messages = zip(
            *map(_FIELDS, map(orjson.loads, lines)), strict=True
        )
        times = list(map(datetime.fromisoformat, ts_texts))
    except (ValueError, KeyError, TypeError):
        return False
    if set(map(type, chain(services, levels, messages))) != {str}:
        return False
    if set(map(_TZINFO, times)) != {UTC} or set(services) != {match.service}:
        return False
    rows: list[Row] = list(zip(times, services, levels, messages, strict=True))
    if not (match.level is None and match.needle is None and match.covers(times)):
        rows = list(filter(match.wants, rows))
    rows.sort(key=_TS, reverse=True)
    scan.lines_matched(rows)
    return True


class JsonlLogSource:
    """Searches ``<folder>/<service>/<YYYY-MM-DD>/<HH>.jsonl`` files (see module docs)."""

    def __init__(
        self,
        folder: Path,
        *,
        scan_seconds: float = SCAN_SECONDS,
        mask_seconds: float = MASK_SECONDS,
    ) -> None:
        self.folder = folder
        self.stats = ReadStats()
        self.scan_seconds = scan_seconds
        self.mask_seconds = mask_seconds
        self._stats_lock = threading.Lock()

    async def search(self, q: LogsInput) -> LogPage:
        """Read the files of the window's hours (and only those), in a worker thread that
        stops within one block when the query is cancelled (the run's deadline, a Cancel) and
        answers ``TIMEOUT`` past :attr:`scan_seconds`."""
        try:
            return await in_thread(self._search, Stop(self.scan_seconds), q)
        except OutOfTime:
            raise LogSourceError(AdapterErrorCode.TIMEOUT) from None

    async def aclose(self) -> None:
        """Nothing is held open between queries."""

    async def probe(self) -> ProbeReport:
        """The folder exists, is readable and holds service folders."""
        return await probe_folder(self.folder)

    async def services(self, limit: int) -> list[str]:
        """The first ``limit`` service folder names, sorted: hidden entries, links and names
        ``query_logs`` would refuse are skipped."""
        return await asyncio.to_thread(self._services, limit)

    def _services(self, limit: int) -> list[str]:
        try:
            with os.scandir(self.folder) as entries:
                names = sorted(
                    entry.name
                    for entry in entries
                    if not entry.name.startswith(".")
                    and SERVICE_NAME.fullmatch(entry.name)
                    and entry.is_dir(follow_symlinks=False)
                )
        except OSError as exc:
            log_failure(logger, logging.WARNING, "log folder unreadable (%s)", exc=exc)
            raise LogSourceError(AdapterErrorCode.UNAVAILABLE) from None
        return names[:limit]

    def _search(self, stop: Stop, q: LogsInput) -> LogPage:
        service_dir = self._service_dir(q.service)
        scan = _Scan(Tally(Grid.for_window(q.start, q.end)), _Newest(q.limit))
        try:
            for hour in _hours(q.start, q.end):
                path = service_dir / f"{hour:%Y-%m-%d}" / f"{hour:%H}.jsonl"
                self._scan_hour(path, q, scan, stop)
        except OSError as exc:
            log_failure(logger, logging.WARNING, "log folder unreadable (%s)", exc=exc)
            raise LogSourceError(AdapterErrorCode.UNAVAILABLE) from None
        finally:
            self._record(scan)
        return LogPage(
            items=scan.newest.records(),
            truncated=scan.tally.matched > q.limit,
            summary=scan.tally.summary(exact=True, stop=stop.with_budget(self.mask_seconds)),
        )

    def _service_dir(self, service: str) -> Path:
        if not self.folder.is_dir():
            raise LogSourceError(AdapterErrorCode.UNAVAILABLE)
        if service in {".", ".."}:
            raise LogSourceError(AdapterErrorCode.INVALID_INPUT)
        return self.folder / service

    def _scan_hour(self, path: Path, q: LogsInput, scan: _Scan, stop: Stop) -> None:
        opened = open_inside(self.folder, path.relative_to(self.folder))
        if opened is None:
            return
        handle, size = opened
        scan.files.append(path.relative_to(self.folder).as_posix())
        match = Match(q)
        with handle:
            for batch in _line_batches(handle, size):
                stop.check()
                scan.lines += len(batch)
                if _fast_batch(batch, match, scan):
                    continue
                for raw in batch:
                    if raw is None:
                        scan.malformed += 1
                    elif raw and not raw.isspace() and match.keeps(raw):
                        row = _fields(raw)
                        if row is None:
                            scan.malformed += 1
                        elif match.wants(row):
                            scan.tally.add(row[0], row[3])
                            scan.newest.add(row)

    def _record(self, scan: _Scan) -> None:
        if scan.malformed:
            logger.warning("skipped %d malformed log lines in %s", scan.malformed, scan.files)
        with self._stats_lock:
            self.stats.files_opened += len(scan.files)
            self.stats.lines_read += scan.lines
            self.stats.malformed_lines += scan.malformed
            self.stats.last_files = tuple(scan.files)
