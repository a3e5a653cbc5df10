"""Scanning the folder log source's files: ``<folder>/<service>/<YYYY-MM-DD>/<HH>.jsonl``.

Folder layout (read by :class:`sre_diag.tools.logs.folder.JsonlLogSource`)::

    <folder>/<service>/<YYYY-MM-DD>/<HH>.jsonl      one file per service and UTC hour

Each line is one JSON object: ``ts`` (RFC 3339 with offset), ``service``, ``level``
(``ERROR``/``WARN``/``INFO``/``DEBUG``), ``message``, optionally ``trace_id`` and any other
attributes (ignored here). A line belongs to the file of its own UTC hour. Lines are usually
sorted by ``ts`` but need not be. The point of the layout is that cost follows the window, not
the history: a query opens only the files of the hours its window touches, newest hour first —
every one of them, because the ``summary`` (:mod:`sre_diag.tools.logs.summary`) counts every
matching line of the window exactly, while the items are the newest ``limit`` matches. A file
is read 256 KB
at a time; a level or ``contains`` filter is first looked for in the raw bytes
(:class:`Prefilter`), and a batch of regular lines is decoded and counted with C loops rather
than a Python step per line (:func:`_fast_batch`: msgspec reads only the four fields where that
reading is ``json.loads``'s, else orjson; the bench measures the busiest generated hour, 240k
lines); a batch either refuses is read line by line, orjson first and ``json.loads`` deciding
what orjson refuses.
Malformed lines (bad JSON, missing or mistyped fields, naive timestamps, over-long lines) are
skipped and counted, never fatal. Only regular files reached from the folder without following a
link are opened (:func:`open_inside`), and at most the size they had when opened is read.
:func:`scan_window` is one whole scan, :func:`range_blocks` the bytes of a part of a file (a
large window is scanned in parts, :mod:`sre_diag.tools.logs.parts`); both run in a worker thread
or a child process, check their :class:`Stop` once per block and log nothing themselves.
"""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import chain
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import IO, cast

import msgspec
import orjson
from msgspec.structs import astuple

from sre_diag.log import failure_reason
from sre_diag.tools.base import AdapterErrorCode
from sre_diag.tools.logs.files import open_inside
from sre_diag.tools.logs.prefilter import Match, Row, keep_all
from sre_diag.tools.logs.source import (
    FIRST_ITEMS,
    MAX_LINE_BYTES,
    LogPage,
    LogRecord,
)
from sre_diag.tools.logs.summary import Grid, Tally, pattern_keys
from sre_diag.tools.schemas import LogsInput
from sre_diag.tools.threads import Stop

__all__ = [
    "CHUNK_BYTES",
    "PART_BYTES",
    "PROCESS_BYTES",
    "SCAN_SECONDS",
    "WORKERS",
    "ReadStats",
    "Scanned",
    "parse_line",
    "scan_window",
]

# The package's logger: lines keep the name they had before the package was split.
logger = logging.getLogger(__package__)

CHUNK_BYTES = 256 * 1024  # one C call over a batch holds the GIL for ~1 ms at most
SCAN_SECONDS = 30.0  # one query's scan of the folder, at most (then TIMEOUT)
PROCESS_BYTES = 4 * 1024 * 1024  # a window's files this large are scanned in a child process
WORKERS = 2  # child processes of one source, at most (more large scans wait for one)
PART_BYTES = 4 * 1024 * 1024  # a large window is cut in parts of at least this, one per child


@dataclass(slots=True)
class ReadStats:
    """Counters a folder source exposes so tests and operators can see what a query cost;
    ``malformed_lines`` also counts the plain-text lines skipped for having no readable time."""

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


class _Oldest:
    """The oldest :data:`FIRST_ITEMS` matches seen so far, as a stable sort by time (oldest
    first) of all of them would order them; rows must be added in the order read."""

    __slots__ = ("ceiling", "keep", "rows")

    def __init__(self, keep: int = FIRST_ITEMS) -> None:
        self.keep = keep
        self.rows: list[Row] = []
        self.ceiling: datetime | None = None  # a match not older than this cannot make it

    def add(self, row: Row) -> None:
        if self.ceiling is not None and row[0] >= self.ceiling:
            return
        self.rows.append(row)
        if len(self.rows) >= 4 * self.keep + 64:
            self.compact()

    def add_sorted(self, rows: list[Row]) -> None:
        """``rows`` sorted newest first, ties in the order read: the oldest of them, added in
        the order read."""
        if not rows:
            return
        boundary = rows[-self.keep][0] if len(rows) >= self.keep else rows[0][0]
        start = len(rows)
        while start and rows[start - 1][0] <= boundary:
            start -= 1
        for row in sorted(rows[start:], key=_TS):  # stable: ties keep the order read
            self.add(row)

    def compact(self) -> None:
        self.rows.sort(key=_TS)
        del self.rows[self.keep :]
        if len(self.rows) == self.keep:
            self.ceiling = self.rows[-1][0]

    def records(self) -> list[LogRecord]:
        self.compact()
        return [LogRecord(ts=ts, service=s, level=lv, message=m) for ts, s, lv, m in self.rows]


@dataclass(slots=True)
class _Scan:
    tally: Tally
    newest: _Newest
    oldest: _Oldest = field(default_factory=_Oldest)
    files: list[str] = field(default_factory=list)
    lines: int = 0
    malformed: int = 0
    capped: bool = False  # a plain file was cut at a byte cap: the summary is not exact

    def counted(
        self, page: LogPage | None, code: AdapterErrorCode | None = None, reason: str = ""
    ) -> Scanned:
        """The outcome with this scan's counters."""
        return Scanned(page, code, reason, tuple(self.files), self.lines, self.malformed)

    def lines_matched(self, rows: list[Row]) -> None:
        """Matching rows sorted newest first (ties in the order read)."""
        self.tally.add_sorted([row[0] for row in rows], pattern_keys([row[3] for row in rows]))
        for row in rows[: self.newest.keep]:
            self.newest.add(row)
        self.oldest.add_sorted(rows)


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


def range_blocks(
    handle: IO[bytes], size: int, start: int = 0, end: int | None = None
) -> Iterator[bytes]:
    """The bytes of the lines that start in ``[start, end)`` of the file's first ``size`` bytes
    (its size when it was opened: a file growing while it is read, or one that says it is empty
    and is not, costs no more), read :data:`CHUNK_BYTES` at a time: the line that began before
    ``start`` belongs to the range before, the line holding byte ``end - 1`` is read to its end.
    Ranges that tile ``[0, size)`` therefore give every line exactly once."""
    end = size if end is None else min(end, size)
    at, head = 0, b""
    if start > 0:
        handle.seek(start - 1)
        at = start - 1
        while True:  # skip the rest of the line begun before ``start`` (never held whole)
            block = handle.read(min(CHUNK_BYTES, size - at)) if at < size else b""
            if not block:
                return
            cut = block.find(b"\n")
            if cut >= 0:
                at, head = at + cut + 1, block[cut + 1 :]
                break
            at += len(block)
    if at >= end:
        return
    while True:
        block = head or (handle.read(min(CHUNK_BYTES, size - at)) if at < size else b"")
        head = b""
        if not block:
            return
        if at + len(block) >= end:  # this block holds byte end - 1 (or lies past it)
            cut = block.find(b"\n", max(0, end - 1 - at))
            if cut >= 0:
                yield block[: cut + 1]
                return
        yield block
        at += len(block)


def _line_batches(blocks: Iterable[bytes]) -> Iterator[list[bytes | None]]:
    """The lines (without newline) of ``blocks`` (:func:`range_blocks`) a block at a time;
    ``None`` for a line longer than :data:`MAX_LINE_BYTES` (skipped, never held whole)."""
    carry, overlong = b"", False
    for block in blocks:
        parts = block.split(b"\n")
        if not overlong and len(parts) > 1 and max(map(len, parts)) <= MAX_LINE_BYTES:
            head = carry + parts[0]  # the common block: no line too long, built in C
            if len(head) <= MAX_LINE_BYTES:
                parts[0] = head
                carry = parts.pop()
                yield cast(list[bytes | None], parts)
                continue
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


class _Line(msgspec.Struct, frozen=True, gc=False):
    """The four fields a scan reads; every other attribute of a line is skipped unbuilt."""

    ts: str
    service: str
    level: str
    message: str


_LINE = msgspec.json.Decoder(_Line)
_Columns = tuple[Sequence[str], Sequence[str], Sequence[str], Sequence[str]]


def _typed_columns(lines: list[bytes]) -> _Columns | None:
    """The four fields of every line decoded by msgspec into :class:`_Line` (2-3x faster than
    building each line's whole object), or ``None`` where that would not be ``json.loads``'s
    reading: msgspec checks neither the UTF-8 nor the integers of the attributes it skips,
    so a batch is taken only when it is valid UTF-8 and no line is long enough to hold an
    integer ``int()`` refuses (``sys.get_int_max_str_digits``). Raises ``ValueError`` when a
    line is not a JSON object with those four string fields, ``RecursionError`` when one nests
    deeper than the interpreter allows, as ``json.loads`` does (msgspec refuses a subset of what
    ``json.loads`` accepts: the caller reads the batch line by line)."""
    digits = sys.get_int_max_str_digits()
    if digits and max(map(len, lines)) > digits:
        return None
    joined = b"\n".join(lines)
    if not joined.isascii():
        try:
            joined.decode("utf-8")
        except UnicodeDecodeError:
            return None
    return cast(_Columns, tuple(zip(*map(astuple, map(_LINE.decode, lines)), strict=True)))


def _orjson_columns(lines: list[bytes]) -> _Columns | None:
    """The four fields of every line read with orjson, or ``None`` when one is not a string."""
    columns = cast(_Columns, tuple(zip(*map(_FIELDS, map(orjson.loads, lines)), strict=True)))
    if set(map(type, chain(*columns[1:]))) != {str}:
        return None
    return columns


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
        columns = _typed_columns(lines) or _orjson_columns(lines)
        if columns is None:
            return False
        ts_texts, services, levels, messages = columns
        times = list(map(datetime.fromisoformat, ts_texts))
    except (ValueError, KeyError, TypeError, RecursionError):
        return False
    if set(map(_TZINFO, times)) != {UTC} or set(services) != {match.service}:
        return False
    rows: list[Row] = list(zip(times, services, levels, messages, strict=True))
    if not (match.level is None and match.needle is None and match.covers(times)):
        rows = list(filter(match.wants, rows))
    rows.sort(key=_TS, reverse=True)
    scan.lines_matched(rows)
    return True


@dataclass(frozen=True, slots=True)
class Scanned:
    """What one window's scan found, whole (a child process sends it back as one value): the
    page, or the stable code of the failure with its short reason for the log, and the read
    counters either way."""

    page: LogPage | None
    code: AdapterErrorCode | None = None
    reason: str = ""
    files: tuple[str, ...] = ()
    lines: int = 0
    malformed: int = 0


def scan_window(
    stop: Stop, folder: Path, q: LogsInput, mask_seconds: float, plain_bytes: int = 1 << 30
) -> Scanned:
    """Read the files of the window's hours (and only those), then the service's plain-text
    files (:mod:`sre_diag.tools.logs.plainscan`, at most ``plain_bytes`` of them), and
    summarise every match; :meth:`Stop.check` once per block (``OutOfTime`` past the stop's
    budget). Runs in a worker thread or in a child process (:mod:`sre_diag.tools.workers`): it
    logs nothing itself."""
    from sre_diag.tools.logs.plainscan import scan_plain  # it reads lines as this module does

    if not folder.is_dir():
        return Scanned(None, AdapterErrorCode.UNAVAILABLE)
    if q.service in {".", ".."}:
        return Scanned(None, AdapterErrorCode.INVALID_INPUT)
    service_dir = folder / q.service
    scan = _Scan(Tally(Grid.for_window(q.start, q.end)), _Newest(q.limit))
    try:
        for hour in _hours(q.start, q.end):
            path = service_dir / f"{hour:%Y-%m-%d}" / f"{hour:%H}.jsonl"
            _scan_hour(folder, path, q, scan, stop)
        scan_plain(folder, q, scan, stop, plain_bytes)
    except OSError as exc:
        return scan.counted(None, AdapterErrorCode.UNAVAILABLE, failure_reason(exc))
    page = LogPage(
        items=scan.newest.records(),
        truncated=scan.tally.matched > q.limit,
        summary=scan.tally.summary(exact=not scan.capped, stop=stop.with_budget(mask_seconds)),
        first_items=scan.oldest.records(),
    )
    return scan.counted(page)


def _scan_hour(
    folder: Path,
    path: Path,
    q: LogsInput,
    scan: _Scan,
    stop: Stop,
    span: tuple[int, int | None] = (0, None),
) -> None:
    """Scan the lines of one hour file that start in ``span`` (all of it by default)."""
    opened = open_inside(folder, path.relative_to(folder))
    if opened is None:
        return
    handle, size = opened
    scan.files.append(path.relative_to(folder).as_posix())
    match = Match(q)
    with handle:
        for batch in _line_batches(range_blocks(handle, size, *span)):
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
                        scan.oldest.add(row)
