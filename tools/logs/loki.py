"""The Loki log source: ``query_range`` over HTTP, one total timeout and a decoded byte cap.

:class:`LokiLogSource` sends the sample (the newest :data:`SAMPLE_LINES` matching lines) and the
``count_over_time`` metric query concurrently, and the oldest match when the sample does not
hold every match; every answer is read to its end (chunked, gzip or deflate) under one total
timeout and a decoded byte cap (:func:`read_body`); parsing, counting and masking run in a
worker thread. Basic auth comes from the URL; ``org_id`` is sent as ``X-Scope-OrgID``.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import aiohttp
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from yarl import URL

from sre_diag.log import log_failure
from sre_diag.tools.base import AdapterErrorCode, ProbeReport
from sre_diag.tools.errors import BodyTooLarge
from sre_diag.tools.logs.labels import LabelValues
from sre_diag.tools.logs.logql import (
    LABEL_NAME,
    LINE_FORMATS,
    build_count_logql,
    build_edge_count_logql,
    build_logql,
    casefold_regex,
    unix_ns,
)
from sre_diag.tools.logs.probe import probe_loki
from sre_diag.tools.logs.source import (
    FIRST_ITEMS,
    MASK_SECONDS,
    MAX_LINE_BYTES,
    LogPage,
    LogRecord,
    LogSourceError,
    newest_page,
)
from sre_diag.tools.logs.summary import Grid, Tally
from sre_diag.tools.schemas import SERVICE_NAME, LogsInput, LogSummary
from sre_diag.tools.threads import Stop, in_thread

__all__ = [
    "LABELS_MAX_BYTES",
    "READ_CHUNK_BYTES",
    "SAMPLE_LINES",
    "BodyTooLarge",
    "LokiLogSource",
    "parse_loki_counts",
    "parse_loki_response",
    "read_body",
]

# The package's logger: lines keep the name they had before the package was split.
logger = logging.getLogger(__package__)

SAMPLE_LINES = 500  # newest lines read for the items and the patterns of a Loki summary


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
    return newest_page(_loki_records(body, q, shape), q.limit)


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


def parse_loki_total(body: bytes) -> int:
    """The sum of every point of a ``count_over_time`` matrix (the edge bucket's one point)."""
    try:
        parsed = _LokiMatrix.model_validate_json(body)
        if parsed.status != "success" or parsed.data.result_type != "matrix":
            raise ValueError("unexpected Loki result")
        return sum(
            max(int(float(value)), 0) for series in parsed.data.result for _, value in series.values
        )
    except (ValidationError, ValueError, OverflowError):
        raise LogSourceError(AdapterErrorCode.INTERNAL) from None


def _full_buckets(q: LogsInput, grid: Grid) -> int:
    """The buckets that end inside the window (the last one may be cut by its end)."""
    return min(grid.count, (q.end - grid.start) // timedelta(seconds=grid.width_seconds))


def _before(ts: datetime) -> str:
    """One nanosecond before ``ts``, as Loki's ``start``/``end``: a ``count_over_time``
    evaluated there counts ``(t - range, t]``, i.e. ``[t - range, t)`` for the instant ``t``
    of a bucket's end — a line at the bucket's start in, one at its end out."""
    return str(int(unix_ns(ts)) - 1)


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
        tally.first = min(record.ts for record in first)
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
    page = newest_page(sample, q.limit)
    stop.check()
    summary = _loki_summary(stop, sample, first is None, counts, first or [], grid)
    oldest = page.first_items if first is None else newest_page(first, 0).first_items
    return LogPage(
        items=page.items,
        truncated=summary.matched > len(page.items),
        summary=summary,
        first_items=oldest,
    )


async def _all(*requests: Awaitable[bytes]) -> list[bytes]:
    """Every answer; when one request fails, the others are cancelled (never left running)."""
    tasks = [asyncio.ensure_future(request) for request in requests]
    try:
        return list(await asyncio.gather(*tasks))
    finally:
        for task in tasks:
            task.cancel()
        await asyncio.wait(tasks)


async def _nothing() -> bytes:
    return b""


READ_CHUNK_BYTES = 64 * 1024
# A label-values answer (the services catalogue) is read as a stream in bounded memory
# (:mod:`sre_diag.tools.logs.labels`); this only bounds the time its parsing may take.
LABELS_MAX_BYTES = 256 * 1024 * 1024


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
        self._base_url = base_url
        self._org_id = org_id
        self.endpoint, self.authorization = _split_auth(base_url)
        self.labels_endpoint = f"{self.endpoint}/loki/api/v1/label/{service_label}/values"
        self.endpoint += "/loki/api/v1/query_range"
        self.headers = {"X-Scope-OrgID": org_id} if org_id else {}
        self.timeout = aiohttp.ClientTimeout(total=timeout_seconds)
        self.max_body_bytes = max_body_bytes
        self.sample_lines = sample_lines
        self.mask_seconds = mask_seconds
        self._session: aiohttp.ClientSession | None = None
        casefold_regex("")  # reads the case folding table now, not on the event loop

    def params(self, q: LogsInput) -> dict[str, str]:
        """The sample: the newest lines of the window, at least ``limit + 1``."""
        return {
            "query": build_logql(q, self.shape.label, self.shape.line_format),
            "start": unix_ns(q.start),
            "end": unix_ns(q.end),
            "limit": str(max(q.limit + 1, self.sample_lines)),
            "direction": "backward",
        }

    def count_params(self, q: LogsInput, grid: Grid) -> dict[str, str] | None:
        """The metric query: one point just before the end of each bucket that ends inside
        the window, stepped by its width (see :func:`_before`); ``None`` when none does."""
        width = timedelta(seconds=grid.width_seconds)
        full = _full_buckets(q, grid)
        if full == 0:
            return None
        return {
            "query": build_count_logql(q, grid, self.shape.label, self.shape.line_format),
            "start": _before(grid.start + width),
            "end": _before(grid.start + width * full),
            "step": f"{grid.width_seconds}s",
        }

    def edge_params(self, q: LogsInput, grid: Grid) -> dict[str, str] | None:
        """The last bucket when the window's end cuts it: its lines from its start to the
        window's end, one point just before that end; ``None`` when no bucket is cut."""
        full = _full_buckets(q, grid)
        if full == grid.count:
            return None
        start = grid.start + timedelta(seconds=grid.width_seconds) * full
        query = build_edge_count_logql(q, q.end - start, self.shape.label, self.shape.line_format)
        at = _before(q.end)
        return {"query": query, "start": at, "end": at, "step": f"{grid.width_seconds}s"}

    def first_params(self, q: LogsInput) -> dict[str, str]:
        """The oldest matching lines (the page's ``first_items``, the summary's ``first_ts``)."""
        return {**self.params(q), "limit": str(FIRST_ITEMS), "direction": "forward"}

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
            log_failure(logger, logging.WARNING, "loki request failed (%s)", exc=exc)
            raise LogSourceError(AdapterErrorCode.UNAVAILABLE) from None
        return await in_thread(_loki_page, Stop(self.mask_seconds), q, sample, counts, first, grid)

    async def _fetch(
        self, q: LogsInput, grid: Grid
    ) -> tuple[list[LogRecord], list[int], list[LogRecord] | None]:
        """The sample's records, the bucket counts and, when the sample does not hold every
        match, the oldest match (``None`` when it does)."""
        count_query, edge_query = self.count_params(q, grid), self.edge_params(q, grid)
        sample_body, count_body, edge_body = await _all(
            self._get(self.params(q)),
            self._get(count_query) if count_query is not None else _nothing(),
            self._get(edge_query) if edge_query is not None else _nothing(),
        )
        # Up to max_body_bytes of JSON each: parsed in a worker thread, off the event loop.
        sample = await asyncio.to_thread(_loki_records, sample_body, q, self.shape)
        counts = [0] * grid.count
        if count_query is not None:
            counts = await asyncio.to_thread(parse_loki_counts, count_body, grid)
        if edge_query is not None:
            counts[-1] = await asyncio.to_thread(parse_loki_total, edge_body)
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
        params = {"start": unix_ns(end - timedelta(hours=24)), "end": unix_ns(end)}
        reader = LabelValues(limit, lambda value: SERVICE_NAME.fullmatch(value) is not None)
        try:
            await self._stream(params, self.labels_endpoint, reader.feed, LABELS_MAX_BYTES)
        except TimeoutError:
            raise LogSourceError(AdapterErrorCode.TIMEOUT) from None
        except (aiohttp.ClientError, OSError) as exc:
            log_failure(logger, logging.WARNING, "loki label request failed (%s)", exc=exc)
            raise LogSourceError(AdapterErrorCode.UNAVAILABLE) from None
        except (ValueError, RecursionError):
            raise LogSourceError(AdapterErrorCode.INTERNAL) from None
        try:
            return reader.result()
        except ValueError:
            raise LogSourceError(AdapterErrorCode.INTERNAL) from None

    async def _stream(
        self,
        params: dict[str, str],
        endpoint: str,
        consume: Callable[[bytes], None],
        max_bytes: int,
    ) -> None:
        """One GET whose decoded body is handed to ``consume`` chunk by chunk, in a worker
        thread (parsing is CPU work), under the total timeout; past ``max_bytes``
        :class:`BodyTooLarge`."""
        async with asyncio.timeout(self.timeout.total):
            async with self._client().get(endpoint, params=params) as response:
                code = _status_code(response.status)
                if code is not None:
                    logger.warning("loki answered HTTP %d", response.status)
                    raise LogSourceError(code)
                size = 0
                async for chunk in response.content.iter_chunked(READ_CHUNK_BYTES):
                    size += len(chunk)
                    if size > max_bytes:
                        logger.warning("loki answer over the %d byte cap", max_bytes)
                        raise BodyTooLarge(max_bytes)
                    await asyncio.to_thread(consume, chunk)

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

    async def probe(self) -> ProbeReport:
        """One bounded GET of the service label's values (the base URL as configured)."""
        return await probe_loki(self._base_url, self.shape.label, self._org_id)

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
