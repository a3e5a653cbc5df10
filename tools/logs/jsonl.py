"""``query_logs``: one service's log lines in a bounded window, from files or from Loki.

The adapter (:class:`LogsAdapter`) only projects; a :class:`LogSource` does the searching and
reports failures as :class:`LogSourceError` carrying a stable code, never backend text.
:func:`build_log_source` picks the source from ``DIAG_LOGS_SOURCE``: an ``http(s)://`` value is
a Loki base URL, anything else a folder; unset, every query answers ``NOT_CONFIGURED``.

Folder layout (:class:`JsonlLogSource`)::

    <folder>/<service>/<YYYY-MM-DD>/<HH>.jsonl      one file per service and UTC hour

Each line is one JSON object: ``ts`` (RFC 3339 with offset), ``service``, ``level``
(``ERROR``/``WARN``/``INFO``/``DEBUG``), ``message``, optionally ``trace_id`` and any other
attributes (ignored here). A line belongs to the file of its own UTC hour. Lines are usually
sorted by ``ts`` but need not be. The point of the layout is that cost follows the window, not
the history: a query opens only the files of the hours its window touches, newest hour first —
every one of them, because the ``summary`` (:mod:`plugin.tools.log_summary`) counts every matching
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

Loki (:class:`LokiLogSource`) gets ``GET {base}/loki/api/v1/query_range`` with a LogQL query built
from the typed input, every value escaped as a LogQL string literal::

    {service="<service>"} |~ "(?i)<regex-escaped contains>" | json | level="<LEVEL>"

``service`` is a stream label matcher. ``contains`` is a case-insensitive line filter placed
before the parser so Loki can skip lines cheaply. ``level`` is matched on the ``level`` field of
the JSON line (``| json``) rather than as a label, because the line format above is the one
contract both sources share and many Loki setups do not index level as a label; without a
level filter no parser runs and non-JSON lines are returned as they are.
``DIAG_LOKI_SERVICE_LABEL`` names the stream label (``service`` above), ``DIAG_LOKI_LINE_FORMAT``
``logfmt`` reads ``level``/``msg`` with ``| logfmt`` (level matched case-insensitively), and
``DIAG_LOKI_ORG_ID`` is sent as ``X-Scope-OrgID``. The summary's counts come from
``sum(count_over_time(<query> [<bucket>s]))`` stepped by the bucket width; its patterns from the
newest :data:`SAMPLE_LINES` lines, so it says ``exact: false`` unless that sample held every
match. Every answer is read to its end (chunked, gzip or deflate) under one total timeout and a
decoded byte cap (:func:`read_body`); parsing, counting and masking run in a worker thread.
"""

from __future__ import annotations

import asyncio
import base64
import errno
import json
import logging
import os
import re
import stat
import threading
from collections.abc import Awaitable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from itertools import chain
from operator import attrgetter, itemgetter
from pathlib import Path
from typing import IO, Any, Protocol, cast

import aiohttp
import orjson
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from yarl import URL

from plugin.tools.base import AdapterCall, AdapterErrorCode, AdapterResult, Failed, Ready, ToolName
from plugin.tools.log_summary import Grid, Tally, format_ts, pattern_keys
from plugin.tools.redact import HEADROOM, redact_prefix
from plugin.tools.schemas import SERVICE_NAME, LogItem, LogsInput, LogSummary
from plugin.tools.threads import OutOfTime, Stop, in_thread

logger = logging.getLogger(__name__)

MESSAGE_CHARS = 500
LABEL_CHARS = 100  # service and level as shown
TRUNCATION_MARK = "…[truncated]"
MAX_LINE_BYTES = 64 * 1024


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
    ``summary`` of every match (see :mod:`plugin.tools.log_summary`)."""

    items: list[LogRecord]
    truncated: bool
    summary: LogSummary | None = None


class LogSourceError(Exception):
    """A source failure reduced to a stable code; the cause is logged, never forwarded."""

    def __init__(self, code: AdapterErrorCode) -> None:
        super().__init__(code.value)
        self.code = code


class LogSource(Protocol):
    """Where log lines come from."""

    async def search(self, q: LogsInput) -> LogPage:
        """Return matches newest first; raise :class:`LogSourceError` on failure."""
        ...

    async def aclose(self) -> None:
        """Release connections."""
        ...


def bound_message(message: str, limit: int = MESSAGE_CHARS) -> str:
    """Bound, redact, then cut to ``limit`` characters with a visible mark.

    Only ``limit + HEADROOM`` characters are ever redacted (a 64 KB line costs what a 2 KB one
    does), and the final cut falls on redacted text, so a secret cut in half cannot leak its
    prefix (:func:`plugin.tools.redact.redact_prefix`).
    """
    text, cut = redact_prefix(message, limit + HEADROOM)
    if len(text) <= limit and not cut:
        return text
    return text[: limit - len(TRUNCATION_MARK)] + TRUNCATION_MARK


def _project(record: LogRecord) -> LogItem:
    return LogItem(
        ts=format_ts(record.ts),
        service=bound_message(record.service, LABEL_CHARS),
        level=bound_message(record.level, LABEL_CHARS),
        message=bound_message(record.message),
    )


def _project_page(page: LogPage) -> Ready:
    return Ready(
        items=[_project(r) for r in page.items], truncated=page.truncated, summary=page.summary
    )


class LogsAdapter:
    """The ``query_logs`` adapter: delegates to a source and projects its records."""

    def __init__(self, source: LogSource) -> None:
        self.source = source

    @property
    def tool(self) -> ToolName:
        return ToolName.QUERY_LOGS

    async def invoke(self, call: AdapterCall[LogsInput]) -> AdapterResult:
        """Search and project; source failures become their stable code."""
        try:
            page = await self.source.search(call.input)
        except LogSourceError as exc:
            return Failed(exc.code)
        # Redaction is CPU work on up to 50 bounded texts: a worker thread, so the loop only
        # ever waits for one short, linear regex call (each holds the GIL while it runs).
        return await asyncio.to_thread(_project_page, page)

    async def catalogue(self, limit: int) -> list[str] | None:
        """Up to ``limit + 1`` known service names for the tool description (folder names, or
        the Loki service label's values over the last 24 h); ``None`` when the source cannot
        list services (not configured). Raises ``LogSourceError`` when the listing fails."""
        services = getattr(self.source, "services", None)
        if services is None:
            return None
        found: list[str] = await services(limit + 1)
        return found

    async def aclose(self) -> None:
        await self.source.aclose()


def _newest_page(records: list[LogRecord], limit: int) -> LogPage:
    ordered = sorted(records, key=lambda r: r.ts, reverse=True)
    return LogPage(items=ordered[:limit], truncated=len(ordered) > limit)


# --------------------------------------------------------------------------------------------
# Folder of JSON-lines files

_Row = tuple[datetime, str, str, str]  # ts (UTC), service, level, message
CHUNK_BYTES = 256 * 1024  # one C call over a batch holds the GIL for ~1 ms at most
SCAN_SECONDS = 30.0  # one query's scan of the folder, at most (then TIMEOUT)
MASK_SECONDS = 5.0  # masking one summary's pattern keys, at most (then exact: false)


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
        self.rows: list[_Row] = []
        self.floor: datetime | None = None  # a match not newer than this cannot make the page

    def add(self, row: _Row) -> None:
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

    def lines_matched(self, rows: list[_Row]) -> None:
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


# Open flags: never follow a link, never wait for a FIFO's writer, never take a terminal.
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_DIR_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_DIRECTORY | os.O_CLOEXEC
# What opening says about an entry that is not a regular file inside the folder: skipped.
_NOT_A_FILE = frozenset(
    {errno.ENOENT, errno.ENOTDIR, errno.ELOOP, errno.ENXIO, errno.ENODEV, errno.EISDIR}
)


def open_inside(folder: Path, rel: Path) -> tuple[IO[bytes], int] | None:
    """``folder/rel`` opened for reading with its size, only if it is a regular file reached
    from ``folder`` without following any link; ``None`` for anything else (missing, a link —
    to ``/proc`` or anywhere —, a FIFO, a device, a socket, a directory). The folder itself
    may be a link. Each directory is opened with ``O_NOFOLLOW`` relative to the one before,
    the file with ``O_NOFOLLOW | O_NONBLOCK`` (a FIFO never blocks the open), and ``fstat``
    on the open descriptor decides. Other errors (permission, I/O) propagate as ``OSError``."""
    parts = rel.parts
    if not parts or any(part in {"", ".", ".."} for part in parts):
        return None
    dirs: list[int] = []
    try:
        dirs.append(os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC))
        for part in parts[:-1]:
            dirs.append(os.open(part, _DIR_FLAGS, dir_fd=dirs[-1]))
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=dirs[-1])
    except OSError as exc:
        if exc.errno in _NOT_A_FILE:
            return None
        raise
    finally:
        for opened in dirs:
            os.close(opened)
    return _regular(fd, rel)


def _regular(fd: int, rel: Path) -> tuple[IO[bytes], int] | None:
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            logger.warning("skipped %s: not a regular file", rel.as_posix())
            os.close(fd)
            return None
        os.set_blocking(fd, True)
    except OSError:
        os.close(fd)
        raise
    return os.fdopen(fd, "rb"), info.st_size


def _fields(raw: bytes) -> _Row | None:
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


def _matches(record: LogRecord, q: LogsInput, needle: str | None) -> bool:
    if not q.start <= record.ts < q.end or record.service != q.service:
        return False
    if q.level is not None and record.level != q.level.value:
        return False
    return needle is None or needle in record.message.casefold()


class Prefilter:
    """Cheap checks on a raw line that skip the JSON parse — only for lines the full match
    (:func:`parse_line` then :func:`line_matches`) would reject anyway.

    Parsing every line of a busy hour dominated the cost of a filtered query (bench: p99 ~3 s on
    a 240k-line hour), so a level and a ``contains`` filter are first looked for in the raw
    line. That is only sound where the raw line shows each JSON string as it decodes:

    * a line with a backslash may spell any character as an escape (``\\u003c``, ``\\"``,
      ``\\/``, surrogate pairs…): it is always parsed;
    * a line with a NUL byte or bytes that are not strict UTF-8 may be decoded differently by
      ``json.loads`` (UTF-16/32 detection, surrogates): always parsed;
    * otherwise every string of the line is a substring of the line. The level appears as its
      JSON string (``"ERROR"``) and the message as itself, so ``needle in message.casefold()``
      implies ``needle in line.casefold()`` (case folding maps characters one by one). A pure
      ASCII line is checked on bytes (ASCII folds to ASCII, ``bytes.lower`` is exact there).

    ``tests/tools/test_evidence_logs_prefilter.py`` checks keep ⊇ full-match keep as a
    property over generated lines, escapes and needles.
    """

    def __init__(self, q: LogsInput) -> None:
        self.needle = q.contains.casefold() if q.contains is not None else None
        self._needle_bytes = (
            self.needle.encode("utf-8", "surrogatepass") if self.needle is not None else None
        )
        self._level = json.dumps(q.level.value) if q.level is not None else None
        self._level_bytes = self._level.encode() if self._level is not None else None
        self.active = self.needle is not None or self._level is not None

    def keeps(self, raw: bytes) -> bool:
        """``False`` only for a line the full match cannot keep."""
        if not self.active or b"\\" in raw or b"\x00" in raw:
            return True
        if raw.isascii():
            if self._level_bytes is not None and self._level_bytes not in raw:
                return False
            return self._needle_bytes is None or self._needle_bytes in raw.lower()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return True
        if self._level is not None and self._level not in text:
            return False
        return self.needle is None or self.needle in text.casefold()


class _Match:
    """The prefilter and the full match of one query, with its values looked up once."""

    __slots__ = ("end", "keeps", "level", "needle", "service", "start")

    def __init__(self, q: LogsInput) -> None:
        prefilter = Prefilter(q)
        self.keeps = prefilter.keeps if prefilter.active else _keep_all
        self.start, self.end = q.start.astimezone(UTC), q.end.astimezone(UTC)
        self.service = q.service
        self.level = q.level.value if q.level is not None else None
        self.needle = prefilter.needle

    def covers(self, times: list[datetime]) -> bool:
        """Whether every one of ``times`` is inside the window."""
        return self.start <= min(times) and max(times) < self.end

    def wants(self, row: _Row) -> bool:
        """Exactly :func:`line_matches` on a parsed line."""
        ts, service, level, message = row
        return (
            self.start <= ts < self.end
            and service == self.service
            and (self.level is None or level == self.level)
            and (self.needle is None or self.needle in message.casefold())
        )


def _keep_all(raw: bytes) -> bool:
    return True


_FIELDS = itemgetter("ts", "service", "level", "message")
_TZINFO = attrgetter("tzinfo")
_TS = itemgetter(0)


def _fast_batch(batch: list[bytes | None], match: _Match, scan: _Scan) -> bool:
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
    lines = raws if match.keeps is _keep_all else list(filter(match.keeps, raws))
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
    rows: list[_Row] = list(zip(times, services, levels, messages, strict=True))
    if not (match.level is None and match.needle is None and match.covers(times)):
        rows = list(filter(match.wants, rows))
    rows.sort(key=_TS, reverse=True)
    scan.lines_matched(rows)
    return True


def line_matches(record: LogRecord, q: LogsInput) -> bool:
    """The full match of a parsed line against a query (window, service, level, contains)."""
    return _matches(record, q, q.contains.casefold() if q.contains is not None else None)


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
            logger.warning("log folder unreadable (%s)", type(exc).__name__)
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
            logger.warning("log folder unreadable (%s)", type(exc).__name__)
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
        match = _Match(q)
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


# --------------------------------------------------------------------------------------------
# Loki

_RE2_SPECIAL = frozenset("\\.+*?()|[]{}^$")


def logql_string(value: str) -> str:
    """A LogQL double-quoted string literal: backslash, quote and control characters escaped."""
    out = []
    for char in value:
        if char in '\\"':
            out.append("\\" + char)
        elif char == "\n":
            out.append("\\n")
        elif char == "\t":
            out.append("\\t")
        elif ord(char) < 0x20 or ord(char) == 0x7F:
            out.append(f"\\x{ord(char):02x}")
        else:
            out.append(char)
    return '"' + "".join(out) + '"'


def re2_escape(value: str) -> str:
    """Escape RE2 metacharacters so ``value`` matches literally."""
    return "".join("\\" + c if c in _RE2_SPECIAL else c for c in value)


_SHORT_ESCAPES = {
    '"': '"',
    "\\": "\\",
    "/": "/",
    "\b": "b",
    "\f": "f",
    "\n": "n",
    "\r": "r",
    "\t": "t",
}


def _json_spellings(char: str) -> list[str]:
    """How a JSON encoder may write ``char`` inside a string: itself, ``\\uXXXX`` (a surrogate
    pair beyond the BMP) and a short escape where one exists."""
    code = ord(char)
    if code > 0xFFFF:
        high, low = 0xD800 + ((code - 0x10000) >> 10), 0xDC00 + ((code - 0x10000) & 0x3FF)
        escaped = f"\\u{high:04x}\\u{low:04x}"
    else:
        escaped = f"\\u{code:04x}"
    spellings = [char, escaped]
    if char in _SHORT_ESCAPES:
        spellings.append("\\" + _SHORT_ESCAPES[char])
    return spellings


def contains_regex(contains: str) -> str:
    """An RE2 pattern matching ``contains`` in a raw line however a JSON encoder escaped it.

    Loki's line filter sees the raw line, where ``<`` may be ``\\u003c`` (Go), ``é`` may be
    ``\\u00e9`` (``ensure_ascii``) and ``/`` may be ``\\/``. ASCII letters, digits and spaces
    are never escaped by encoders and stay literal; every other character matches any of its
    spellings (``(?i)`` also covers the hex digits' case).
    """
    parts = []
    for char in contains:
        if char.isascii() and (char.isalnum() or char == " "):
            parts.append(char)
        else:
            parts.append("(?:" + "|".join(re2_escape(s) for s in _json_spellings(char)) + ")")
    return "(?i)" + "".join(parts)


LABEL_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
LINE_FORMATS = ("json", "logfmt")
SAMPLE_LINES = 500  # newest lines read for the items and the patterns of a Loki summary
# logfmt writers use lower case and ``warning``; LogQL regex matchers are anchored.
_LOGFMT_LEVELS = {
    "ERROR": "(?i)(?:error|err)",
    "WARN": "(?i)(?:warn|warning)",
    "INFO": "(?i)info",
    "DEBUG": "(?i)(?:debug|dbg)",
}


def build_logql(q: LogsInput, label: str = "service", line_format: str = "json") -> str:
    """The LogQL for a typed input (see module docs for the shape and why): ``label`` names
    the service's stream label; the level is read from ``json`` (exact) or ``logfmt`` lines
    (case-insensitive, ``warning`` for ``WARN``)."""
    query = "{" + label + "=" + logql_string(q.service) + "}"
    if q.contains is not None:
        query += " |~ " + logql_string(contains_regex(q.contains))
    if q.level is not None:
        if line_format == "logfmt":
            query += " | logfmt | level=~" + logql_string(_LOGFMT_LEVELS[q.level.value])
        else:
            query += " | json | level=" + logql_string(q.level.value)
    return query


def build_count_logql(q: LogsInput, grid: Grid, label: str, line_format: str) -> str:
    """Matching lines per bucket: ``sum(count_over_time(<query> [<width>s]))``."""
    selector = build_logql(q, label, line_format)
    return f"sum(count_over_time({selector} [{grid.width_seconds}s]))"


def _unix_ns(ts: datetime) -> str:
    delta = ts.astimezone(UTC) - datetime(1970, 1, 1, tzinfo=UTC)
    return str((delta.days * 86_400 + delta.seconds) * 1_000_000_000 + delta.microseconds * 1_000)


class _LokiStream(BaseModel):
    model_config = ConfigDict(extra="ignore")

    stream: dict[str, str]
    values: list[tuple[str, str] | tuple[str, str, dict[str, Any]]]


class _LokiData(BaseModel):
    model_config = ConfigDict(extra="ignore")

    result_type: str = Field(alias="resultType")
    result: list[_LokiStream]


class _LokiResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: str
    data: _LokiData


class _LokiLabelValues(BaseModel):
    data: list[str] = Field(default_factory=list)


class _LokiSeries(BaseModel):
    model_config = ConfigDict(extra="ignore")

    values: list[tuple[float, str]]


class _LokiMatrixData(BaseModel):
    model_config = ConfigDict(extra="ignore")

    result_type: str = Field(alias="resultType")
    result: list[_LokiSeries]


class _LokiMatrix(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: str
    data: _LokiMatrixData


_LOGFMT_PAIR = re.compile(r'(?<!\S)([A-Za-z_][A-Za-z0-9_.-]*)=("(?:[^"\\]|\\.)*"|[^\s"]*)')


def _logfmt(line: str) -> dict[str, str]:
    """``key=value`` and ``key="quoted value"`` pairs of a logfmt line (first of each key)."""
    pairs: dict[str, str] = {}
    for key, value in _LOGFMT_PAIR.findall(line[:MAX_LINE_BYTES]):
        if value.startswith('"'):
            try:
                decoded = json.loads(value)
            except (ValueError, RecursionError):
                decoded = value[1:-1]
            value = decoded if isinstance(decoded, str) else value[1:-1]
        pairs.setdefault(key, value)
    return pairs


def _level_and_message(line: str, line_format: str) -> tuple[str | None, str | None]:
    if line_format == "logfmt":
        pairs = _logfmt(line)
        level = pairs.get("level", pairs.get("lvl"))
        return level, pairs.get("msg", pairs.get("message"))
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        return None, None
    if not isinstance(obj, dict):
        return None, None
    level, message = obj.get("level"), obj.get("message")
    return (
        level if isinstance(level, str) else None,
        message if isinstance(message, str) else None,
    )


@dataclass(frozen=True, slots=True)
class _LokiShape:
    """How this Loki's streams and lines look (``DIAG_LOKI_SERVICE_LABEL``/``LINE_FORMAT``)."""

    label: str = "service"
    line_format: str = "json"


def _from_loki(
    ns: str, line: str, labels: dict[str, str], service: str, shape: _LokiShape = _LokiShape()
) -> LogRecord | None:
    """One Loki entry; a JSON (or logfmt) line supplies level and message, else the line is the
    message. ``None`` for an entry whose timestamp is no instant ``datetime`` can hold."""
    nanoseconds = int(ns)  # not an integer: off the documented shape (INTERNAL)
    try:
        ts = datetime.fromtimestamp(nanoseconds // 1_000_000_000, tz=UTC) + timedelta(
            microseconds=nanoseconds % 1_000_000_000 // 1_000
        )
    except (ValueError, OverflowError, OSError):
        return None
    level, message = _level_and_message(line, shape.line_format)
    if level is None:
        level = labels.get("level") or labels.get("detected_level") or ""
    return LogRecord(
        ts=ts, service=labels.get(shape.label, service), level=level, message=message or line
    )


def _loki_records(body: bytes, q: LogsInput, shape: _LokiShape) -> list[LogRecord]:
    """Every entry of a streams answer inside the window; off the documented shape:
    ``INTERNAL``."""
    try:
        parsed = _LokiResponse.model_validate_json(body)
        if parsed.status != "success" or parsed.data.result_type != "streams":
            raise ValueError("unexpected Loki result")
        records = [
            _from_loki(value[0], value[1], stream.stream, q.service, shape)
            for stream in parsed.data.result
            for value in stream.values
        ]
    except (ValidationError, ValueError, OverflowError, RecursionError):
        raise LogSourceError(AdapterErrorCode.INTERNAL) from None
    return [r for r in records if r is not None and q.start <= r.ts < q.end]


def parse_loki_response(body: bytes, q: LogsInput, shape: _LokiShape = _LokiShape()) -> LogPage:
    """Merge Loki's streams newest first; anything off the documented shape is ``INTERNAL``."""
    return _newest_page(_loki_records(body, q, shape), q.limit)


def parse_loki_counts(body: bytes, grid: Grid) -> list[int]:
    """Bucket counts from a ``count_over_time`` matrix whose points sit at bucket ends; series
    are added up; points off the grid are ignored."""
    try:
        parsed = _LokiMatrix.model_validate_json(body)
        if parsed.status != "success" or parsed.data.result_type != "matrix":
            raise ValueError("unexpected Loki result")
        counts = [0] * grid.count
        origin = grid.start.timestamp()
        for series in parsed.data.result:
            for at, value in series.values:
                index = round((at - origin) / grid.width_seconds) - 1
                if 0 <= index < grid.count:
                    counts[index] += max(int(float(value)), 0)
    except (ValidationError, ValueError, OverflowError):
        raise LogSourceError(AdapterErrorCode.INTERNAL) from None
    return counts


def _status_code(status: int) -> AdapterErrorCode | None:
    if 200 <= status < 300:
        return None
    if status in {400, 422}:
        return AdapterErrorCode.INVALID_INPUT
    return AdapterErrorCode.UNAVAILABLE


def _loki_summary(
    stop: Stop,
    sample: list[LogRecord],
    complete: bool,
    counts: list[int],
    first: list[LogRecord],
    grid: Grid,
) -> LogSummary:
    """Exact from the sample when it holds every match; else counts from the metric query,
    patterns and the last instant from the sample, the first from the oldest match."""
    tally = Tally(grid)
    for record in sample:
        tally.add(record.ts, record.message)
    if complete:
        return tally.summary(exact=True, stop=stop)
    tally.add_counts(counts)
    if first:
        tally.first = first[0].ts
    return tally.summary(exact=False, stop=stop)


def _loki_page(
    stop: Stop,
    q: LogsInput,
    sample: list[LogRecord],
    counts: list[int],
    first: list[LogRecord] | None,
    grid: Grid,
) -> LogPage:
    """The page and its summary (``first`` is ``None`` when the sample holds every match):
    the CPU work of a Loki query, run in a worker thread."""
    page = _newest_page(sample, q.limit)
    stop.check()
    summary = _loki_summary(stop, sample, first is None, counts, first or [], grid)
    return LogPage(items=page.items, truncated=summary.matched > len(page.items), summary=summary)


async def _both(first: Awaitable[bytes], second: Awaitable[bytes]) -> tuple[bytes, bytes]:
    """Both answers; when one request fails, the other is cancelled (never left running)."""
    tasks = [asyncio.ensure_future(first), asyncio.ensure_future(second)]
    try:
        one, two = await asyncio.gather(*tasks)
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)
    return one, two


READ_CHUNK_BYTES = 64 * 1024
LABELS_MAX_BYTES = 1024 * 1024  # a label-values answer (the services catalogue)


class BodyTooLarge(LogSourceError):
    """An answer over its byte cap: reading stopped there (``UNAVAILABLE``, never ``INTERNAL``)."""

    def __init__(self, limit: int) -> None:
        super().__init__(AdapterErrorCode.UNAVAILABLE)
        self.limit = limit


async def read_body(response: aiohttp.ClientResponse, max_bytes: int) -> bytes:
    """The whole body of ``response`` as aiohttp decodes it (chunked framing removed, gzip or
    deflate inflated), read until its end — never one buffered read, which returns whatever
    happened to arrive — and at most ``max_bytes`` decoded bytes: one more raises
    :class:`BodyTooLarge` without reading further (an endless or inflating body costs the cap)."""
    declared = response.content_length
    if (
        declared is not None
        and declared > max_bytes
        and not response.headers.get("Content-Encoding")
    ):
        logger.warning("loki answer of %d bytes over the %d byte cap", declared, max_bytes)
        raise BodyTooLarge(max_bytes)
    parts: list[bytes] = []
    size = 0
    async for chunk in response.content.iter_chunked(READ_CHUNK_BYTES):
        size += len(chunk)
        if size > max_bytes:
            logger.warning("loki answer over the %d byte cap", max_bytes)
            raise BodyTooLarge(max_bytes)
        parts.append(chunk)
    return b"".join(parts)


class LokiLogSource:
    """Queries Grafana Loki's ``query_range`` API over HTTP with a bounded total timeout.

    One query sends, concurrently, the newest :data:`SAMPLE_LINES` matching lines (items and
    patterns) and a ``count_over_time`` metric query stepped by the summary's bucket width
    (counts); when the sample does not hold every match, a third request reads the oldest match
    (``first_ts``). Basic auth comes from the URL (``http://user:pass@host``); ``org_id`` is
    sent as ``X-Scope-OrgID``.
    """

    def __init__(
        self,
        base_url: str,
        timeout_seconds: float = 10.0,
        max_body_bytes: int = 4 * 1024 * 1024,
        *,
        service_label: str = "service",
        line_format: str = "json",
        org_id: str | None = None,
        sample_lines: int = SAMPLE_LINES,
        mask_seconds: float = MASK_SECONDS,
    ) -> None:
        if not LABEL_NAME.fullmatch(service_label):
            raise ValueError("service_label must be a Loki label name")
        if line_format not in LINE_FORMATS:
            raise ValueError("line_format must be json or logfmt")
        self.shape = _LokiShape(service_label, line_format)
        self.endpoint, self.authorization = _split_auth(base_url)
        self.labels_endpoint = f"{self.endpoint}/loki/api/v1/label/{service_label}/values"
        self.endpoint += "/loki/api/v1/query_range"
        self.headers = {"X-Scope-OrgID": org_id} if org_id else {}
        self.timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self.max_body_bytes = max_body_bytes
        self.sample_lines = sample_lines
        self.mask_seconds = mask_seconds
        self._session: aiohttp.ClientSession | None = None

    def params(self, q: LogsInput) -> dict[str, str]:
        """The sample: the newest lines of the window, at least ``limit + 1``."""
        return {
            "query": build_logql(q, self.shape.label, self.shape.line_format),
            "start": _unix_ns(q.start),
            "end": _unix_ns(q.end),
            "limit": str(max(q.limit + 1, self.sample_lines)),
            "direction": "backward",
        }

    def count_params(self, q: LogsInput, grid: Grid) -> dict[str, str]:
        """The metric query: one point at the end of each bucket, stepped by its width."""
        width = timedelta(seconds=grid.width_seconds)
        return {
            "query": build_count_logql(q, grid, self.shape.label, self.shape.line_format),
            "start": _unix_ns(grid.start + width),
            "end": _unix_ns(grid.start + width * grid.count),
            "step": f"{grid.width_seconds}s",
        }

    def first_params(self, q: LogsInput) -> dict[str, str]:
        """The oldest matching line."""
        return {**self.params(q), "limit": "1", "direction": "forward"}

    async def search(self, q: LogsInput) -> LogPage:
        """Sample and counts; timeouts, refusals, broken or oversized answers and HTTP errors
        become stable codes. Parsing, counting and masking run in a worker thread that a
        cancelled query stops."""
        grid = Grid.for_window(q.start, q.end)
        try:
            sample, counts, first = await self._fetch(q, grid)
        except TimeoutError:
            raise LogSourceError(AdapterErrorCode.TIMEOUT) from None
        except aiohttp.InvalidURL:
            raise LogSourceError(AdapterErrorCode.NOT_CONFIGURED) from None
        except (aiohttp.ClientError, OSError) as exc:
            logger.warning("loki request failed (%s)", type(exc).__name__)
            raise LogSourceError(AdapterErrorCode.UNAVAILABLE) from None
        return await in_thread(_loki_page, Stop(self.mask_seconds), q, sample, counts, first, grid)

    async def _fetch(
        self, q: LogsInput, grid: Grid
    ) -> tuple[list[LogRecord], list[int], list[LogRecord] | None]:
        """The sample's records, the bucket counts and, when the sample does not hold every
        match, the oldest match (``None`` when it does)."""
        sample_body, count_body = await _both(
            self._get(self.params(q)), self._get(self.count_params(q, grid))
        )
        # Up to max_body_bytes of JSON each: parsed in a worker thread, off the event loop.
        sample = await asyncio.to_thread(_loki_records, sample_body, q, self.shape)
        counts = await asyncio.to_thread(parse_loki_counts, count_body, grid)
        if len(sample) < max(q.limit + 1, self.sample_lines):
            return sample, counts, None
        first_body = await self._get(self.first_params(q))
        first = await asyncio.to_thread(_loki_records, first_body, q, self.shape)
        return sample, counts, first

    async def services(self, limit: int) -> list[str]:
        """The first ``limit`` values (sorted) of the service label over the last 24 h, among
        those ``query_logs`` accepts as a service: a value nobody could query (spaces, prompt
        text, control characters, over 100 characters) is dropped before the cut, so pushed
        junk neither reaches the model nor pushes real services out of the list."""
        end = datetime.now(UTC)
        params = {"start": _unix_ns(end - timedelta(hours=24)), "end": _unix_ns(end)}
        try:
            body = await self._get(params, self.labels_endpoint, LABELS_MAX_BYTES)
        except TimeoutError:
            raise LogSourceError(AdapterErrorCode.TIMEOUT) from None
        except (aiohttp.ClientError, OSError) as exc:
            logger.warning("loki label request failed (%s)", type(exc).__name__)
            raise LogSourceError(AdapterErrorCode.UNAVAILABLE) from None
        try:
            values = _LokiLabelValues.model_validate_json(body).data
        except ValidationError:
            raise LogSourceError(AdapterErrorCode.INTERNAL) from None
        return sorted({value for value in values if SERVICE_NAME.fullmatch(value)})[:limit]

    async def _get(
        self, params: dict[str, str], endpoint: str | None = None, max_bytes: int | None = None
    ) -> bytes:
        """One GET; the whole body, decoded, at most ``max_bytes`` (default
        ``max_body_bytes``). The total timeout bounds connecting, the headers and every byte of
        the body (a trickle, an endless body, a peer that never answers)."""
        async with asyncio.timeout(self.timeout.total):
            async with self._client().get(endpoint or self.endpoint, params=params) as response:
                code = _status_code(response.status)
                if code is not None:
                    logger.warning("loki answered HTTP %d", response.status)
                    raise LogSourceError(code)
                return await read_body(response, max_bytes or self.max_body_bytes)

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None or self._session.closed:
            headers = dict(self.headers)
            if self.authorization is not None:
                headers["Authorization"] = self.authorization
            self._session = aiohttp.ClientSession(timeout=self.timeout, headers=headers)
        return self._session

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


def _split_auth(base_url: str) -> tuple[str, str | None]:
    """The base URL without its ``user:pass@`` (never logged or sent in the URL) and the
    ``Authorization: Basic`` value it carried (user and password percent-decoded). A URL that
    does not parse is kept as is: requests then answer ``NOT_CONFIGURED``."""
    try:
        url = URL(base_url)
        if url.user is None:
            return str(url).rstrip("/"), None
        pair = f"{url.user}:{url.password or ''}".encode()
        return str(url.with_user(None)).rstrip("/"), "Basic " + base64.b64encode(pair).decode()
    except (ValueError, TypeError):
        return base_url.rstrip("/"), None


class UnconfiguredLogSource:
    """``DIAG_LOGS_SOURCE`` unset: every query answers ``NOT_CONFIGURED`` (never demo data)."""

    async def search(self, q: LogsInput) -> LogPage:
        raise LogSourceError(AdapterErrorCode.NOT_CONFIGURED)

    async def aclose(self) -> None:
        """Nothing to release."""


def build_log_source(
    logs_source: str | None,
    *,
    loki_service_label: str = "service",
    loki_line_format: str = "json",
    loki_org_id: str | None = None,
) -> LogSource:
    """``http(s)://…`` is a Loki base URL (the ``loki_*`` settings apply to it); anything else
    is a folder in the layout above; unset (``None`` or blank) is
    :class:`UnconfiguredLogSource`."""
    if logs_source is None or not logs_source.strip():
        return UnconfiguredLogSource()
    if re.match(r"(?i)https?://", logs_source):
        return LokiLogSource(
            logs_source,
            service_label=loki_service_label,
            line_format=loki_line_format,
            org_id=loki_org_id,
        )
    return JsonlLogSource(Path(logs_source))
