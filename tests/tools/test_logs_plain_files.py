"""Plain-text log files in the folder source answer ``query_logs`` exactly as the JSON-lines
hour files holding the same entries do.

The bundled incident's ``payment-api`` lines are written in each plain format (and as a rotated
set with a gzip rotation); the reference is a JSON-lines folder of the same entries as each
format can carry them: the time cut to the format's precision (seconds for syslog, nginx and
access logs, milliseconds for Python logging and Log4j), ``DEBUG`` as ``INFO`` where the format
has no such level (klog, access logs), the message as the format shows it (an access log's
message is its whole line, an nginx error's starts with ``pid#tid:``). Every other field — the
items, their order, ``truncated``, the whole summary, ``first_items`` — must be identical.
"""

from __future__ import annotations

import asyncio
import gzip
import json
import os
from collections.abc import Callable
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest

from sre_diag.tools.base import AdapterCall, Ready
from sre_diag.tools.logs import JsonlLogSource, LogsAdapter
from sre_diag.tools.schemas import LogItem, LogLevel, LogsInput, LogSummary

INCIDENT = Path(__file__).resolve().parents[2] / "examples" / "incident" / "logs"
SERVICE = "payment-api"
DAY = datetime(2026, 11, 28, tzinfo=UTC)
BOUND_SECONDS = 20.0

Entry = tuple[datetime, str, str]  # ts (UTC), level, message
Format = Callable[[int, Entry], tuple[str, Entry]]  # a line and the entry it must read as


def _entries() -> list[Entry]:
    entries = []
    for hour_file in sorted((INCIDENT / SERVICE).glob("*/*.jsonl")):
        for raw in hour_file.read_text(encoding="utf-8").splitlines():
            obj = json.loads(raw)
            ts = datetime.fromisoformat(obj["ts"]).astimezone(UTC)
            entries.append((ts, obj["level"], obj["message"]))
    return entries


def _cut(ts: datetime, digits: int) -> datetime:
    return ts.replace(microsecond=ts.microsecond // 10 ** (6 - digits) * 10 ** (6 - digits))


def _iso_offset(_: int, entry: Entry) -> tuple[str, Entry]:
    ts, level, message = entry
    local = ts.astimezone(timezone(timedelta(hours=2)))
    return f"{local.isoformat(timespec='microseconds')} {level} {message}", entry


def _python(_: int, entry: Entry) -> tuple[str, Entry]:
    ts, level, message = _cut(entry[0], 3), entry[1], entry[2]
    text = f"{ts:%Y-%m-%d %H:%M:%S},{ts.microsecond // 1000:03d} - payments.api - {level} - "
    return text + message, (ts, level, message)


def _log4j(_: int, entry: Entry) -> tuple[str, Entry]:
    ts, level, message = _cut(entry[0], 3), entry[1], entry[2]
    stamp = f"{ts:%Y-%m-%d %H:%M:%S}.{ts.microsecond // 1000:03d}"
    return f"{stamp} {level:<5} [http-nio-8080-exec-7] c.shop.PaymentController - {message}", (
        ts, level, message,
    )  # fmt: skip


def _syslog(_: int, entry: Entry) -> tuple[str, Entry]:
    ts, level, message = _cut(entry[0], 0), entry[1], entry[2]
    return f"{ts:%b} {ts.day:>2} {ts:%H:%M:%S} pay-7d9f8 payment-api[4242]: {level} {message}", (
        ts, level, message,
    )  # fmt: skip


def _klog(_: int, entry: Entry) -> tuple[str, Entry]:
    ts, level, message = entry
    letter = {"ERROR": "E", "WARN": "W"}.get(level, "I")
    kept = {"E": "ERROR", "W": "WARN", "I": "INFO"}[letter]
    return f"{letter}{ts:%m%d %H:%M:%S.%f}    4242 handler.go:88] {message}", (ts, kept, message)


def _nginx_error(_: int, entry: Entry) -> tuple[str, Entry]:
    ts, level, message = _cut(entry[0], 0), entry[1], entry[2]
    word = {"ERROR": "error", "WARN": "warn", "INFO": "info", "DEBUG": "debug"}[level]
    return f"{ts:%Y/%m/%d %H:%M:%S} [{word}] 31#31: {message}", (ts, level, f"31#31: {message}")


def _access(index: int, entry: Entry) -> tuple[str, Entry]:
    ts, level, message = _cut(entry[0], 0), entry[1], entry[2]
    status = {"ERROR": 503, "WARN": 429}.get(level, 200)
    kept = {503: "ERROR", 429: "WARN", 200: "INFO"}[status]
    quoted = message.replace('"', "'")
    line = (
        f'10.0.{index % 250}.7 - - [{ts:%d/%b/%Y:%H:%M:%S} +0000] "POST /v1/payments HTTP/1.1" '
        f'{status} {index % 9000} "-" "{quoted}"'
    )
    return line, (ts, kept, line)


FORMATS: dict[str, Format] = {
    "iso-offset": _iso_offset,
    "python": _python,
    "log4j": _log4j,
    "syslog": _syslog,
    "klog": _klog,
    "nginx-error": _nginx_error,
    "access": _access,
}


def _reference(folder: Path, entries: list[Entry]) -> None:
    """The entries as JSON-lines hour files, each hour's lines in the order given."""
    hours: dict[str, list[str]] = {}
    for ts, level, message in entries:
        record = {"ts": ts.isoformat(), "service": SERVICE, "level": level, "message": message}
        hours.setdefault(f"{ts:%Y-%m-%d}/{ts:%H}.jsonl", []).append(json.dumps(record))
    for rel, lines in hours.items():
        path = folder / SERVICE / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def _pair(tmp_path: Path, form: Format) -> tuple[Path, Path, list[str]]:
    """The plain folder (its lines returned too) and the JSON-lines folder it must match."""
    plain, reference = tmp_path / "plain", tmp_path / "reference"
    converted = [form(i, entry) for i, entry in enumerate(_entries())]
    _reference(reference, [entry for _, entry in converted])
    (plain / SERVICE).mkdir(parents=True)
    return plain, reference, [line for line, _ in converted]


def _queries() -> list[LogsInput]:
    def q(start: datetime, end: datetime, **extra: object) -> LogsInput:
        return LogsInput.model_validate({"service": SERVICE, "start": start, "end": end, **extra})

    onset = DAY.replace(hour=10, minute=5)  # the second of the first error: an edge on lines
    return [
        q(DAY, DAY + timedelta(days=1), limit=50),
        q(onset, onset + timedelta(minutes=7), level=LogLevel.ERROR),
        q(onset + timedelta(seconds=1), onset + timedelta(seconds=3)),
        q(DAY.replace(hour=9), DAY.replace(hour=13), contains="pool EXHAUSTED", limit=5),
        q(DAY.replace(hour=9, minute=59, second=59), DAY.replace(hour=10, minute=5), limit=1),
        q(DAY.replace(hour=10), DAY.replace(hour=14), level=LogLevel.WARN, contains="ms"),
        q(DAY - timedelta(days=2), DAY - timedelta(days=1)),
    ]


async def _answer(source: JsonlLogSource, q: LogsInput) -> Ready:
    async with asyncio.timeout(BOUND_SECONDS):
        result = await LogsAdapter(source).invoke(AdapterCall("c", "r", q))
    assert isinstance(result, Ready), result
    return result


async def _same_answers(plain: Path, reference: Path, **options: int | None) -> None:
    plain_source = JsonlLogSource(plain, **options)  # type: ignore[arg-type]
    reference_source = JsonlLogSource(reference, **options)  # type: ignore[arg-type]
    try:
        for q in _queries():
            got, want = await _answer(plain_source, q), await _answer(reference_source, q)
            assert got == want, q
            assert plain_source.stats.malformed_lines == 0
    finally:
        await plain_source.aclose()
        await reference_source.aclose()


@pytest.mark.parametrize("name", sorted(FORMATS))
async def test_each_plain_format_answers_like_its_json_lines(tmp_path: Path, name: str) -> None:
    plain, reference, lines = _pair(tmp_path, FORMATS[name])
    (plain / SERVICE / "app.log").write_text("".join(f"{line}\n" for line in lines))
    await _same_answers(plain, reference)
    matched = await _answer(JsonlLogSource(plain), _queries()[0])
    assert isinstance(matched.summary, LogSummary) and matched.summary.matched == len(lines)


async def test_rotated_set_with_gzip_answers_like_its_json_lines(tmp_path: Path) -> None:
    """Oldest in ``app.log.2.gz``, then ``app.log.1``, newest in ``app.log``; read by one child
    process too (the large-window path), with the same answers."""
    plain, reference, lines = _pair(tmp_path, _iso_offset)
    third = len(lines) // 3
    chunks = [lines[:third], lines[third : 2 * third], lines[2 * third :]]
    folder = plain / SERVICE
    with gzip.open(folder / "app.log.2.gz", "wt", encoding="utf-8") as oldest:
        oldest.write("".join(f"{line}\n" for line in chunks[0]))
    (folder / "app.log.1").write_text("".join(f"{line}\n" for line in chunks[1]))
    (folder / "app.log").write_text("".join(f"{line}\n" for line in chunks[2]))
    await _same_answers(plain, reference)
    await _same_answers(plain, reference, process_bytes=1, workers=1)
    source = JsonlLogSource(plain)
    await _answer(source, _queries()[0])
    assert source.stats.last_files == tuple(
        f"{SERVICE}/{name}" for name in ("app.log.2.gz", "app.log.1", "app.log")
    )


def _service(tmp_path: Path) -> Path:
    folder = tmp_path / "logs" / "svc"
    folder.mkdir(parents=True)
    return folder


def _day(**extra: object) -> LogsInput:
    return LogsInput.model_validate(
        {"service": "svc", "start": DAY, "end": DAY + timedelta(days=1), **extra}
    )


async def test_stack_traces_join_their_line_and_untimed_lines_are_skipped(tmp_path: Path) -> None:
    service = _service(tmp_path)
    (service / "worker.log").write_text(
        "\ufefforphan line before any time\n"
        "    indented orphan\n"
        "2026-11-28 10:00:00,100 - worker - ERROR - job failed\n"
        "Traceback (most recent call last):\n"
        '  File "job.py", line 3, in run\n'
        "ValueError: bad row\n"
        "2026-11-28 10:00:01,000 ERROR [main] c.shop.Job - java failure\n"
        "java.lang.IllegalStateException: closed\n"
        "\tat c.shop.Job.run(Job.java:42)\n"
        "Caused by: java.io.IOException: reset\n"
        "\t... 3 more\n"
        "a stray untimed line\n"
        "    not a continuation any more\n"
        "ERROR:root:python without a time\n"
        "\ufeff2026-11-28T10:00:02Z INFO done\r\n"
    )
    source = JsonlLogSource(service.parent)
    result = await _answer(source, _day())
    messages = [item.message for item in result.items if isinstance(item, LogItem)]
    assert messages[0] == "done"
    assert messages[2].startswith("job failed\nTraceback (most recent call last):\n  File ")
    assert messages[2].endswith("\nValueError: bad row")
    assert messages[1] == (
        "java failure\njava.lang.IllegalStateException: closed\n\tat c.shop.Job.run(Job.java:42)"
        "\nCaused by: java.io.IOException: reset\n\t... 3 more"
    )
    # Two orphans before any time, the stray line, the indented line after it (a skipped line
    # ends the entry above) and the untimed Python line.
    assert source.stats.malformed_lines == 5
    assert isinstance(result.summary, LogSummary) and result.summary.matched == 3
    filtered = await _answer(source, _day(contains="valueerror"))
    assert [item.message for item in filtered.items if isinstance(item, LogItem)] == [messages[2]]


async def test_a_java_trace_after_its_line_belongs_to_it(tmp_path: Path) -> None:
    service = _service(tmp_path)
    trace = "\tat c.shop.Job.run(Job.java:42)\n" * 500 + "Caused by: java.io.IOException\n"
    head = "2026-11-28 10:00:01,000 ERROR [main] c.Job - failed\n"
    (service / "app.log").write_text(head + trace)
    source = JsonlLogSource(service.parent)
    result = await _answer(source, _day(contains="ioexception"))
    # Bounded: 200 continuation lines at most, so the closing line is not kept.
    assert result.items == []
    whole = await _answer(source, _day())
    assert source.stats.malformed_lines == 0
    assert isinstance(whole.summary, LogSummary) and whole.summary.matched == 1


async def test_links_fifos_and_old_files_are_not_read(tmp_path: Path) -> None:
    service = _service(tmp_path)
    outside = tmp_path / "secret.log"
    outside.write_text("2026-11-28T10:00:00Z ERROR secret outside the folder\n")
    (service / "linked.log").symlink_to(outside)
    os.link(outside, service / "hard.log")
    os.mkfifo(service / "pipe.log")
    old = service / "old.log.3"
    old.write_text("2026-11-28T10:00:00Z ERROR written long before the window\n")
    week_before = (DAY - timedelta(days=7)).timestamp()
    os.utime(old, (week_before, week_before))
    (service / "app.log").write_text("2026-11-28T10:00:00Z ERROR regular\n")
    (tmp_path / "logs" / "other").symlink_to(service)
    source = JsonlLogSource(service.parent)
    result = await _answer(source, _day())
    assert [item.message for item in result.items if isinstance(item, LogItem)] == ["regular"]
    assert source.stats.last_files == ("svc/app.log",)
    other = LogsInput.model_validate({**_day().model_dump(), "service": "other"})
    linked = await _answer(source, other)
    assert linked.items == []


async def test_a_gzip_bomb_is_read_only_to_the_byte_cap(tmp_path: Path) -> None:
    service = _service(tmp_path)
    line = b"2026-11-28T10:00:00Z ERROR bomb line\n"
    repeat = (64 * 1024 * 1024) // len(line)  # 64 MiB inflated, a few hundred KB on disk
    with gzip.open(service / "bomb.log.1.gz", "wb", compresslevel=9) as bomb:
        for _ in range(64):
            bomb.write(line * (repeat // 64))
    assert (service / "bomb.log.1.gz").stat().st_size < 1024 * 1024
    cap = 1024 * 1024
    source = JsonlLogSource(service.parent, plain_bytes=cap)
    result = await _answer(source, _day())
    assert isinstance(result.summary, LogSummary)
    assert 0 < result.summary.matched <= cap // len(line) + 1
    assert result.summary.exact is False
    assert source.stats.lines_read <= cap // len(line) + 2


async def test_a_corrupt_gzip_keeps_what_was_read(tmp_path: Path) -> None:
    service = _service(tmp_path)
    packed = gzip.compress(b"2026-11-28T10:00:00Z WARN first\n" * 1000)
    (service / "app.log.gz").write_bytes(packed[: len(packed) // 2] + b"\x00garbage" * 50)
    result = await _answer(JsonlLogSource(service.parent), _day())
    assert isinstance(result.summary, LogSummary)
    assert result.summary.exact is False and result.summary.matched >= 1


_END = datetime(2026, 11, 28, 12, tzinfo=UTC)


@pytest.mark.parametrize(
    ("line", "ts", "level", "message"),
    [
        ("2026-11-28T10:05:00Z FATAL gone", "2026-11-28T10:05:00+00:00", "ERROR", "gone"),
        ("2026-11-28 10:05:00 no zone is UTC",
         "2026-11-28T10:05:00+00:00", "INFO", "no zone is UTC"),
        ("2026-11-28T11:05:00.5-0130 [warning] x", "2026-11-28T12:35:00.500000+00:00", "WARN", "x"),
        ("2026-11-28 10:05:00,1 - a b - CRITICAL - m",
         "2026-11-28T10:05:00.100000+00:00", "ERROR", "m"),
        ("2026-11-28 10:05:00.123 TRACE [t] c.X - m",
         "2026-11-28T10:05:00.123000+00:00", "DEBUG", "m"),
        ("Nov 28 10:05:00 h cron[9]: notice: ran", "2026-11-28T10:05:00+00:00", "INFO", "ran"),
        ("Dec 31 23:59:59 h app: WARN y", "2025-12-31T23:59:59+00:00", "WARN", "y"),
        ('::1 - - [28/Nov/2026:10:05:00 -0500] "GET / HTTP/2" 404', "2026-11-28T15:05:00+00:00",
         "WARN", None),
        ('h - u [28/Nov/2026:10:05:00 +0000] "-" 500 0',
         "2026-11-28T10:05:00+00:00", "ERROR", None),
        ("2026/11/28 10:05:00 [crit] 1#1: z", "2026-11-28T10:05:00+00:00", "ERROR", "1#1: z"),
        ("W1128 10:05:00.000001 1 a.go:1] k", "2026-11-28T10:05:00.000001+00:00", "WARN", "k"),
        ("2026-11-28T10:05:00+01 ERROR h", "2026-11-28T09:05:00+00:00", "ERROR", "h"),
    ],
)  # fmt: skip
def test_formats_read_time_level_and_message(
    line: str, ts: str, level: str, message: str | None
) -> None:
    from sre_diag.tools.logs.plain import parse_plain

    parsed = parse_plain(line, _END)
    assert parsed is not None
    assert (parsed[0].isoformat(), parsed[1]) == (ts, level)
    assert parsed[2] == (line if message is None else message)


@pytest.mark.parametrize(
    "line",
    [
        "ERROR:root:python logging without a time",
        "2026-02-30 10:00:00 no such day",
        "2026-11-28T25:00:00Z no such hour",
        "Feb 30 10:00:00 h app: no such day",
        "Foo 28 10:00:00 h app: no such month",
        "E1340 10:00:00.1 1 a.go:1] no such month",
        '1 - - [28/Nov/2026:10:00:00 +0000] "GET /" 99x',
        "9999-12-31T23:59:59-23:59 past the calendar",
        "plain text",
    ],
)
def test_lines_without_a_readable_time_have_none(line: str) -> None:
    from sre_diag.tools.logs.plain import parse_plain

    assert parse_plain(line, _END) is None


async def test_hour_files_and_plain_files_of_a_service_are_read_together(tmp_path: Path) -> None:
    service = _service(tmp_path)
    hour = service / "2026-11-28" / "10.jsonl"
    hour.parent.mkdir()
    record = {"ts": "2026-11-28T10:00:01Z", "service": "svc", "level": "ERROR", "message": "json"}
    hour.write_text(json.dumps(record) + "\n")
    (service / "app.log").write_text("2026-11-28T10:00:02Z ERROR plain\n")
    source = JsonlLogSource(service.parent)
    result = await _answer(source, _day(level=LogLevel.ERROR))
    assert [item.message for item in result.items if isinstance(item, LogItem)] == [
        "plain",
        "json",
    ]
    assert source.stats.last_files == ("svc/2026-11-28/10.jsonl", "svc/app.log")
