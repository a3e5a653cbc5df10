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
sorted by ``ts`` but need not be: each touched file is read whole and sorted in memory. The
point of the layout is that cost follows the window, not the history: a query opens only the
files of the hours its window touches, newest hour first, and stops at the first hour boundary
where ``limit + 1`` matches are already in hand. Malformed lines (bad JSON, missing or mistyped
fields, naive timestamps, over-long lines) are skipped and counted, never fatal.

Loki (:class:`LokiLogSource`) gets ``GET {base}/loki/api/v1/query_range`` with a LogQL query built
from the typed input, every value escaped as a LogQL string literal::

    {service="<service>"} |~ "(?i)<regex-escaped contains>" | json | level="<LEVEL>"

``service`` is a stream label matcher. ``contains`` is a case-insensitive line filter placed
before the parser so Loki can skip lines cheaply. ``level`` is matched on the ``level`` field of
the JSON line (``| json``) rather than as a label, because the line format above is the one
contract both sources share and many Loki setups do not index level as a label; without a
level filter no parser runs and non-JSON lines are returned as they are.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import IO, Any, Protocol

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from tools.base import AdapterCall, AdapterErrorCode, AdapterResult, Failed, Ready, ToolName
from tools.redact import HEADROOM, redact_prefix
from tools.schemas import LogItem, LogsInput

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
    """At most ``limit`` records, newest first; ``truncated`` when more matched."""

    items: list[LogRecord]
    truncated: bool


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


def format_ts(ts: datetime) -> str:
    """RFC 3339 in UTC with millisecond precision and a ``Z`` suffix."""
    return ts.astimezone(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def bound_message(message: str, limit: int = MESSAGE_CHARS) -> str:
    """Bound, redact, then cut to ``limit`` characters with a visible mark.

    Only ``limit + HEADROOM`` characters are ever redacted (a 64 KB line costs what a 2 KB one
    does), and the final cut falls on redacted text, so a secret cut in half cannot leak its
    prefix (:func:`tools.redact.redact_prefix`).
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
    return Ready(items=[_project(r) for r in page.items], truncated=page.truncated)


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

    async def aclose(self) -> None:
        await self.source.aclose()


def _newest_page(records: list[LogRecord], limit: int) -> LogPage:
    ordered = sorted(records, key=lambda r: r.ts, reverse=True)
    return LogPage(items=ordered[:limit], truncated=len(ordered) > limit)


# --------------------------------------------------------------------------------------------
# Folder of JSON-lines files


@dataclass(slots=True)
class ReadStats:
    """Counters a folder source exposes so tests and operators can see what a query cost."""

    files_opened: int = 0
    lines_read: int = 0
    malformed_lines: int = 0
    last_files: tuple[str, ...] = ()


@dataclass(slots=True)
class _Scan:
    matches: list[LogRecord] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    lines: int = 0
    malformed: int = 0


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


def _lines(handle: IO[bytes]) -> Iterator[bytes | None]:
    """Yield lines; ``None`` for one longer than :data:`MAX_LINE_BYTES` (skipped unread)."""
    while line := handle.readline(MAX_LINE_BYTES + 1):
        if len(line) > MAX_LINE_BYTES and not line.endswith(b"\n"):
            while (rest := handle.readline(MAX_LINE_BYTES)) and not rest.endswith(b"\n"):
                pass
            yield None
        else:
            yield line


def parse_line(raw: bytes) -> LogRecord | None:
    """Parse one JSON line; ``None`` if malformed: bad JSON (also nested too deep to parse), a
    missing or mistyped field, a naive ``ts`` or one that is not a real UTC instant (year 0,
    year 10000, an offset pushing year 1 or 9999 out of range)."""
    try:
        obj = json.loads(raw)
        fields = (obj["ts"], obj["service"], obj["level"], obj["message"])
        if not all(isinstance(value, str) for value in fields):
            return None
        ts = datetime.fromisoformat(fields[0])
        if ts.tzinfo is None or ts.utcoffset() is None:
            return None
        utc = ts.astimezone(UTC)
    except (ValueError, KeyError, TypeError, OverflowError, RecursionError):
        return None
    return LogRecord(ts=utc, service=fields[1], level=fields[2], message=fields[3])


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


def line_matches(record: LogRecord, q: LogsInput) -> bool:
    """The full match of a parsed line against a query (window, service, level, contains)."""
    return _matches(record, q, q.contains.casefold() if q.contains is not None else None)


class JsonlLogSource:
    """Searches ``<folder>/<service>/<YYYY-MM-DD>/<HH>.jsonl`` files (see module docs)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.stats = ReadStats()
        self._stats_lock = threading.Lock()

    async def search(self, q: LogsInput) -> LogPage:
        """Read only the files of the window's hours, in a worker thread."""
        return await asyncio.to_thread(self._search, q)

    async def aclose(self) -> None:
        """Nothing is held open between queries."""

    def _search(self, q: LogsInput) -> LogPage:
        service_dir = self._service_dir(q.service)
        scan = _Scan()
        needle = q.contains.casefold() if q.contains is not None else None
        try:
            for hour in _hours(q.start, q.end):
                if len(scan.matches) > q.limit:
                    break
                self._scan_hour(
                    service_dir / f"{hour:%Y-%m-%d}" / f"{hour:%H}.jsonl", q, needle, scan
                )
        except OSError as exc:
            logger.warning("log folder unreadable (%s)", type(exc).__name__)
            raise LogSourceError(AdapterErrorCode.UNAVAILABLE) from None
        finally:
            self._record(scan)
        return _newest_page(scan.matches, q.limit)

    def _service_dir(self, service: str) -> Path:
        if not self.folder.is_dir():
            raise LogSourceError(AdapterErrorCode.UNAVAILABLE)
        if service in {".", ".."}:
            raise LogSourceError(AdapterErrorCode.INVALID_INPUT)
        return self.folder / service

    def _scan_hour(self, path: Path, q: LogsInput, needle: str | None, scan: _Scan) -> None:
        if not path.is_file():
            return
        scan.files.append(path.relative_to(self.folder).as_posix())
        prefilter = Prefilter(q)
        with path.open("rb") as handle:
            for raw in _lines(handle):
                scan.lines += 1
                if raw is not None and not raw.strip():
                    continue
                if raw is not None and not prefilter.keeps(raw):
                    continue
                record = parse_line(raw) if raw is not None else None
                if record is None:
                    scan.malformed += 1
                elif _matches(record, q, needle):
                    scan.matches.append(record)

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


def build_logql(q: LogsInput) -> str:
    """The LogQL for a typed input (see module docs for the shape and why)."""
    query = "{service=" + logql_string(q.service) + "}"
    if q.contains is not None:
        query += " |~ " + logql_string(contains_regex(q.contains))
    if q.level is not None:
        query += " | json | level=" + logql_string(q.level.value)
    return query


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


def _from_loki(ns: str, line: str, labels: dict[str, str], service: str) -> LogRecord | None:
    """One Loki entry; a JSON line supplies level and message, else the line is the message.
    ``None`` for an entry whose timestamp is no instant ``datetime`` can hold (skipped)."""
    nanoseconds = int(ns)  # not an integer: off the documented shape (INTERNAL)
    try:
        ts = datetime.fromtimestamp(nanoseconds // 1_000_000_000, tz=UTC) + timedelta(
            microseconds=nanoseconds % 1_000_000_000 // 1_000
        )
    except (ValueError, OverflowError, OSError):
        return None
    level = labels.get("level") or labels.get("detected_level") or ""
    message = line
    try:
        obj = json.loads(line)
    except (ValueError, RecursionError):
        obj = None
    if isinstance(obj, dict):
        level = obj["level"] if isinstance(obj.get("level"), str) else level
        message = obj["message"] if isinstance(obj.get("message"), str) else line
    return LogRecord(ts=ts, service=labels.get("service", service), level=level, message=message)


def parse_loki_response(body: bytes, q: LogsInput) -> LogPage:
    """Merge Loki's streams newest first; anything off the documented shape is ``INTERNAL``."""
    try:
        parsed = _LokiResponse.model_validate_json(body)
        if parsed.status != "success" or parsed.data.result_type != "streams":
            raise ValueError("unexpected Loki result")
        records = [
            _from_loki(value[0], value[1], stream.stream, q.service)
            for stream in parsed.data.result
            for value in stream.values
        ]
    except (ValidationError, ValueError, OverflowError, RecursionError):
        raise LogSourceError(AdapterErrorCode.INTERNAL) from None
    return _newest_page([r for r in records if r is not None and q.start <= r.ts < q.end], q.limit)


def _status_code(status: int) -> AdapterErrorCode | None:
    if 200 <= status < 300:
        return None
    if status in {400, 422}:
        return AdapterErrorCode.INVALID_INPUT
    return AdapterErrorCode.UNAVAILABLE


class LokiLogSource:
    """Queries Grafana Loki's ``query_range`` API over HTTP with a bounded total timeout."""

    def __init__(
        self,
        base_url: str,
        timeout_seconds: float = 10.0,
        max_body_bytes: int = 4 * 1024 * 1024,
    ) -> None:
        self.endpoint = base_url.rstrip("/") + "/loki/api/v1/query_range"
        self.timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self.max_body_bytes = max_body_bytes
        self._session: aiohttp.ClientSession | None = None

    def params(self, q: LogsInput) -> dict[str, str]:
        """Query parameters: ``limit + 1`` lines so truncation is known, newest first."""
        return {
            "query": build_logql(q),
            "start": _unix_ns(q.start),
            "end": _unix_ns(q.end),
            "limit": str(q.limit + 1),
            "direction": "backward",
        }

    async def search(self, q: LogsInput) -> LogPage:
        """One request; timeouts, refusals and HTTP errors become stable codes."""
        try:
            body = await self._get(self.params(q))
        except TimeoutError:
            raise LogSourceError(AdapterErrorCode.TIMEOUT) from None
        except aiohttp.InvalidURL:
            raise LogSourceError(AdapterErrorCode.NOT_CONFIGURED) from None
        except aiohttp.ClientError as exc:
            logger.warning("loki request failed (%s)", type(exc).__name__)
            raise LogSourceError(AdapterErrorCode.UNAVAILABLE) from None
        # Up to max_body_bytes of JSON: parsed in a worker thread, off the event loop.
        return await asyncio.to_thread(parse_loki_response, body, q)

    async def _get(self, params: dict[str, str]) -> bytes:
        if self._session is None or self._session.closed:
            self._session = aiohttp.ClientSession(timeout=self.timeout)
        async with self._session.get(self.endpoint, params=params) as response:
            code = _status_code(response.status)
            if code is not None:
                logger.warning("loki answered HTTP %d", response.status)
                raise LogSourceError(code)
            body = await response.content.read(self.max_body_bytes + 1)
        if len(body) > self.max_body_bytes:
            raise LogSourceError(AdapterErrorCode.INTERNAL)
        return body

    async def aclose(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None


class UnconfiguredLogSource:
    """``DIAG_LOGS_SOURCE`` unset: every query answers ``NOT_CONFIGURED`` (never demo data)."""

    async def search(self, q: LogsInput) -> LogPage:
        raise LogSourceError(AdapterErrorCode.NOT_CONFIGURED)

    async def aclose(self) -> None:
        """Nothing to release."""


def build_log_source(logs_source: str | None) -> LogSource:
    """``http(s)://…`` is a Loki base URL; anything else is a folder in the layout above; unset
    (``None`` or blank) is :class:`UnconfiguredLogSource`."""
    if logs_source is None or not logs_source.strip():
        return UnconfiguredLogSource()
    if re.match(r"(?i)https?://", logs_source):
        return LokiLogSource(logs_source)
    return JsonlLogSource(Path(logs_source))
